"""Exceptions: one class per status code of the C API (gRPC's codes)."""

from __future__ import annotations

from typing import Dict, Type

from . import _capi


class Error(Exception):
    """A gputune call failed. `code` is the status code's name, `message`
    what was wrong and what to do."""

    code = "UNKNOWN"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class Cancelled(Error):
    code = "CANCELLED"


class Unknown(Error):
    code = "UNKNOWN"


class InvalidArgument(Error, ValueError):
    code = "INVALID_ARGUMENT"


class DeadlineExceeded(Error, TimeoutError):
    code = "DEADLINE_EXCEEDED"


class NotFound(Error, LookupError):
    code = "NOT_FOUND"


class AlreadyExists(Error):
    code = "ALREADY_EXISTS"


class PermissionDenied(Error, PermissionError):
    code = "PERMISSION_DENIED"


class ResourceExhausted(Error):
    code = "RESOURCE_EXHAUSTED"


class FailedPrecondition(Error):
    code = "FAILED_PRECONDITION"


class Aborted(Error):
    code = "ABORTED"


class OutOfRange(Error, IndexError):
    code = "OUT_OF_RANGE"


class Unimplemented(Error, NotImplementedError):
    code = "UNIMPLEMENTED"


class Internal(Error):
    code = "INTERNAL"


class Unavailable(Error, ConnectionError):
    code = "UNAVAILABLE"


class DataLoss(Error):
    code = "DATA_LOSS"


class Unauthenticated(Error):
    code = "UNAUTHENTICATED"


# Each class above by its `code`: the C API names a numeric code
# (gputune_code_name, "UNKNOWN" for one it does not know), so the numbers
# live in one table, libgputune's.
_BY_NAME: Dict[str, Type[Error]] = {cls.code: cls for cls in Error.__subclasses__()}


def error_for(code: int) -> Error:
    """The exception for a failed C call, with this thread's last message."""
    message = (_capi.last_error() or b"").decode("utf-8", "replace")
    name = (_capi.code_name(code) or b"UNKNOWN").decode("ascii", "replace")
    return _BY_NAME.get(name, Unknown)(message)


def check(code: int) -> None:
    """Raises the exception for a non-zero C status code."""
    if code != 0:
        raise error_for(code)
