"""gputune: the Python client of gputuned, the per-GPU tuning daemon.

    import gputune
    client = gputune.Client()                      # $GPUTUNE_ENDPOINT or gpu0's
    key = gputune.Key("dense_bf16/decode/attn.qkv/m=1/k=4096/n=6144@cs1")
    client.preload([key])                          # one RPC at start-up
    r = client.lookup(key)                         # memo hit: no I/O
    if r.hit:
        print(r.execution.kernel, dict(r.execution))

A thin layer over libgputune's C API (ctypes): one memo, one circuit breaker
and one lease renewer per client, the C++ client's. gputune.torch runs
dense layers with the tuned executions.

Importing the package does not load libgputune: the first call that needs
it does, and raises gputune.LibraryNotFound, saying what it tried, when the
library is not where the loader looks; set $GPUTUNE_LIBRARY to the path of
libgputune.so.0 then. __version__ is the package's (the project's version);
library_version() is the loaded libgputune's.
"""

from ._errors import (
    Aborted,
    AlreadyExists,
    Cancelled,
    DataLoss,
    DeadlineExceeded,
    Error,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    Unimplemented,
    Unknown,
)
from . import _capi
from ._capi import LibraryNotFound
from ._version import __version__
from .client import (
    Claim,
    ClaimOutcome,
    Client,
    Execution,
    Key,
    LookupResult,
    Measurement,
    Phase,
    State,
    Validation,
    Watch,
)
from .dense import DenseRunner, DenseRun


def library_version() -> str:
    """The version of the libgputune this process loaded (e.g. "0.1.0"),
    loading it if no call has yet. Raises LibraryNotFound as any first use
    does."""
    return _capi.version().decode()


__all__ = [
    "Client",
    "Key",
    "Execution",
    "Measurement",
    "LookupResult",
    "Claim",
    "Watch",
    "DenseRunner",
    "DenseRun",
    "State",
    "Phase",
    "ClaimOutcome",
    "Validation",
    "Error",
    "Cancelled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
    "LibraryNotFound",
    "library_version",
]

# The public names print as gputune.X (where they are meant to be used from).
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
