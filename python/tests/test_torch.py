"""gputune.torch: the import, the key, the lookup and the fallback on any
machine with PyTorch (CI: Debian's CPU-only python3-torch 1.13, from
scripts/install-deps.sh); the replay on a CUDA device (the H200 test
machine, bench/gpu/run.sh). Skipped, saying so, where PyTorch is missing."""

from __future__ import annotations

import json
import logging
import os
import pathlib
import subprocess
import sys
import time
from typing import List, Tuple

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (python3-torch)")

import torch.nn.functional as F  # noqa: E402

import gputune  # noqa: E402
import gputune.torch as gt  # noqa: E402

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "torch_toy.py"
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device (torch.cuda.is_available() is False)")


class SpyClient(gputune.Client):
    """The real client, counting what gputune.torch asks of the daemon."""

    def __init__(self, endpoint: str, **options) -> None:
        super().__init__(endpoint, **options)
        self.lookups: List[str] = []
        self.tries: List[str] = []
        self.tunes: List[Tuple[str, bool]] = []

    def lookup(self, key):
        self.lookups.append(str(key))
        return super().lookup(key)

    def try_lookup(self, key):
        self.tries.append(str(key))
        return super().try_lookup(key)

    def tune_dense(self, key, wait=True):
        self.tunes.append((str(key), wait))
        return super().tune_dense(key, wait=wait)


def warnings_of(caplog) -> List[str]:
    return [r.getMessage() for r in caplog.records if r.name == "gputune.torch"]


# --- the fallback: torch's linear, nothing asked of the daemon ------------------


def test_cpu_tensors_run_torchs_linear_and_ask_nothing(daemon, caplog):
    client = SpyClient(daemon.endpoint)
    op = gt.TunedDense(client, tune_misses=True)
    x = torch.randn(3, 5, 16)
    w = torch.randn(8, 16)
    with caplog.at_level(logging.WARNING, logger="gputune.torch"):
        y = op(x, w)
        assert y.shape == (3, 5, 8)
        assert torch.equal(y, F.linear(x, w))
        assert torch.allclose(y, x @ w.T, atol=1e-5)
        out = torch.empty(3, 5, 8)
        assert op(x, w, out) is out and torch.equal(out, y)
        # Other dtypes and layouts on the CPU: the same fallback.
        xb, wb = x.bfloat16(), w.bfloat16()
        assert torch.equal(op(xb, wb), F.linear(xb, wb))
        xt = torch.randn(16, 4).T  # not contiguous
        assert torch.equal(op(xt, w), F.linear(xt, w))
    assert client.lookups == [] and client.tunes == []
    assert gputune.Client(daemon.endpoint).status().get("entries", "0") == "0"
    # The reason, once, however many calls.
    assert warnings_of(caplog) == ["gputune: not CUDA tensors; running torch's linear"]


def test_dense_falls_back_without_a_daemon_and_raises_as_torch_does(monkeypatch):
    # gt.dense's process-wide op never reaches a client for CPU tensors.
    monkeypatch.setenv("GPUTUNE_ENDPOINT", "unix:///nonexistent/gputuned.sock")
    x = torch.randn(4, 32)
    w = torch.randn(16, 32)
    assert torch.equal(gt.dense(x, w), F.linear(x, w))
    out = torch.zeros(4, 16)
    assert gt.dense(x, w, out=out) is out and torch.equal(out, F.linear(x, w))
    with pytest.raises(RuntimeError) as ours:
        gt.dense(x, torch.randn(16, 31))
    with pytest.raises(RuntimeError) as theirs:
        F.linear(x, torch.randn(16, 31))
    assert type(ours.value) is type(theirs.value)


# --- the key --------------------------------------------------------------------


def test_the_key_is_built_from_the_shapes():
    op = gt.TunedDense(candidate_set="cs1", decode_max_tokens=64)
    assert str(op.key("attn.qkv", 1, 4096, 6144)) == (
        "dense_bf16/decode/attn.qkv/m=1/k=4096/n=6144@cs1")
    assert str(op.key("r", 64, 8, 16)) == "dense_bf16/decode/r/m=64/k=8/n=16@cs1"
    assert str(op.key("r", 65, 8, 16)) == "dense_bf16/prefill/r/m=65/k=8/n=16@cs1"
    assert op.key("r", 65, 8, 16) is op.key("r", 65, 8, 16)  # built once
    # M folds every dim of x but the last; K and N come from w[N, K].
    x = torch.empty(3, 5, 4096)
    w = torch.empty(14336, 4096)
    assert str(op.key_for(x, w, "mlp.up")) == (
        "dense_bf16/decode/mlp.up/m=15/k=4096/n=14336@cs1")
    assert str(op.key_for(torch.empty(2, 40, 4096), w, "mlp.up")).startswith(
        "dense_bf16/prefill/mlp.up/m=80/")
    other = gt.TunedDense(candidate_set="h200", decode_max_tokens=16)
    assert str(other.key_for(torch.empty(32, 64), torch.empty(8, 64))) == (
        "dense_bf16/prefill/linear/m=32/k=64/n=8@h200")


