"""gputune.torch: dense layers that run the tuned execution.

    import gputune.torch as gt
    y = gt.dense(x, w)                 # == torch.nn.functional.linear(x, w)

For CUDA bf16 tensors (x[..., K] and w[N, K], contiguous, on one device) the
key dense_bf16/<phase>/<role>/m=M/k=K/n=N@<candidate_set> is looked up
(one RPC per key; later calls are answered in the process, untuned keys
included: TunedDense.lookup) and its execution runs through
libgputune's replay (gputune_dense_run) on torch.cuda.current_stream(); a
MISS runs cuBLASLt's default through the same replay. Anything else, or when
the daemon, the replay, the execution or libgputune itself is not usable,
runs torch.nn.functional.linear instead; the reason is logged once (logger
"gputune.torch"). Tuning never blocks: with tune_misses=True a MISS is sent
to the daemon to tune in the background (once per key).

phase is "decode" for M <= decode_max_tokens (64) and "prefill" above.
"""

from __future__ import annotations

import logging
import threading
from typing import Dict, Optional, Set, Tuple

import torch
import torch.nn.functional as F

from ._capi import LibraryNotFound
from ._errors import Error
from .client import Client, Key, LookupResult
from .dense import DenseRunner

__all__ = ["TunedDense", "dense", "swap_linears"]

_log = logging.getLogger("gputune.torch")


