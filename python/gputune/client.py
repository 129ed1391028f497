"""The Python client: gputune.Client and what its calls return.

A thin layer over the C API (gputune.h) through ctypes, so one process has
one memo, one circuit breaker and one lease renewer, those of the C++
client inside libgputune. Every call has the client's deadlines; a call that
fails raises the exception of its status code (gputune.Unavailable,
gputune.InvalidArgument, ...), whose message says what to do.
"""

from __future__ import annotations

import ctypes
import enum
import json
from dataclasses import dataclass
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from . import _capi
from ._errors import InvalidArgument, OutOfRange, check, error_for

__all__ = [
    "State",
    "Phase",
    "ClaimOutcome",
    "Validation",
    "Key",
    "Execution",
    "Measurement",
    "LookupResult",
    "Claim",
    "Watch",
    "Client",
]


class _Named(enum.IntEnum):
    """Prints as its name (an IntEnum prints as its number)."""

    def __str__(self) -> str:
        return self.name


class State(_Named):
    """A key's state (tune.proto KeyState). UNSPECIFIED: an empty result
    (try_lookup found nothing memoised)."""

    UNSPECIFIED = 0
    MISS = 1
    PENDING = 2
    HIT = 3
    STALE = 4
    BACKOFF = 5


class Phase(_Named):
    UNSPECIFIED = 0
    PREFILL = 1
    DECODE = 2


class ClaimOutcome(_Named):
    UNSPECIFIED = 0
    GRANTED = 1
    PENDING = 2
    HIT = 3
    BACKOFF = 4


class Validation(_Named):
    UNSPECIFIED = 0
    PASSED = 1
    FAILED = 2
    ERROR = 3


def _b(s: Optional[str]) -> Optional[bytes]:
    return None if s is None else s.encode("utf-8")


def _s(b: Optional[bytes]) -> str:
    return "" if not b else b.decode("utf-8", "replace")


class Key:
    """A validated tune key, prepared once: a lookup with a Key does no
    conversion (a str key is parsed on every call).

        Key("dense_bf16/decode/attn.qkv/m=1/k=4096/n=6144@cs1")
        Key.dense("decode", "attn.qkv", m=1, k=4096, n=6144, candidate_set="cs1")
        Key.custom("my_attention", "b=8,h=32", candidate_set="v3")

    Raises gputune.InvalidArgument naming the bad part.
    """

    __slots__ = ("_h", "_text", "__weakref__")

    def __init__(self, text: str) -> None:
        h = ctypes.c_void_p()
        check(_capi.key_parse(text.encode("utf-8"), ctypes.byref(h)))
        self._adopt(h)

    def _adopt(self, h: ctypes.c_void_p) -> None:
        self._h = h.value
        self._text = _s(_capi.key_text(self._h))

    @classmethod
    def _from_desc(cls, desc: _capi.KeyDesc) -> "Key":
        self = cls.__new__(cls)
        h = ctypes.c_void_p()
        check(_capi.key_new(ctypes.byref(desc), ctypes.byref(h)))
        self._adopt(h)
        return self

    @classmethod
    def dense(
        cls,
        phase: Union[str, Phase],
        role: str,
        m: int,
        k: int,
        n: int,
        candidate_set: str,
    ) -> "Key":
        """A dense_bf16 key: y[M,N] = x[M,K] W[N,K]^T."""
        if isinstance(phase, str):
            try:
                phase = Phase[phase.upper()]
            except KeyError:
                raise InvalidArgument(f"phase {phase!r} is neither 'prefill' nor 'decode'")
        desc = _capi.KeyDesc(
            struct_size=ctypes.sizeof(_capi.KeyDesc),
            kind=1,
            phase=int(phase),
            role=_b(role),
            tokens=m,
            input_features=k,
            output_features=n,
            candidate_set=_b(candidate_set),
        )
        return cls._from_desc(desc)

    @classmethod
    def custom(cls, op: str, params: str, candidate_set: str) -> "Key":
        """A key of the caller's own op."""
        desc = _capi.KeyDesc(
            struct_size=ctypes.sizeof(_capi.KeyDesc),
            kind=2,
            op=_b(op),
            params=_b(params),
            candidate_set=_b(candidate_set),
        )
        return cls._from_desc(desc)

    @property
    def text(self) -> str:
        return self._text

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"gputune.Key({self._text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Key) and other._text == self._text

    def __hash__(self) -> int:
        return hash(self._text)

    def __del__(self) -> None:
        h = getattr(self, "_h", None)
        if h:
            _capi.key_free(h)
            self._h = None