# --- the lookup dense() makes: MISS, background tune, HIT -----------------------


def test_a_miss_is_tuned_in_the_background_once(host_daemon):
    client = SpyClient(host_daemon.endpoint)
    op = gt.TunedDense(client, tune_misses=True)
    key = op.key("bg", 1, 256, 256)
    first = op.lookup(key)
    assert first.state is gputune.State.MISS
    assert client.tunes == [(str(key), False)]  # asked, not waited for
    second = op.lookup(key)  # PENDING or already HIT: not asked again
    assert second.state in (gputune.State.PENDING, gputune.State.HIT)
    give_up = time.monotonic() + 60
    while not op.lookup(key).hit:
        assert time.monotonic() < give_up, "the daemon did not tune the key in 60 s"
        time.sleep(0.05)
    assert client.tunes == [(str(key), False)]
    assert op.lookup(key).execution.kernel.startswith("host.")
    # One RPC: every later lookup was answered in the process (the HIT
    # reached the memo through the client's background re-ask).
    assert client.lookups == [str(key)] and len(client.tries) >= 2


def test_without_tune_misses_a_miss_stays_a_miss(host_daemon):
    client = SpyClient(host_daemon.endpoint)
    op = gt.TunedDense(client)
    key = op.key("quiet", 1, 256, 256)
    for _ in range(100):  # a forward pass's worth: one RPC, the first
        assert op.lookup(key).state is gputune.State.MISS
    assert client.tunes == [] and client.lookups == [str(key)]
    assert len(client.tries) == 99


def test_a_stale_but_usable_entry_runs_without_an_rpc_per_call(host_daemon, tmp_path):
    daemon = host_daemon
    from conftest import gputunectl

    client = SpyClient(daemon.endpoint)
    # An entry measured on this device model with older software: usable
    # while it is re-tuned (custom keys: until a client re-tunes it).
    fingerprint = client.status()["fingerprint"]
    fingerprint["kernelVersion"] = "0.0.1-older"
    line = {
        "key": {"custom": {"op": "torch.stale", "params": "b=1"}, "candidateSet": "c1"},
        "execution": {"kernel": "older.kernel", "params": {"tile": 32}},
        "source": "SOURCE_DAEMON_MEASURED",
        "fingerprint": fingerprint,
    }
    export = tmp_path / "older.jsonl"
    export.write_text(json.dumps(line) + "\n")
    subprocess.run([gputunectl(), "--endpoint=" + daemon.endpoint, "import", str(export)],
                   check=True, capture_output=True)
    op = gt.TunedDense(client, tune_misses=True)
    key = gputune.Key("torch.stale/b=1@c1")
    for _ in range(50):
        r = op.lookup(key)
        assert r.stale_usable and r.execution.kernel == "older.kernel", (r, r.state)
    assert client.lookups == [str(key)] and client.tunes == []


def test_a_key_recorded_elsewhere_reaches_a_waiting_lookup(daemon):
    client = SpyClient(daemon.endpoint)
    op = gt.TunedDense(client)
    key = op.key("elsewhere", 1, 128, 128)
    assert op.lookup(key).state is gputune.State.MISS
    writer = gputune.Client(daemon.endpoint)
    with writer.claim(key) as c:
        assert c.granted
        c.record(gputune.Execution("other.kernel"), [])
    give_up = time.monotonic() + 10
    while not op.lookup(key).hit:  # the background re-ask: once a second
        assert time.monotonic() < give_up, "the HIT did not reach the lookup in 10 s"
        time.sleep(0.05)
    assert op.lookup(key).execution.kernel == "other.kernel"
    assert client.lookups == [str(key)]


def test_a_refused_tune_and_a_missing_daemon_are_logged_once(daemon, caplog):
    op = gt.TunedDense(gputune.Client(daemon.endpoint), tune_misses=True)
    key = op.key("nobackend", 1, 64, 64)
    with caplog.at_level(logging.WARNING, logger="gputune.torch"):
        assert op.lookup(key).state is gputune.State.MISS  # --backend=none refuses
        assert op.lookup(key).state is gputune.State.MISS
    said = warnings_of(caplog)
    assert len(said) == 1 and said[0].startswith(f"gputune: cannot ask the daemon to tune {key}")
    caplog.clear()
    gone = gt.TunedDense(gputune.Client("unix:///nonexistent/gputuned.sock", deadline=0.2),
                         tune_misses=True)
    with caplog.at_level(logging.WARNING, logger="gputune.torch"):
        assert gone.lookup(key) is None and gone.lookup(key) is None
    said = warnings_of(caplog)
    assert len(said) == 1 and said[0].startswith("gputune: lookup failed (UNAVAILABLE")


# --- models ---------------------------------------------------------------------


class Recording(gt.TunedDense):
    def __init__(self, client) -> None:
        super().__init__(client)
        self.roles: List[str] = []

    def __call__(self, x, w, out=None, *, role="linear"):
        self.roles.append(role)
        return super().__call__(x, w, out, role=role)


