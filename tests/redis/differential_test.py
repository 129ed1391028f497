#!/usr/bin/python3
"""One scripted sequence of the commands the front door supports (good and
bad: wrong arity, wrong types, huge and empty values, binary keys,
pipelining) sent to Debian's redis-server, started here, and to gputuned:
the replies must be the same bytes.

usage: differential_test.py GPUTUNED
"""
import socket
import sys

import harness


def resp(*args):
    """One command as RESP (an array of bulk strings), as clients send it."""
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


BIG = b"x" * 60000
BINARY_KEY = b"\x00\xff\r\nkey with spaces%@"
END = resp("ECHO", "__end__")
END_REPLY = b"$7\r\n__end__\r\n"

# Each entry is one command; they are sent pipelined, in one write.
SCRIPT = [
    resp("FLUSHDB"),
    resp("PING"), resp("PING", "hi"), resp("PING", "a", "b"),
    resp("ECHO"), resp("ECHO", "x"), resp("echo", ""),
    resp("GET"), resp("GET", "a", "b"), resp("GET", "missing"),
    resp("SET", "k", "v"), resp("GET", "k"), resp("get", "k"), resp("GeT", "k"),
    resp("SET", "k", "v2", "XX"), resp("GET", "k"),
    resp("SET", "n", "v", "XX"), resp("GET", "n"),
    resp("SET", "k", "v3", "NX"), resp("SET", "k2", "w", "NX"),
    resp("GET", "k2"), resp("GET", "k"),
    resp("SET", "k", "v", "EX", "0"), resp("SET", "k", "v", "EX", "-1"),
    resp("SET", "k", "v", "EX", "abc"), resp("SET", "k", "v", "EX"),
    resp("SET", "k", "v", "PX", "01"), resp("SET", "k", "v", "NX", "XX"),
    resp("SET", "k", "v", "EX", "10", "PX", "10"),
    resp("SET", "k", "v", "KEEPTTL", "EX", "5"),
    resp("SET", "k", "v", "FOO"),
    resp("SET", "k", "v4", "GET"), resp("SET", "fresh", "v", "GET"),
    resp("SET"), resp("SET", "k"),
    resp("SET", "empty", ""), resp("GET", "empty"),
    resp("SET", BINARY_KEY, b"\x00\x01\r\n"), resp("GET", BINARY_KEY),
    resp("SET", "big", BIG), resp("GET", "big"),
    resp("MGET", "k", "missing", "k2", BINARY_KEY), resp("MGET"),
    resp("MSET", "a"), resp("MSET", "a", "1", "b"),
    resp("MSET", "a", "1", "b", "2", "a", "3"), resp("MGET", "a", "b"),
    resp("EXISTS"), resp("EXISTS", "a", "b", "zz", "a"),
    resp("DEL"), resp("DEL", "a", "zz", "a"), resp("GET", "a"),
    resp("TTL"), resp("TTL", "missing"), resp("TTL", "k"),
    resp("PTTL", "missing"), resp("PTTL", "k"),
    resp("SET", "t", "v", "EX", "1000"), resp("TTL", "t"),
    resp("EXPIRE", "t"), resp("EXPIRE", "t", "abc"),
    resp("EXPIRE", "missing", "10"),
    resp("EXPIRE", "k", "100", "XX"), resp("EXPIRE", "k", "100", "NX"),
    resp("EXPIRE", "k", "100", "NX"), resp("EXPIRE", "k", "200", "XX"),
    resp("TTL", "k"), resp("EXPIRE", "k", "50", "GT"), resp("TTL", "k"),
    resp("EXPIRE", "k", "50", "LT"), resp("TTL", "k"),
    resp("EXPIRE", "k", "10", "FOO"), resp("EXPIRE", "k", "10", "NX", "XX"),
    resp("EXPIRE", "k", "10", "GT", "LT"),
    resp("EXPIRE", "t", "0"), resp("TTL", "t"), resp("GET", "t"),
    resp("EXPIRE", "k2", "-5"), resp("EXISTS", "k2"),
    resp("SELECT", "0"), resp("SELECT", "1"), resp("SELECT", "x"),
    resp("SELECT"), resp("SELECT", "0", "1"),
    resp("AUTH"), resp("AUTH", "x"), resp("AUTH", "a", "b"),
    resp("AUTH", "a", "b", "c"),
    resp("CLIENT"), resp("CLIENT", "GETNAME"), resp("CLIENT", "SETNAME"),
    resp("CLIENT", "SETNAME", "a b"), resp("CLIENT", "SETNAME", "n1"),
    resp("CLIENT", "GETNAME"), resp("CLIENT", "FOO"),
    resp("HELLO", "4"), resp("HELLO", "x"),
    resp("FOO"), resp("FOO", "x", "y"), resp("FOO", "x" * 300),
    resp("COMMAND", "FOO"), resp("COMMAND", "COUNT", "x"),
    resp("DBSIZE", "x"), resp("FLUSHDB", "x"), resp("INFO", "nosuchsection"),
    resp("MGET", "k", "big", "empty", "n"),
    resp("DBSIZE"),
    # Requests Redis skips: empty and null arrays.
    b"*0\r\n", b"*-1\r\n", resp("PING"),
    # Inline commands, as typed into telnet or nc, between arrays; blank
    # lines are skipped.
    b"PING\r\n", b"ECHO  hello\r\n", b"\r\n", b" \t \r\n", b"\n",
    b"SET inline value\r\n", b"GET inline\n", b"MGET inline k missing\r\n",
    b"get\r\n", b"FOO bar\r\n", b"ping hi\r\n", resp("GET", "inline"),
]
SKIP_IN_COMPARE = set()

