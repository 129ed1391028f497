#!/usr/bin/python3
"""Hostile input to the Redis front door: oversize bulk, a million
arguments, an endless request, inline commands, 2,000 idle connections.
Each gets a Redis error and a closed connection (or is just held, cheaply);
nothing stored changes; the daemon stays up, bounded in memory, and keeps
answering Redis and gRPC.

usage: bad_input_test.py GPUTUNED GPUTUNECTL
"""
import resource
import socket
import subprocess
import sys
import threading
import time

import harness

GPUTUNED = sys.argv[1] if len(sys.argv) > 1 else None
GPUTUNECTL = sys.argv[2] if len(sys.argv) > 2 else None
D = None


def session(data, chunk=1 << 16):
    """Sends data (as far as the daemon reads it) and returns everything
    received until the daemon closed the connection."""
    s = socket.create_connection(("127.0.0.1", D.port), timeout=120)
    try:
        for i in range(0, len(data), chunk):
            s.sendall(data[i:i + chunk])
    except (BrokenPipeError, ConnectionResetError):
        pass  # closed on us mid-send: what a bound does
    got = b""
    try:
        while True:
            c = s.recv(1 << 16)
            if not c:
                break
            got += c
    except ConnectionResetError:
        pass
    s.close()
    return got


def rss_kib():
    with open(f"/proc/{D.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def still_serving():
    assert D.alive(), "gputuned died"
    assert D.client().ping()
    out = subprocess.run([GPUTUNECTL, f"--endpoint={D.grpc}", "status"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_oversize_bulk():
    """a 10 MB value (over the 9 MiB bulk bound): error, closed, nothing stored"""
    data = (b"*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$10000000\r\n" +
            b"x" * 10000000 + b"\r\n")
    got = session(data)
    assert got == b"-ERR Protocol error: invalid bulk length\r\n", got[:200]
    assert D.client().get("big") is None
    still_serving()


def test_a_million_arguments():
    """MGET with a million arguments: error and closed, at the header"""
    got = session(b"*1000001\r\n$4\r\nMGET\r\n" + b"$1\r\nk\r\n" * 1000)
    assert got == b"-ERR Protocol error: invalid multibulk length\r\n", got[:200]
    still_serving()


def test_endless_request():
    """a bulk that never ends: cut off after the buffered-bytes bound"""
    data = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$999999999\r\n" + b"y" * (20 << 20)
    got = session(data)
    assert got.startswith(b"-ERR Protocol error: more than"), got[:200]
    assert D.client().get("k") is None
    still_serving()


def test_inline_commands():
    """inline commands (telnet) run; with quotes: an error, closed, unstored"""
    s = socket.create_connection(("127.0.0.1", D.port), timeout=120)
    s.sendall(b"SET inl v\r\nGET inl\r\n")
    got = b""
    while len(got) < len(b"+OK\r\n$1\r\nv\r\n"):
        c = s.recv(1 << 16)
        assert c, got
        got += c
    s.close()
    assert got == b"+OK\r\n$1\r\nv\r\n", got
    got = session(b'SET inl "v 2"\r\n')
    assert got.startswith(b"-ERR Protocol error: quotes"), got
    assert D.client().get("inl") == b"v"
    still_serving()


def test_replies_beyond_the_output_bound():
    """40 MB of replies pipelined unread (over the 32 MiB bound): all arrive"""
    r = D.client()
    r.set("kb", b"z" * 1000)
    n = 40000
    s = socket.create_connection(("127.0.0.1", D.port), timeout=120)
    # The commands go from a thread: once the daemon holds its bound of
    # replies it stops reading, and a sendall on this thread would then wait
    # on socket buffers for ever (as it would with Redis). Reading starts
    # after a pause, so the daemon reaches the bound first.
    sender = threading.Thread(
        target=s.sendall, args=(b"*2\r\n$3\r\nGET\r\n$2\r\nkb\r\n" * n,))
    sender.start()
    time.sleep(2)
    reply = b"$1000\r\n" + b"z" * 1000 + b"\r\n"
    want = len(reply) * n
    got = 0
    while got < want:
        c = s.recv(1 << 20)
        assert c, f"closed after {got} of {want} bytes"
        got += len(c)
    sender.join()
    s.close()
    assert got == want
    still_serving()


def test_idle_connections():
    """2,000 idle connections: held cheaply; Redis and gRPC keep answering"""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    before = rss_kib()
    conns = []
    for _ in range(2000):
        conns.append(socket.create_connection(("127.0.0.1", D.port), timeout=60))
    # A command on the last one: every connection was accepted before it.
    conns[-1].sendall(b"*1\r\n$4\r\nPING\r\n")
    assert conns[-1].recv(64) == b"+PONG\r\n"
    still_serving()
    grown = rss_kib() - before
    print(f"     (2,000 idle connections: RSS grew {grown} KiB)")
    assert grown < 200 * 1024, f"RSS grew {grown} KiB"
    for c in conns:
        c.close()
    still_serving()


if __name__ == "__main__":
    harness.require_tools()
    D = harness.Daemon(GPUTUNED)
    try:
        harness.run_tests([test_oversize_bulk, test_a_million_arguments,
                           test_endless_request, test_inline_commands,
                           test_replies_beyond_the_output_bound,
                           test_idle_connections])
    finally:
        D.close()