def test_swap_linears_routes_every_layer_through_the_op(daemon):
    op = Recording(gputune.Client(daemon.endpoint))
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4, bias=False))
    x = torch.randn(2, 16)
    with torch.no_grad():
        want = model(x)
        assert gt.swap_linears(model, op) == 2
        got = model(x)
    assert op.roles == ["0", "2"]  # the module names
    assert got.shape == want.shape and torch.allclose(got, want, atol=1e-6)


def test_the_toy_example_runs_on_the_cpu(daemon):
    run = subprocess.run(
        [sys.executable, str(EXAMPLE), daemon.endpoint],
        capture_output=True, text=True, timeout=120, env=dict(os.environ),
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    assert lines[0].startswith(f"swapped 2 linear layers on {device}; max |diff| vs torch: ")
    assert float(lines[0].rsplit(" ", 1)[1]) < (0.5 if device == "cuda" else 1e-4)
    assert lines[1:] == [
        "dense_bf16/decode/0/m=4/k=1024/n=4096@cs1: MISS",
        "dense_bf16/decode/2/m=4/k=4096/n=1024@cs1: MISS",
    ]


# --- on a CUDA device: the replay ------------------------------------------------


def reference(x, w):
    return F.linear(x.float(), w.float())


@needs_cuda
def test_cuda_bf16_runs_the_replay_and_matches_torch(daemon, caplog):
    client = SpyClient(daemon.endpoint)
    op = gt.TunedDense(client)
    x = torch.randn(1, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16)
    with caplog.at_level(logging.WARNING, logger="gputune.torch"):
        y = op(x, w, role="test.cuda")
        torch.cuda.synchronize()
    assert warnings_of(caplog) == []  # the replay ran (cuBLASLt's default for a MISS)
    assert y.dtype == torch.bfloat16 and y.shape == (1, 2048)
    assert (y.float() - reference(x, w)).abs().max().item() < 0.5
    key = op.key("test.cuda", 1, 1024, 2048)
    assert client.lookups == [str(key)]
    assert client.lookup(key).state is gputune.State.MISS  # --backend=none tunes nothing


@needs_cuda
def test_cuda_a_tuned_key_replays_its_execution(cuda_daemon, caplog):
    client = gputune.Client(cuda_daemon.endpoint, tune_deadline=120)
    op = gt.TunedDense(client)
    x = torch.randn(4, 2048, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 2048, device="cuda", dtype=torch.bfloat16)
    key = op.key_for(x, w, "test.tuned")
    hit = client.tune_dense(key, wait=True)
    assert hit.hit, hit
    out = torch.empty(4, 4096, device="cuda", dtype=torch.bfloat16)
    with caplog.at_level(logging.WARNING, logger="gputune.torch"):
        y = op(x, w, out, role="test.tuned")
        torch.cuda.synchronize()
    assert y is out
    assert warnings_of(caplog) == [], f"{hit.execution.kernel} did not replay"
    assert (y.float() - reference(x, w)).abs().max().item() < 0.5
    print(f"{key}: replayed {hit.execution.kernel} {dict(hit.execution)}")


@needs_cuda
def test_cuda_fp16_and_mismatched_out_fall_back(daemon, caplog):
    op = gt.TunedDense(SpyClient(daemon.endpoint))
    x = torch.randn(2, 64, device="cuda", dtype=torch.float16)
    w = torch.randn(32, 64, device="cuda", dtype=torch.float16)
    with caplog.at_level(logging.WARNING, logger="gputune.torch"):
        assert torch.equal(op(x, w), F.linear(x, w))
        xb, wb = x.bfloat16(), w.bfloat16()
        out = torch.empty(2, 32, device="cuda", dtype=torch.float32)
        assert torch.equal(op(xb, wb, out), F.linear(xb, wb).float())
    assert warnings_of(caplog) == [
        "gputune: not bf16 tensors; running torch's linear",
        "gputune: out is not a contiguous bf16 tensor of the result's shape on x's device;"
        " running torch's linear",
    ]
    assert op.client().lookups == []


def test_one_client_per_cuda_device(daemon, monkeypatch):
    # Both devices' clients reach the test's daemon through GPUTUNE_ENDPOINT;
    # without it each would find its own GPU's daemon by UUID.
    monkeypatch.setenv("GPUTUNE_ENDPOINT", daemon.endpoint)
    op = gt.TunedDense()
    zero = op.client(torch.device("cuda", 0))
    one = op.client(torch.device("cuda", 1))
    assert zero is not None and one is not None and zero is not one
    assert op.client(torch.device("cuda", 1)) is one
    key = op.key("test.per_device", 2, 64, 64)
    assert op.lookup(key, torch.device("cuda", 1)).state is gputune.State.MISS
    # A client given to TunedDense serves every device.
    given = gputune.Client(daemon.endpoint)
    shared = gt.TunedDense(given)
    assert shared.client(torch.device("cuda", 0)) is given
    assert shared.client(torch.device("cuda", 1)) is given