# Sessions that end in a protocol error: the server replies and closes.
PROTOCOL_ERRORS = [
    b"*1\r\n:5\r\n",
    b"*2\r\n$3\r\nGET\r\n*1\r\n$1\r\nx\r\n",
    b"*2\r\n$3\r\nGET\r\n+ok\r\n",
    b"PING" + b"x" * 70000,  # an inline line over 64 KiB
]


def converse(path, data, until_close=False):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(60)
    s.connect(path)
    s.sendall(data if until_close else data + END)
    got = b""
    while True:
        chunk = s.recv(1 << 16)
        if not chunk:
            break
        got += chunk
        if not until_close and got.endswith(END_REPLY):
            break
    s.close()
    return got


def split_replies(data):
    """Replies one by one (for a readable diff), by redis-py's parser."""
    from redis.connection import PythonParser  # noqa: F401 - only the shape
    replies, i = [], 0

    def line(j):
        k = data.index(b"\r\n", j)
        return data[j:k], k + 2

    def one(j):
        head, j2 = line(j)
        t = head[:1]
        if t == b"$":
            n = int(head[1:])
            return j2 if n < 0 else j2 + n + 2
        if t == b"*":
            n = int(head[1:])
            for _ in range(max(n, 0)):
                j2 = one(j2)
            return j2
        return j2

    while i < len(data):
        j = one(i)
        replies.append(data[i:j])
        i = j
    return replies


def main():
    harness.require_tools()
    gputuned = sys.argv[1]
    ref = harness.RedisServer()
    daemon = harness.Daemon(gputuned)
    failures = 0
    try:
        stream = b"".join(SCRIPT)
        want = converse(ref.unix, stream)
        got = converse(daemon.unix, stream)
        if want != got:
            w, g = split_replies(want), split_replies(got)
            for n, (cmd, a, b) in enumerate(zip(SCRIPT + [END], w, g)):
                if a != b:
                    failures += 1
                    print(f"FAIL step {n} {cmd[:80]!r}:\n  redis-server {a[:200]!r}"
                          f"\n  gputuned     {b[:200]!r}")
            if len(w) != len(g):
                failures += 1
                print(f"FAIL reply count: redis-server {len(w)}, gputuned {len(g)}")
        else:
            print(f"ok   {len(SCRIPT)} pipelined commands: {len(want)} identical bytes")
        # The same stream a byte at a time: the same replies.
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(60)
        s.connect(daemon.unix)
        for b in (stream + END):
            s.send(bytes([b]))
        slow = b""
        while not slow.endswith(END_REPLY):
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            slow += chunk
        s.close()
        if slow != want:
            failures += 1
            print("FAIL the byte-at-a-time stream got other replies")
        else:
            print("ok   the same stream a byte at a time: identical bytes")
        for bad in PROTOCOL_ERRORS:
            a = converse(ref.unix, bad, until_close=True)
            b = converse(daemon.unix, bad, until_close=True)
            if a != b:
                failures += 1
                print(f"FAIL protocol error {bad[:60]!r}: redis-server {a!r}, "
                      f"gputuned {b!r}")
            else:
                print(f"ok   protocol error {bad[:60]!r}: {a!r} then closed, both")
    finally:
        daemon.close()
        ref.close()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
