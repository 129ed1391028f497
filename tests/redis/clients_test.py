#!/usr/bin/python3
"""The calls real clients make, through the Redis front door: redis-py as
Triton's RedisRemoteCacheBackend and Inductor's RedisRemoteCacheBackend use
it, redis-cli, and gputunectl seeing the same values as store entries.
Durability (kill -9), TTLs across restarts, AUTH and the operator rule.

usage: clients_test.py GPUTUNED GPUTUNECTL
"""
import json
import os
import subprocess
import sys
import time

import harness

GPUTUNED = sys.argv[1] if len(sys.argv) > 1 else None
GPUTUNECTL = sys.argv[2] if len(sys.argv) > 2 else None


def ctl(d, *args):
    return subprocess.run([GPUTUNECTL, f"--endpoint={d.grpc}", *args],
                          capture_output=True, text=True, timeout=120)


def test_triton_and_inductor_calls():
    """Triton's MGET/SET and Inductor's GET/SET, the values visible to gputunectl"""
    import redis
    d = harness.Daemon(GPUTUNED)
    try:
        # triton.runtime.cache.RedisRemoteCacheBackend: redis.Redis(host,
        # port); get() is one MGET of "triton:{key}:{filename}" keys, put()
        # one SET.
        triton = redis.Redis(host="127.0.0.1", port=d.port)
        names = [f"triton:abc123:{f}" for f in
                 ("add_kernel.json", "add_kernel.cubin", "__grp__add_kernel.json")]
        assert triton.mget(names) == [None, None, None]
        blob = bytes(range(256)) * 200  # a 51,200-byte cubin
        triton.set(names[1], blob)
        triton.set(names[0], b'{"num_warps": 4}')
        assert triton.mget(names) == [b'{"num_warps": 4}', blob, None]
        # torch._inductor.remote_cache.RedisRemoteCacheBackend: from_url
        # (TORCHINDUCTOR_REDIS_URL) or Redis(host, port); GET and SET of
        # "pt2:{cache_id}::{key}:c1" with a JSON value.
        inductor = redis.Redis.from_url(f"redis://127.0.0.1:{d.port}")
        key = "pt2:fx-graph-v1::fabcdef:c1"
        assert inductor.get(key) is None
        value = json.dumps({"data": "cached graph", "version": 1}).encode()
        inductor.set(key, value)
        assert inductor.get(key) == value
        # The entries of op "redis", like any other entry.
        out = ctl(d, "--json", "list")
        assert out.returncode == 0, out.stderr
        assert "redis" in out.stdout and "fx-graph-v1" in out.stdout, out.stdout
        shown = ctl(d, "get", "redis/k=pt2:fx-graph-v1::fabcdef:c1@redis")
        assert shown.returncode == 0, shown.stderr
        assert "redis.value" in shown.stdout, shown.stdout
        # gputunectl delete (an operator call): the key is gone for Redis.
        gone = ctl(d, "delete", "redis/k=pt2:fx-graph-v1::fabcdef:c1@redis")
        assert gone.returncode == 0, gone.stderr
        assert inductor.get(key) is None
    finally:
        d.close()


def test_redis_cli():
    """redis-cli's commands, and its connect-time COMMAND DOCS"""
    d = harness.Daemon(GPUTUNED)
    try:
        def cli(*args, stdin=None):
            return subprocess.run(["redis-cli", "-p", str(d.port), *args],
                                  input=stdin, capture_output=True, text=True,
                                  timeout=60).stdout.strip()
        assert cli("PING") == "PONG"
        assert cli("SET", "greeting", "hello", "EX", "600") == "OK"
        assert cli("GET", "greeting") == "hello"
        assert cli("TTL", "greeting") in ("600", "599")
        assert cli("DBSIZE") == "1"
        assert "db0:keys=1,expires=1" in cli("INFO", "keyspace")
        assert cli("COMMAND", "DOCS") == ""
        # Interactive mode (stdin not a terminal: commands line by line).
        assert cli(stdin="GET greeting\nPING\n").split() == ["hello", "PONG"]
        # The unix socket (SO_PEERCRED: this is the daemon's user, an
        # operator): DEL is allowed there, not over TCP.
        assert "NOPERM" in cli("DEL", "greeting")
        out = subprocess.run(["redis-cli", "-s", d.unix, "DEL", "greeting"],
                             capture_output=True, text=True, timeout=60)
        assert out.stdout.strip() == "1", out.stdout
    finally:
        d.close()


def test_acknowledged_sets_survive_kill_9_and_ttls_persist():
    """kill -9 loses no acknowledged SET; TTLs survive a restart and expire"""
    d = harness.Daemon(GPUTUNED)
    try:
        r = d.client()
        pipe = r.pipeline(transaction=False)
        for i in range(200):
            pipe.set(f"k{i}", f"v{i}")
        assert all(pipe.execute())
        r.set("lasting", "x", ex=1000)
        r.set("brief", "y", px=1500)
        d.kill9()
        d.start()
        r = d.client()
        assert r.mget([f"k{i}" for i in range(200)]) == \
            [f"v{i}".encode() for i in range(200)]
        assert 990 <= r.ttl("lasting") <= 1000
        harness.wait_for(lambda: r.get("brief") is None, "brief to expire")
        assert r.ttl("brief") == -2
        assert r.exists("lasting", "brief") == 1
    finally:
        d.close()


