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
from ._capi import LibraryNotFound
from ._capi import version as _version
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

__version__ = _version().decode()


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
]

# The public names print as gputune.X (where they are meant to be used from).
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
