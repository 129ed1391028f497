"""gputune.DenseRunner: runs a tuned dense_bf16 execution in this process,
on the caller's CUDA stream and device pointers (gputune_dense_run)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Optional

from . import _capi
from ._errors import check, error_for
from .client import LookupResult


@dataclass
class DenseRun:
    """What ran: the execution, or the default when it could not (why)."""

    fell_back: bool
    reason: str


class DenseRunner:
    """Binds to the CUDA device current on the calling thread. Raises
    gputune.FailedPrecondition when libgputune was built without CUDA or no
    device is usable (the message says which). Not thread-safe: one runner
    per thread.

    A context manager: `with gputune.DenseRunner() as runner:` closes it when
    the block ends, as close() does; a closed runner's run() raises
    ValueError."""

    def __init__(self) -> None:
        h = ctypes.c_void_p()
        check(_capi.dense_runner_create(ctypes.byref(h)))
        self._h = h.value

    def run(
        self,
        result: Optional[LookupResult],
        m: int,
        n: int,
        k: int,
        x: int,
        w: int,
        y: int,
        stream: int = 0,
        workspace: int = 0,
        workspace_bytes: int = 0,
    ) -> DenseRun:
        """Enqueues y[M,N] = x[M,K] W[N,K]^T (row-major bf16 device pointers,
        as ints) with result's execution, or the default when result is None
        or holds none."""
        if self.closed:
            raise ValueError("run() on a closed gputune.DenseRunner")
        args = _capi.DenseArgs(
            struct_size=ctypes.sizeof(_capi.DenseArgs),
            m=m,
            n=n,
            k=k,
            x=x,
            w=w,
            y=y,
            stream=stream or None,
            workspace=workspace or None,
            workspace_bytes=workspace_bytes,
        )
        fell_back = ctypes.c_int()
        code = _capi.dense_run(
            self._h, result._h if result is not None else None, ctypes.byref(args),
            ctypes.byref(fell_back),
        )
        if code:
            raise error_for(code)
        reason = ""
        if fell_back.value:
            reason = (_capi.dense_runner_fallback_reason(self._h) or b"").decode()
        return DenseRun(bool(fell_back.value), reason)

    @property
    def closed(self) -> bool:
        """Whether close() ran (or the constructor failed)."""
        return not getattr(self, "_h", None)

    def close(self) -> None:
        """Frees the runner; a second call does nothing."""
        if getattr(self, "_h", None):
            _capi.dense_runner_free(self._h)
            self._h = None

    def __enter__(self) -> "DenseRunner":
        return self

    def __exit__(self, *exc: object) -> bool:
        self.close()
        return False

    def __del__(self) -> None:
        self.close()