KeyLike = Union[Key, str]


class Execution(Mapping[str, int]):
    """How a key is computed: a kernel name and its parameters (the mapping
    itself: execution["tile"]), the workspace it needs and opaque data."""

    __slots__ = ("kernel", "params", "workspace_bytes", "data")

    def __init__(
        self,
        kernel: str,
        params: Optional[Mapping[str, int]] = None,
        workspace_bytes: int = 0,
        data: bytes = b"",
    ) -> None:
        self.kernel = kernel
        self.params: Dict[str, int] = dict(params or {})
        self.workspace_bytes = workspace_bytes
        self.data = data

    def __getitem__(self, name: str) -> int:
        return self.params[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.params)

    def __len__(self) -> int:
        return len(self.params)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Execution)
            and (self.kernel, self.params, self.workspace_bytes, self.data)
            == (other.kernel, other.params, other.workspace_bytes, other.data)
        )

    def __repr__(self) -> str:
        extra = f", workspace_bytes={self.workspace_bytes}" if self.workspace_bytes else ""
        return f"Execution({self.kernel!r}, {self.params!r}{extra})"

    def _to_c(self, keep: List[Any]) -> _capi.CExecution:
        params = (_capi.Param * max(1, len(self.params)))()
        for i, (name, value) in enumerate(sorted(self.params.items())):
            params[i].name = _b(name)
            params[i].value = int(value)
        data = ctypes.create_string_buffer(self.data, len(self.data)) if self.data else None
        keep.extend([params, data])
        return _capi.CExecution(
            kernel=_b(self.kernel),
            params=params,
            param_count=len(self.params),
            workspace_bytes=self.workspace_bytes,
            data=ctypes.cast(data, ctypes.c_void_p) if data is not None else None,
            data_size=len(self.data),
        )


@dataclass
class Measurement:
    """One candidate as a client measured it (times in seconds)."""

    execution: Execution
    validation: Validation = Validation.PASSED
    median: float = 0.0
    spread: float = 0.0
    samples: int = 0
    max_abs_error: float = 0.0
    error: str = ""
    is_default: bool = False
    chosen: bool = False

    def _to_c(self, keep: List[Any]) -> _capi.CMeasurement:
        return _capi.CMeasurement(
            struct_size=ctypes.sizeof(_capi.CMeasurement),
            execution=self.execution._to_c(keep),
            validation=int(self.validation),
            max_abs_error=self.max_abs_error,
            error=_b(self.error),
            median_ns=round(self.median * 1e9),
            spread_ns=round(self.spread * 1e9),
            samples=self.samples,
            is_default=int(self.is_default),
            chosen=int(self.chosen),
        )


class LookupResult:
    """A key's status as a lookup, try_lookup, tune_dense or watch saw it.

    .state, .hit, .from_memo; for HIT and STALE .execution (an Execution:
    a mapping of its params with .kernel, .workspace_bytes, .data),
    .chosen_time / .default_time (seconds or None) and .speedup; for STALE
    .stale_reason and .stale_usable (the entry may still be run: see
    gputune_result_stale_usable), for PENDING .holder, for BACKOFF
    .retry_after (Unix time).
    """

    __slots__ = ("_h", "_pool", "state", "_execution")

    def __init__(self, handle: int, pool: Optional["_Pool"] = None) -> None:
        self._h = handle
        self._pool = pool
        self.state: State = _STATES[_capi.result_state(handle)]
        self._execution: Optional[Execution] = None

    @property
    def hit(self) -> bool:
        return self.state is _HIT

    @property
    def from_memo(self) -> bool:
        return bool(_capi.result_from_memo(self._h))

    @property
    def execution(self) -> Optional[Execution]:
        """The chosen execution (HIT, STALE); None otherwise."""
        if self._execution is None:
            kernel = _s(_capi.result_kernel(self._h))
            if not kernel:
                return None
            params = {}
            name = ctypes.c_char_p()
            value = ctypes.c_int32()
            for i in range(_capi.result_param_count(self._h)):
                check(_capi.result_param(self._h, i, ctypes.byref(name), ctypes.byref(value)))
                params[_s(name.value)] = value.value
            size = ctypes.c_size_t()
            ptr = _capi.result_data(self._h, ctypes.byref(size))
            data = ctypes.string_at(ptr, size.value) if size.value else b""
            self._execution = Execution(
                kernel, params, _capi.result_workspace_bytes(self._h), data
            )
        return self._execution

    @property
    def chosen_time(self) -> Optional[float]:
        ns = _capi.result_chosen_time_ns(self._h)
        return ns / 1e9 if ns else None

    @property
    def default_time(self) -> Optional[float]:
        ns = _capi.result_default_time_ns(self._h)
        return ns / 1e9 if ns else None

    @property
    def speedup(self) -> Optional[float]:
        s = _capi.result_speedup(self._h)
        return s if s else None

    @property
    def stale_reason(self) -> str:
        return _s(_capi.result_stale_reason(self._h))

    @property
    def stale_usable(self) -> bool:
        """Stale-but-usable: tuned for this candidate set on this device model
        before a software upgrade; DenseRunner.run replays it (after its
        check) until the daemon's background re-tune replaces it."""
        return bool(_capi.result_stale_usable(self._h))

    @property
    def holder(self) -> str:
        return _s(_capi.result_claim_holder(self._h))

    @property
    def retry_after(self) -> Optional[float]:
        ms = _capi.result_retry_after_unix_ms(self._h)
        return ms / 1e3 if ms else None

    def __repr__(self) -> str:
        if self.state in (State.HIT, State.STALE):
            return f"LookupResult({self.state.name}, {self.execution!r})"
        return f"LookupResult({self.state.name})"

    def __del__(self) -> None:
        h = self._h
        if h:
            self._h = None
            pool = self._pool
            if pool is not None and not pool.closed and len(pool) < _POOL_SIZE:
                pool.append(h)  # reused by the next lookup: no C call
            else:
                _capi.result_free(h)