class TunedDense:
    """The dense op with its client, keys and per-thread replay runners.
    Thread-safe; one instance is meant to serve a process."""

    def __init__(
        self,
        client: Optional[Client] = None,
        *,
        candidate_set: str = "cs1",
        tune_misses: bool = False,
        decode_max_tokens: int = 64,
    ) -> None:
        # One client per CUDA device (Client(device=index): the daemon of
        # the GPU that device is), unless the caller gave one for all.
        self._client = client
        self._clients: Dict[int, Optional[Client]] = {}
        self.candidate_set = candidate_set
        self.tune_misses = tune_misses
        self.decode_max_tokens = decode_max_tokens
        self._lock = threading.Lock()
        self._keys: Dict[Tuple[str, int, int, int], Key] = {}
        # Per (device index, key): each GPU's daemon answers for its own.
        self._asked: Set[Tuple[int, Key]] = set()
        # Keys whose answer was not a HIT (MISS, PENDING, BACKOFF, STALE,
        # stale-but-usable): that answer, returned until the memo has a HIT.
        self._waiting: Dict[Tuple[int, Key], LookupResult] = {}
        self._said: Set[str] = set()
        self._local = threading.local()  # .runners: device -> runner or error

    # --- helpers ---------------------------------------------------------------

    def _once(self, why: str) -> None:
        if why not in self._said:
            self._said.add(why)
            _log.warning("%s", why)

    def client(self, device: Optional[torch.device] = None) -> Optional[Client]:
        """The client of `device`'s daemon (None: the current CUDA device):
        the one given to the constructor, else one per device, made on first
        use; None when none can be made (the reason is logged once)."""
        if self._client is not None:
            return self._client
        index = _index(device)
        if index not in self._clients:
            with self._lock:
                if index not in self._clients:
                    try:
                        self._clients[index] = Client(device=index)
                    # No daemon for that GPU, bad options, no libgputune.
                    except (Error, LibraryNotFound) as e:
                        self._once(
                            f"gputune: no client for cuda:{index} ({e}); "
                            "running torch's linear there")
                        self._clients[index] = None
        return self._clients[index]

    def key(self, role: str, m: int, k: int, n: int) -> Key:
        cache_key = (role, m, k, n)
        key = self._keys.get(cache_key)
        if key is None:
            phase = "decode" if m <= self.decode_max_tokens else "prefill"
            key = Key.dense(phase, role, m=m, k=k, n=n, candidate_set=self.candidate_set)
            self._keys[cache_key] = key
        return key

    def _runner(self, device: torch.device) -> Optional[DenseRunner]:
        runners = getattr(self._local, "runners", None)
        if runners is None:
            runners = self._local.runners = {}
        if device.index not in runners:
            try:
                with torch.cuda.device(device):
                    runners[device.index] = DenseRunner()
            except (Error, LibraryNotFound) as e:  # no CUDA, no libgputune
                self._once(f"gputune: cannot replay here ({e}); running torch's linear")
                runners[device.index] = None
        return runners[device.index]

    def key_for(self, x: torch.Tensor, w: torch.Tensor, role: str = "linear") -> Key:
        """The key dense(x, w) looks up: M is x's rows (the product of every
        dim but the last), K = w.shape[1], N = w.shape[0]."""
        return self.key(role, *_mkn(x, w))

    def lookup(self, key: Key, device: Optional[torch.device] = None) -> Optional[LookupResult]:
        """The key's lookup as dense() does it, by `device`'s daemon (None:
        the current CUDA device's): None when the daemon cannot answer (the
        reason is logged once).

        The first lookup of a key asks the daemon; a HIT is memoised, so
        later ones do not leave the process. After any other answer (MISS,
        PENDING, BACKOFF, STALE, or a stale-but-usable entry, which runs
        while the daemon re-tunes the key), later lookups of the key never
        block on the daemon either: they return the memo's HIT once the
        client's background re-ask (Client.try_lookup: at most once a second
        per key) has found one, else that answer again. So a forward pass
        over untuned or re-tuning shapes makes no RPC after the first.

        With tune_misses, a key with nothing to run is sent to the daemon to
        tune in the background (tune_dense(wait=False)), once per key; its
        answer (PENDING) is what later lookups return until the HIT (the
        first returns the lookup's own answer, MISS)."""
        client = self.client(device)
        if client is None:
            return None
        slot = (_index(device), key)
        waiting = self._waiting.get(slot)
        if waiting is not None:
            r = client.try_lookup(key)
            return r if r.hit else waiting
        try:
            r = client.lookup(key)
        except Error as e:  # daemon down or slow: defaults, never an error
            self._once(f"gputune: lookup failed ({e}); running defaults")
            return None
        if r.hit:
            return r
        waiting = r
        # A stale-but-usable entry is re-tuned by the daemon itself.
        if self.tune_misses and not r.stale_usable:
            with self._lock:
                ask = slot not in self._asked
                self._asked.add(slot)
            if ask:
                try:
                    tuning = client.tune_dense(key, wait=False)  # PENDING, or HIT
                    if tuning.hit:
                        return tuning
                    waiting = tuning
                except Error as e:
                    self._once(f"gputune: cannot ask the daemon to tune {key} ({e})")
        with self._lock:
            self._waiting[slot] = waiting
        return r

    # --- the op ----------------------------------------------------------------

    def __call__(
        self,
        x: torch.Tensor,
        w: torch.Tensor,
        out: Optional[torch.Tensor] = None,
        *,
        role: str = "linear",
    ) -> torch.Tensor:
        """y = x @ w.T, shaped x.shape[:-1] + (N,); into `out` if given."""
        why = _not_replayable(x, w, out)
        if why is not None:
            self._once(f"gputune: {why}; running torch's linear")
            return _linear(x, w, out)
        runner = self._runner(x.device)
        if runner is None:
            return _linear(x, w, out)
        m, k, n = _mkn(x, w)
        key = self.key(role, m, k, n)
        r = self.lookup(key, x.device)
        # A HIT, or a stale-but-usable entry (the runner checks it first).
        hit = r is not None and (r.hit or r.stale_usable)
        y = out if out is not None else torch.empty(
            (*x.shape[:-1], n), dtype=torch.bfloat16, device=x.device)
        ws_bytes = r.execution.workspace_bytes if hit else 0
        ws = _workspace(self._local, x.device, ws_bytes)
        try:
            run = runner.run(
                r if hit else None,
                m=m,
                n=n,
                k=k,
                x=x.data_ptr(),
                w=w.data_ptr(),
                y=y.data_ptr(),
                stream=torch.cuda.current_stream(x.device).cuda_stream,
                workspace=ws.data_ptr() if ws is not None else 0,
                workspace_bytes=ws_bytes,
            )
        except Error as e:
            self._once(f"gputune: replay of {key} failed ({e}); running torch's linear")
            return _linear(x, w, out)
        if run.fell_back:
            self._once(f"gputune: {key}: {run.reason}")
        return y


