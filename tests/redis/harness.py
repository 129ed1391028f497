"""Starts the real gputuned (with --redis_listen) and Debian's redis-server in
temporary directories, for the Redis front door's tests. Nothing is mocked:
the clients are redis-py (the client Triton and Inductor use), redis-cli and
raw sockets.

Exit code 77 (ctest SKIP_RETURN_CODE) when redis-py or redis-server is
missing; scripts/install-deps.sh installs them.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SKIP = 77


def require_tools():
    try:
        import redis  # noqa: F401
    except ImportError:
        print("skipped: python3-redis is not installed")
        sys.exit(SKIP)
    if not shutil.which("redis-server") or not shutil.which("redis-cli"):
        print("skipped: redis-server / redis-cli (redis-tools) not installed")
        sys.exit(SKIP)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def can_connect(port=None, path=None):
    try:
        if path:
            s = socket.socket(socket.AF_UNIX)
            s.connect(path)
        else:
            s = socket.create_connection(("127.0.0.1", port), timeout=1)
        s.close()
        return True
    except OSError:
        return False


class Daemon:
    """gputuned with its gRPC socket, a Redis TCP port and a Redis unix
    socket, in its own directory (kept across restart())."""

    def __init__(self, gputuned, extra=(), directory=None):
        self.gputuned = gputuned
        self.extra = list(extra)
        self.dir = directory or tempfile.mkdtemp(prefix="gputune-redis-")
        self.grpc = f"unix://{self.dir}/g.sock"
        self.unix = f"{self.dir}/r.sock"
        self.port = free_port()
        self.proc = None
        self.start()

    def start(self):
        self.log = open(f"{self.dir}/log", "ab")
        self.proc = subprocess.Popen(
            [self.gputuned, "--backend=none", f"--listen={self.grpc}",
             f"--db={self.dir}/g.db",
             f"--redis_listen=127.0.0.1:{self.port},unix:{self.unix}"]
            + self.extra, stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(lambda: can_connect(port=self.port) and
                 can_connect(path=self.unix), "gputuned's redis listeners")

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)
        self.log.close()

    def restart(self):
        self.stop()
        self.start()

    def alive(self):
        return self.proc.poll() is None

    def log_text(self):
        with open(f"{self.dir}/log", "rb") as f:
            return f.read().decode("utf-8", "replace")

    def client(self, **kw):
        import redis
        return redis.Redis(host="127.0.0.1", port=self.port, **kw)

    def close(self):
        self.stop()
        log = self.log_text()
        shutil.rmtree(self.dir, ignore_errors=True)
        # A sanitizer build of gputuned (build-check) reports into its log.
        for mark in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                     "runtime error:", "WARNING: ThreadSanitizer"):
            if mark in log:
                at = log.index(mark)
                raise AssertionError(f"gputuned's log: {log[at:at + 3000]}")


class RedisServer:
    """Debian's redis-server on a unix socket and a port, one database, no
    persistence: the reference the differential test compares against."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="gputune-redis-ref-")
        self.port = free_port()
        self.unix = f"{self.dir}/redis.sock"
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--unixsocket", self.unix, "--save", "", "--appendonly", "no",
             "--databases", "1", "--dir", self.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: can_connect(path=self.unix), "redis-server")

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)


def run_tests(tests):
    """Runs each test function; prints and exits 1 on the first failure."""
    failed = 0
    for test in tests:
        name = test.__doc__.strip().splitlines()[0] if test.__doc__ else test.__name__
        try:
            test()
            print(f"ok   {name}")
        except Exception as e:  # noqa: BLE001 - report any failure by name
            failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}")
    sys.exit(1 if failed else 0)