# State by value without calling the enum (a lookup reads one per call).
_STATES = tuple(State)
_HIT = State.HIT
# Result handles a client keeps for reuse (list.append and pop are atomic
# under the GIL, so threads may share it). Closed with its client: results
# that outlive it free their handles.
_POOL_SIZE = 64


class _Pool(List[int]):
    closed = False


def _new_result() -> int:
    h = _capi.result_new()
    if not h:
        raise MemoryError("gputune: cannot allocate a result")
    return h


class Claim:
    """A claim on a key, from Client.claim. Use it as a context manager:

        with client.claim(key) as c:
            if c.granted:
                c.record(Execution("my.kernel", {"tile": 64}), measurements)

    GRANTED: the lease is renewed in the background until record() or
    abandon(); leaving the block without a record abandons the claim (with
    the exception's text as the reason when one is raised).
    """

    def __init__(self, handle: int) -> None:
        self._h = handle
        self.outcome = ClaimOutcome(_capi.claim_outcome(handle))

    @property
    def granted(self) -> bool:
        """GRANTED and still held (neither recorded nor abandoned nor lost)."""
        return bool(self._h) and bool(_capi.claim_granted(self._h))

    @property
    def lost(self) -> bool:
        """A background renewal was refused: the lease is gone, stop."""
        return bool(self._h) and bool(_capi.claim_lost(self._h))

    @property
    def claim_id(self) -> int:
        """GRANTED: ours (the fencing token); PENDING: the holder's."""
        return _capi.claim_id(self._handle())

    @property
    def holder(self) -> str:
        """PENDING: who holds the key."""
        return _s(_capi.claim_holder(self._handle()))

    @property
    def retry_after(self) -> Optional[float]:
        """BACKOFF: when to ask again (Unix time)."""
        ms = _capi.claim_retry_after_unix_ms(self._handle())
        return ms / 1e3 if ms else None

    def _handle(self) -> int:
        if not self._h:
            raise ValueError("this claim is closed")
        return self._h

    def record(
        self,
        execution: Execution,
        measurements: Sequence[Measurement] = (),
        default_time: Optional[float] = None,
        chosen_time: Optional[float] = None,
    ) -> None:
        """Persists the result for every process and releases the claim.
        gputune.FailedPrecondition when the claim is no longer live;
        gputune.InvalidArgument names a bad field (the claim is still held)."""
        keep: List[Any] = []
        ms = (_capi.CMeasurement * max(1, len(measurements)))()
        for i, m in enumerate(measurements):
            ms[i] = m._to_c(keep)
        record = _capi.CRecord(
            struct_size=ctypes.sizeof(_capi.CRecord),
            execution=execution._to_c(keep),
            measurements=ms,
            measurement_count=len(measurements),
            default_time_ns=round(default_time * 1e9) if default_time else 0,
            chosen_time_ns=round(chosen_time * 1e9) if chosen_time else 0,
        )
        check(_capi.claim_record(self._handle(), ctypes.byref(record)))

    def abandon(self, reason: str = "abandoned by caller") -> None:
        """Gives the claim up (the key turns MISS, or BACKOFF after repeated
        abandons)."""
        check(_capi.claim_abandon(self._handle(), _b(reason)))

    def close(self) -> None:
        """Frees the claim; one still held is abandoned ("released without
        record")."""
        if self._h:
            _capi.claim_free(self._h)
            self._h = None

    def __enter__(self) -> "Claim":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if exc is not None and self.granted:
                try:
                    self.abandon(f"{exc_type.__name__}: {exc}"[:200])
                except Exception:
                    pass  # the lease expires instead; the caller's error wins
        finally:
            self.close()
        return False

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Claim({self.outcome.name}, granted={self.granted})"