def _index(device: Optional[torch.device]) -> int:
    """The CUDA device index of `device` (None, or no index: the current;
    0 where PyTorch has no CUDA, so lookups still work on a CPU build)."""
    if device is not None and device.index is not None:
        return int(device.index)
    return int(torch.cuda.current_device()) if torch.cuda.is_available() else 0


def _mkn(x: torch.Tensor, w: torch.Tensor) -> Tuple[int, int, int]:
    """M, K, N of y[M, N] = x[M, K] w[N, K]^T, x's leading dims folded into M."""
    n, k = w.shape
    return x.numel() // k, k, n


def _not_replayable(
    x: torch.Tensor, w: torch.Tensor, out: Optional[torch.Tensor]
) -> Optional[str]:
    """Why the replay cannot compute x @ w.T (into out), or None when it can.
    One text per kind of reason (no shapes), so each is logged once."""
    if not (x.is_cuda and w.is_cuda):
        return "not CUDA tensors"
    if x.device != w.device:
        return "x and w are on different devices"
    if x.dtype != torch.bfloat16 or w.dtype != torch.bfloat16:
        return "not bf16 tensors"
    if w.dim() != 2 or x.dim() < 1 or x.shape[-1] != w.shape[1] or x.numel() == 0:
        return "not a dense shape (x[..., K], w[N, K], M > 0)"
    if not (x.is_contiguous() and w.is_contiguous()):
        return "x or w is not contiguous"
    if out is not None and not (
        out.shape == (*x.shape[:-1], w.shape[0])
        and out.dtype == torch.bfloat16
        and out.device == x.device
        and out.is_contiguous()
    ):
        return "out is not a contiguous bf16 tensor of the result's shape on x's device"
    return None


def _linear(x: torch.Tensor, w: torch.Tensor, out: Optional[torch.Tensor]) -> torch.Tensor:
    y = F.linear(x, w)
    if out is None:
        return y
    out.copy_(y)
    return out


def _workspace(local: threading.local, device: torch.device, size: int) -> Optional[torch.Tensor]:
    """A per-thread, per-device scratch buffer of at least `size` bytes."""
    if size == 0:
        return None
    buffers = getattr(local, "workspaces", None)
    if buffers is None:
        buffers = local.workspaces = {}
    buf = buffers.get(device.index)
    if buf is None or buf.numel() < size:
        buf = buffers[device.index] = torch.empty(size, dtype=torch.uint8, device=device)
    return buf


_default: Optional[TunedDense] = None
_default_lock = threading.Lock()


def _default_dense() -> TunedDense:
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = TunedDense()
    return _default


def dense(
    x: torch.Tensor,
    w: torch.Tensor,
    out: Optional[torch.Tensor] = None,
    *,
    role: str = "linear",
) -> torch.Tensor:
    """x @ w.T with the tuned execution (see the module's doc), through one
    TunedDense per process, which asks the daemon of x's GPU (one client per
    CUDA device; $GPUTUNE_ENDPOINT names one daemon for all)."""
    return _default_dense()(x, w, out, role=role)


def swap_linears(model: torch.nn.Module, op: Optional[TunedDense] = None) -> int:
    """Makes every torch.nn.Linear in `model` run through `op` (the process's
    TunedDense by default), with its module name as the key's role; returns
    how many were swapped. Bias is added after the dense op."""
    op = op or _default_dense()
    count = 0
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):

            def forward(x, module=module, role=name or "linear"):
                y = op(x.contiguous(), module.weight, role=role)
                return y + module.bias if module.bias is not None else y

            module.forward = forward
            count += 1
    return count
