"""gputune.torch: the import and the fallback on any machine; the replay
on a CUDA device (the H200 test machine). Skipped where PyTorch is missing
(Debian's python3-torch is not in scripts/install-deps.sh: it pulls in 233
packages)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import gputune  # noqa: E402
import gputune.torch as gt  # noqa: E402


def test_cpu_tensors_run_torchs_linear(daemon):
    op = gt.TunedDense(gputune.Client(daemon.endpoint))
    x = torch.randn(3, 5, 16)
    w = torch.randn(8, 16)
    y = op(x, w)
    assert torch.equal(y, torch.nn.functional.linear(x, w))
    out = torch.empty(3, 5, 8)
    assert op(x, w, out) is out and torch.equal(out, y)
    # Nothing was asked of the daemon for a CPU tensor.
    assert gputune.Client(daemon.endpoint).status().get("entries", "0") == "0"


def test_the_key_is_built_from_the_shapes():
    op = gt.TunedDense(candidate_set="cs1", decode_max_tokens=64)
    assert str(op.key("attn.qkv", 1, 4096, 6144)) == (
        "dense_bf16/decode/attn.qkv/m=1/k=4096/n=6144@cs1")
    assert str(op.key("mlp.up", 512, 4096, 14336)).startswith("dense_bf16/prefill/")


def test_swap_linears_keeps_the_output(daemon):
    op = gt.TunedDense(gputune.Client(daemon.endpoint))
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4))
    x = torch.randn(2, 16)
    with torch.no_grad():
        want = model(x)
        assert gt.swap_linears(model, op) == 2
        assert torch.allclose(model(x), want)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_bf16_runs_the_replay_and_matches_torch(daemon):
    client = gputune.Client(daemon.endpoint)
    op = gt.TunedDense(client)
    x = torch.randn(1, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16)
    y = op(x, w, role="test.cuda")
    ref = torch.nn.functional.linear(x.float(), w.float())
    torch.cuda.synchronize()
    assert (y.float() - ref).abs().max().item() < 0.5
    # The key was looked up (a MISS: --backend=none tunes nothing).
    key = op.key("test.cuda", 1, 1024, 2048)
    assert client.lookup(key).state is gputune.State.MISS