class Watch:
    """A key followed with Client.watch: iterate it for each status (the
    current one, then each change, the HIT last), or give a callback.

        for status in client.watch(key, timeout=60):
            print(status.state)
    """

    _POLL_MS = 200  # how often a waiting iterator lets Ctrl-C through

    def __init__(self, handle: int, callback_ref: Any = None) -> None:
        self._h = handle
        self._callback_ref = callback_ref  # keeps the ctypes thunk alive

    def __iter__(self) -> Iterator[LookupResult]:
        return self

    def __next__(self) -> LookupResult:
        while True:
            r = _new_result()
            code = _capi.watch_next(self._handle(), self._POLL_MS, r)
            if code == 0:
                return LookupResult(r)
            err = error_for(code)
            _capi.result_free(r)
            if code == 4:  # DEADLINE_EXCEEDED: nothing new yet
                continue
            if isinstance(err, OutOfRange):  # ended: how?
                end = _capi.watch_wait(self._h, 0)
                if end in (0, 1):  # after a HIT, or cancelled
                    raise StopIteration
                raise error_for(end)
            raise err

    def wait(self, timeout: float) -> None:
        """Blocks until the stream ends (at most `timeout` seconds). Returns
        after a HIT; raises gputune.DeadlineExceeded when time ran out,
        gputune.Cancelled after cancel(), else the stream's error."""
        check(_capi.watch_wait(self._handle(), int(timeout * 1000)))

    def cancel(self) -> None:
        _capi.watch_cancel(self._handle())

    def _handle(self) -> int:
        if not self._h:
            raise ValueError("this watch is closed")
        return self._h

    def close(self) -> None:
        """Cancels the stream and waits until the callback can no longer run."""
        if self._h:
            _capi.watch_free(self._h)
            self._h = None

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    def __del__(self) -> None:
        self.close()


def _device(device: Any) -> Tuple[int, Optional[str]]:
    """(CUDA device index, GPU UUID or None) from what Client(device=) takes."""
    if isinstance(device, bool):
        raise TypeError("device: an int, a torch.device, 'cuda:N' or a GPU UUID")
    if isinstance(device, int):
        return device, None
    if isinstance(device, str):
        if device.lower().startswith(("gpu-", "mig-", "host-")):
            return 0, device
        kind, _, index = device.partition(":")
        if kind == "cuda" and (index == "" or index.isdigit()):
            return (_current_cuda_device() if index == "" else int(index)), None
        raise ValueError(
            f"device={device!r}: give an index, 'cuda:N', a torch.device or a "
            "GPU UUID ('GPU-...', as nvidia-smi -L prints it)")
    kind = getattr(device, "type", None)  # a torch.device, without importing torch
    if kind == "cuda":
        index = getattr(device, "index", None)
        return (_current_cuda_device() if index is None else int(index)), None
    raise ValueError(
        f"device={device!r}: gputune tunes CUDA devices; give a cuda "
        "torch.device, an index or a GPU UUID")


def _current_cuda_device() -> int:
    import torch  # only reached for a device named without an index

    return int(torch.cuda.current_device())


