"""Client(device=...) finds the daemon of the GPU meant, by its UUID."""

from __future__ import annotations

import os
import pathlib
import types

import pytest

import gputune
from conftest import Daemon

A = "GPU-a1111111-1111-1111-1111-111111111111"
B = "GPU-b2222222-2222-2222-2222-222222222222"


@pytest.fixture
def gpu_b():
    d = Daemon(["--backend=host", "--device_uuid=" + B])
    d.start()
    try:
        yield d
    finally:
        d.remove()


def write_gpu(proc: pathlib.Path, bus: str, uuid: str) -> None:
    gpu = proc / "gpus" / bus
    gpu.mkdir(parents=True)
    (gpu / "information").write_text(
        f"Model: \t\t NVIDIA H200\nGPU UUID: \t {uuid}\nBus Location: \t {bus}\n")


def test_a_uuid_and_a_cuda_device_name_the_same_daemon(gpu_b, tmp_path, monkeypatch):
    by_uuid = gputune.Client(device=B, socket_dir=gpu_b.dir)
    assert by_uuid.gpu_uuid == B
    assert by_uuid.status()["deviceUuid"] == B
    assert by_uuid.endpoint == f"unix://{gpu_b.dir}/by-uuid/{B}.sock"

    # cuda:1 under CUDA_VISIBLE_DEVICES=0,1 is the machine's second GPU: B.
    proc = tmp_path / "nvidia"
    write_gpu(proc, "0000:17:00.0", A)
    write_gpu(proc, "0000:65:00.0", B)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    cuda1 = types.SimpleNamespace(type="cuda", index=1)  # a torch.device's shape
    for device in (cuda1, "cuda:1", 1):
        c = gputune.Client(device=device, socket_dir=gpu_b.dir, nvidia_proc_dir=str(proc))
        assert c.gpu_uuid == B
        assert c.status()["deviceUuid"] == B

    # Device 0 is A, which has no daemon: the error names it and the directory.
    with pytest.raises(gputune.NotFound) as e:
        gputune.Client(device=0, socket_dir=gpu_b.dir, nvidia_proc_dir=str(proc))
    assert A in str(e.value)
    assert os.path.join(gpu_b.dir, "by-uuid") in str(e.value)

    with pytest.raises(ValueError):
        gputune.Client(device="cpu")


def test_tune_dense_for_another_gpu_is_refused(gpu_b):
    client = gputune.Client(gpu_b.endpoint, device=A)  # B's daemon, meant for A
    key = gputune.Key.dense("decode", "t", m=2, k=64, n=64, candidate_set="cs1")
    with pytest.raises(gputune.FailedPrecondition) as e:
        client.tune_dense(key)
    assert A in str(e.value) and B in str(e.value)
    assert client.lookup(key).state is gputune.State.MISS