def test_kernel_sized_values():
    """4 MiB values via redis-py and redis-cli, kept across kill -9; over
    --redis_max_value: an error and nothing stored (Triton's compiled
    kernels are a few MiB)"""
    import redis
    d = harness.Daemon(GPUTUNED)
    try:
        r = d.client()
        cubin = os.urandom(4 << 20)
        key = "triton:0a1b2c:matmul_kernel.cubin"
        assert r.set(key, cubin)
        assert r.mget([key, "triton:0a1b2c:matmul_kernel.json"]) == [cubin, None]
        # redis-cli: the value from stdin (-x: too long for an argument).
        text = os.urandom(2 << 20).hex()  # 4 MiB of text
        with open(os.path.join(d.dir, "value"), "w") as f:
            f.write(text)
        with open(os.path.join(d.dir, "value")) as f:
            out = subprocess.run(["redis-cli", "-p", str(d.port), "-x", "SET",
                                  "blob"], stdin=f, capture_output=True,
                                 text=True, timeout=120)
        assert out.stdout.strip() == "OK", out
        got = subprocess.run(["redis-cli", "-p", str(d.port), "GET", "blob"],
                             capture_output=True, text=True, timeout=120)
        assert got.stdout == text + "\n", got.stdout[:100]
        shown = ctl(d, "--json", "get", f"redis/k={key}@redis")
        assert shown.returncode == 0, shown.stderr
        listed = ctl(d, "list", "--op=redis")
        assert listed.returncode == 0 and "blob" in listed.stdout, listed
        d.kill9()
        d.start()
        r = d.client()
        assert r.get(key) == cubin
        assert r.get("blob") == text.encode()
    finally:
        d.close()
    small = harness.Daemon(GPUTUNED, ["--redis_max_value=1048576"])
    try:
        r = small.client()
        assert r.set("fits", b"y" * (1 << 20))
        for size in ((1 << 20) + 1, 2 << 20):  # the error, connection kept
            try:
                r.set("over", b"z" * size)
                raise AssertionError("a value over --redis_max_value was stored")
            except redis.exceptions.ResponseError as e:
                assert "larger than gputune stores (1048576 bytes" in str(e), e
        assert r.get("over") is None and r.dbsize() == 1
        try:
            r.mset({"a": "1", "over": b"z" * ((1 << 20) + 1)})
            raise AssertionError("an MSET over --redis_max_value was stored")
        except redis.exceptions.ResponseError as e:
            assert "larger than gputune stores" in str(e), e
        assert r.get("a") is None and r.dbsize() == 1
    finally:
        small.close()


def test_auth_and_exposure():
    """AUTH with --redis_password_file; non-loopback TCP refused without it"""
    import redis
    d0 = harness.Daemon(GPUTUNED)
    pw = os.path.join(d0.dir, "pw")
    with open(pw, "w") as f:
        f.write("s3cret\n")
    d0.stop()
    d = harness.Daemon(GPUTUNED, [f"--redis_password_file={pw}"],
                       directory=d0.dir)
    try:
        try:
            d.client().get("x")
            raise AssertionError("a GET without AUTH was answered")
        except redis.exceptions.AuthenticationError:
            pass
        try:
            d.client(password="wrong").get("x")
            raise AssertionError("a wrong password was accepted")
        except (redis.exceptions.AuthenticationError,
                redis.exceptions.ResponseError) as e:
            assert "WRONGPASS" in str(e) or "invalid" in str(e), e
        assert d.client(password="s3cret").set("x", "1")
        url = redis.Redis.from_url(f"redis://:s3cret@127.0.0.1:{d.port}/0")
        assert url.get("x") == b"1"
        # Without --allow_insecure_tcp, with or without a password: refused.
        for extra in ([], [f"--redis_password_file={pw}"]):
            out = subprocess.run(
                [GPUTUNED, "--backend=none", f"--listen=unix://{d.dir}/g2.sock",
                 f"--db={d.dir}/g2.db", "--redis_listen=0.0.0.0:0", *extra],
                capture_output=True, text=True, timeout=60)
            assert out.returncode != 0
            assert "not a loopback address" in out.stdout + out.stderr, out
    finally:
        d.close()


def test_one_daemon_per_redis_socket():
    """a second daemon on the same Redis unix socket is refused, naming it"""
    d = harness.Daemon(GPUTUNED)
    try:
        out = subprocess.run(
            [GPUTUNED, "--backend=none", f"--listen=unix://{d.dir}/other.sock",
             f"--db={d.dir}/other.db", f"--redis_listen=unix:{d.unix}"],
            capture_output=True, text=True, timeout=60)
        assert out.returncode != 0
        assert d.unix in out.stdout + out.stderr, out
        assert d.client().ping()  # the first one keeps its socket
        assert subprocess.run(["redis-cli", "-s", d.unix, "PING"],
                              capture_output=True, text=True,
                              timeout=60).stdout.strip() == "PONG"
    finally:
        d.close()


if __name__ == "__main__":
    harness.require_tools()
    harness.run_tests([test_triton_and_inductor_calls, test_redis_cli,
                       test_acknowledged_sets_survive_kill_9_and_ttls_persist,
                       test_kernel_sized_values,
                       test_auth_and_exposure,
                       test_one_daemon_per_redis_socket])