class Client:
    """A client of one GPU's gputuned, shared by every thread of a process.

        client = gputune.Client()              # $GPUTUNE_ENDPOINT or gpu0's
        client.preload(layer_keys)             # one RPC at start-up
        r = client.lookup(key)                 # memo hit: no I/O
        if r.hit: run(r.execution)
        else: run_default()                    # tuning never blocks

    endpoint: "unix:///path", "/path" or "host:port"; None: $GPUTUNE_ENDPOINT,
    else the daemon of `device`'s GPU, found by its UUID as
    <socket_dir>/by-uuid/<UUID>.sock. device: this process's CUDA device, as
    an int, a torch.device ("cuda:1"; "cuda" is the current device) or
    "cuda:1", or a GPU UUID ("GPU-8f3c..."); under CUDA_VISIBLE_DEVICES it is
    the GPU the process computes on, not the host's GPU of that index
    (gputune::FindDaemon in options.h says how). socket_dir: None:
    $GPUTUNE_SOCKET_DIR, else /run/gputuned. nvidia_proc_dir (tests): where
    the driver lists the GPUs, None: /proc/driver/nvidia. Deadlines are
    seconds; see gputune/options.h for each setting. Creating a client does
    no I/O but finding the daemon: gputune.NotFound names a GPU with no
    daemon linked and the directory searched.
    """

    def __init__(
        self,
        endpoint: Optional[str] = None,
        device: Any = 0,
        *,
        socket_dir: Optional[str] = None,
        nvidia_proc_dir: Optional[str] = None,
        lookup_deadline: Optional[float] = None,
        deadline: Optional[float] = None,
        tune_deadline: Optional[float] = None,
        lease_ttl: Optional[float] = None,
        holder: Optional[str] = None,
        memo_capacity: Optional[int] = None,
        follow_changes: Optional[bool] = None,
    ) -> None:
        o = _capi.ClientOptions()
        _capi.client_options_init(ctypes.byref(o))
        o.endpoint = _b(endpoint)
        index, uuid = _device(device)
        o.device = index
        o.gpu_uuid = _b(uuid)
        o.socket_dir = _b(socket_dir)
        o.nvidia_proc_dir = _b(nvidia_proc_dir)
        for name, value in (
            ("lookup_deadline_ms", lookup_deadline),
            ("deadline_ms", deadline),
            ("tune_deadline_ms", tune_deadline),
            ("lease_ttl_ms", lease_ttl),
        ):
            if value is not None:
                setattr(o, name, round(value * 1000))
        o.holder = _b(holder)
        if memo_capacity is not None:
            o.memo_capacity = memo_capacity
        if follow_changes is not None:
            o.follow_changes = 1 if follow_changes else 0
        h = ctypes.c_void_p()
        self._pool = _Pool()
        check(_capi.client_create(ctypes.byref(o), ctypes.byref(h)))
        self._h = h.value

    @property
    def endpoint(self) -> str:
        return _s(_capi.client_endpoint(self._handle()))

    @property
    def gpu_uuid(self) -> str:
        """The GPU this client means ("" when unknown); tune_dense carries it
        and a daemon serving another GPU refuses it."""
        return _s(_capi.client_gpu_uuid(self._handle()))

    def _handle(self) -> int:
        if not self._h:
            raise ValueError("this client is closed")
        return self._h

    # A str key is parsed into a Key; callers hold the Key in a local while
    # its handle is in a C call (a temporary's handle would be freed first).
    @staticmethod
    def _key(key: KeyLike) -> Key:
        return key if type(key) is Key else Key(key)  # type: ignore[arg-type]

    # --- Hot path --------------------------------------------------------------

    def lookup(self, key: KeyLike) -> LookupResult:
        """The key's state: a memoised HIT without I/O, else one RPC within
        lookup_deadline. Raises gputune.Unavailable / DeadlineExceeded when
        the daemon cannot answer (run the default)."""
        k = key if type(key) is Key else Key(key)  # type: ignore[arg-type]
        pool = self._pool
        r = pool.pop() if pool else _new_result()
        code = _capi.lookup(self._h, k._h, r)
        if code:
            err = error_for(code)
            _capi.result_free(r)
            raise err
        return LookupResult(r, pool)

    def try_lookup(self, key: KeyLike) -> LookupResult:
        """Never blocks on I/O: the memoised HIT, or state UNSPECIFIED after
        queueing a background lookup."""
        k = self._key(key)  # alive until the call returns
        pool = self._pool
        r = pool.pop() if pool else _new_result()
        _capi.try_lookup(self._handle(), k._h, r)
        return LookupResult(r, pool)

    def preload(self, keys: Iterable[KeyLike]) -> int:
        """One BatchLookup for start-up: memoises the HITs; returns how many
        of the keys were HIT."""
        prepared = [self._key(k) for k in keys]
        arr = (ctypes.c_void_p * max(1, len(prepared)))(*[k._h for k in prepared])
        hits = ctypes.c_size_t()
        check(_capi.preload(self._handle(), arr, len(prepared), ctypes.byref(hits)))
        return hits.value

    def forget(self, key: Optional[KeyLike] = None) -> None:
        """Drops a key's memoised entry (all of them with no key)."""
        if key is None:
            _capi.forget_all(self._handle())
        else:
            k = self._key(key)  # alive until the call returns
            _capi.forget(self._handle(), k._h)

    @property
    def memo_size(self) -> int:
        return _capi.memo_size(self._handle())

    # --- Tuning ----------------------------------------------------------------

    def tune_dense(self, key: KeyLike, wait: bool = True) -> LookupResult:
        """The daemon benchmarks a dense_bf16 key on its device. wait: the HIT
        (within tune_deadline); else PENDING at once (or the HIT). Raises
        gputune.FailedPrecondition (no benchmark backend), ResourceExhausted
        (queue full), Aborted (the job failed)."""
        k = self._key(key)
        r = _new_result()
        code = _capi.tune_dense(self._handle(), k._h, int(wait), r)
        if code:
            _capi.result_free(r)
            raise error_for(code)
        return LookupResult(r)

    def claim(self, key: KeyLike) -> Claim:
        """Asks to tune the key here (see Claim)."""
        h = ctypes.c_void_p()
        k = self._key(key)  # alive until the call returns
        check(_capi.claim_acquire(self._handle(), k._h, ctypes.byref(h)))
        return Claim(h.value)

    def watch(
        self,
        key: KeyLike,
        callback: Optional[Callable[[LookupResult], None]] = None,
        timeout: float = 600.0,
    ) -> Watch:
        """Follows a key for at most `timeout` seconds: iterate the Watch, or
        give `callback`, which runs on a library thread with each status
        (it must not block; exceptions in it are printed and dropped)."""
        h = ctypes.c_void_p()
        k = self._key(key)  # alive until the call returns
        thunk = None
        if callback is not None:

            def on_status(_user: Any, status: int) -> None:
                # Valid during the call only: copy what the callback may keep.
                r = _new_result()
                _capi.result_copy(status, r)
                callback(LookupResult(r))

            thunk = _capi.WATCH_CALLBACK(on_status)
            cb = thunk
        else:
            cb = ctypes.cast(None, _capi.WATCH_CALLBACK)
        check(
            _capi.watch_start(
                self._handle(),
                k._h,
                cb,
                None,
                round(timeout * 1000),
                ctypes.byref(h),
            )
        )
        return Watch(h.value, thunk)

    # --- Operator calls --------------------------------------------------------

    def _json(self, fn: Callable[..., int], *args: Any) -> Dict[str, Any]:
        out = ctypes.c_void_p()
        check(fn(self._handle(), *args, ctypes.byref(out)))
        try:
            return json.loads(ctypes.string_at(out.value).decode("utf-8"))
        finally:
            _capi.string_free(out)

    def status(self) -> Dict[str, Any]:
        """The daemon's GetStatus answer (tune.proto, as JSON)."""
        return self._json(_capi.get_status_json)

    def list_entries(
        self,
        op: Optional[str] = None,
        phase: Optional[Union[str, Phase]] = None,
        role: Optional[str] = None,
        state: Optional[State] = None,
        page_size: int = 0,
        page_token: Optional[str] = None,
        with_measurements: bool = False,
    ) -> Dict[str, Any]:
        """One page of entries (ListEntriesResponse as JSON: "entries",
        "states", "nextPageToken")."""
        if isinstance(phase, str):
            phase = Phase[phase.upper()]
        o = _capi.ListOptions(
            struct_size=ctypes.sizeof(_capi.ListOptions),
            op=_b(op),
            phase=int(phase or 0),
            role=_b(role),
            state=int(state or 0),
            page_size=page_size,
            page_token=_b(page_token),
            with_measurements=int(with_measurements),
        )
        return self._json(_capi.list_entries_json, ctypes.byref(o))

    def get_entry(self, key: KeyLike) -> Dict[str, Any]:
        """The key's entry with every measurement (GetEntryResponse as JSON).
        gputune.NotFound when it has none."""
        k = self._key(key)  # alive until the call returns
        return self._json(_capi.get_entry_json, k._h)

    # --- Lifetime --------------------------------------------------------------

    def close(self) -> None:
        """Stops the background threads. Claims and watches stay usable."""
        if getattr(self, "_h", None):
            _capi.client_destroy(self._h)
            self._h = None
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.closed = True
            while pool:
                _capi.result_free(pool.pop())

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.close()
        return False

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"gputune.Client({self.endpoint!r})" if self._h else "gputune.Client(closed)"
