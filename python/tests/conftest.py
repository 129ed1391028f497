"""Fixtures: the real gputuned on a temporary unix socket.

$GPUTUNED is the daemon binary (ctest sets it, and GPUTUNE_LIBRARY to the
build's libgputune.so); without it the build tree's is used when present.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Iterator, List

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _gputuned() -> str:
    path = os.environ.get("GPUTUNED") or str(ROOT / "build" / "daemon" / "gputuned")
    if not os.access(path, os.X_OK):
        pytest.skip(f"no gputuned at {path}: build it, or set GPUTUNED")
    return path


def gputunectl() -> str:
    """The gputunectl binary ($GPUTUNECTL, else the build tree's), or skip."""
    path = os.environ.get("GPUTUNECTL") or str(ROOT / "build" / "client" / "gputunectl")
    if not os.access(path, os.X_OK):
        pytest.skip(f"no gputunectl at {path}: build it, or set GPUTUNECTL")
    return path


class Daemon:
    """gputuned with its own socket and database; start/stop/kill."""

    def __init__(self, flags: List[str]) -> None:
        self.dir = tempfile.mkdtemp(prefix="gputune-py-")
        self.socket = os.path.join(self.dir, "gputuned.sock")
        self.endpoint = "unix://" + self.socket
        self.flags = flags
        self.proc: "subprocess.Popen[bytes] | None" = None
        self.log_path = os.path.join(self.dir, "gputuned.log")

    def start(self) -> None:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [
                _gputuned(),
                "--listen=" + self.endpoint,
                "--db=" + os.path.join(self.dir, "gputune.db"),
                *self.flags,
            ],
            stdout=log,
            stderr=log,
        )
        log.close()
        import gputune

        probe = gputune.Client(self.endpoint, deadline=0.5)
        give_up = time.monotonic() + 20
        try:
            while time.monotonic() < give_up:
                if self.proc.poll() is not None:
                    raise RuntimeError("gputuned exited at start:\n" + self.log())
                if os.path.exists(self.socket):
                    try:
                        probe.status()
                        return
                    except gputune.Error:
                        pass
                time.sleep(0.02)
        finally:
            probe.close()
        self.kill()
        raise RuntimeError("gputuned did not serve within 20 s:\n" + self.log())

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stop(self) -> None:
        """SIGSTOP, and wait until the kernel has stopped it (state T)."""
        self.signal(signal.SIGSTOP)
        give_up = time.monotonic() + 5
        while time.monotonic() < give_up:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "T":
                    return
            time.sleep(0.005)
        raise RuntimeError("gputuned did not stop within 5 s")

    def kill(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None

    def remove(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def _serving(flags: List[str]) -> Iterator[Daemon]:
    d = Daemon(flags)
    d.start()
    try:
        yield d
    finally:
        d.signal(signal.SIGCONT)  # a test may have stopped it
        d.remove()


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    yield from _serving(["--backend=none"])


@pytest.fixture
def host_daemon() -> Iterator[Daemon]:
    yield from _serving(["--backend=host"])


@pytest.fixture
def cuda_daemon() -> Iterator[Daemon]:
    """For tests that need a CUDA device (they skip without one first)."""
    yield from _serving(["--backend=cuda"])
