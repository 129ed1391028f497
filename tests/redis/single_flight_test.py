#!/usr/bin/python3
"""Single flight through the Redis front door: a miss on a tuned key makes
the first reader the holder (it gets nil and tunes); every other reader
waits for the holder's SET. The clients are redis-py processes doing what
Triton's autotuner (MGET, then SET) and Inductor's (GET, then SET) do.

usage: single_flight_test.py GPUTUNED
"""
import json
import subprocess
import sys
import time

import harness

GPUTUNED = sys.argv[1] if len(sys.argv) > 1 else None

# What one tuner process does for each key: read; on nil "tune" (sleep) and
# SET its own result. Prints {"tunes": n, "values": {key: value}}.
WORKER = r"""
import json, os, random, sys, time
import redis
port, keys, tune_s, seed = int(sys.argv[1]), json.loads(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
r = redis.Redis(host="127.0.0.1", port=port)
random.Random(seed).shuffle(keys)
tunes, values = 0, {}
for key in keys:
    # Triton's backend reads with MGET, Inductor's with GET.
    v = r.mget([key])[0] if key.startswith("triton:") else r.get(key)
    if v is None:
        time.sleep(tune_s)
        v = ("best config from pid %d" % os.getpid()).encode()
        r.set(key, v)
        tunes += 1
    values[key] = v.decode()
print(json.dumps({"tunes": tunes, "values": values}))
"""


def tuned_keys(n):
    keys = []
    for i in range(n):
        if i % 2:
            keys.append(f"triton:{i:064x}:matmul_kernel.autotune.json")
        else:
            keys.append(f"pt2:{i:064x}::c{i}.py:c1")  # Inductor's format
    return keys


def spawn_workers(port, keys, processes=8, tune_s=0.2):
    return [subprocess.Popen([sys.executable, "-c", WORKER, str(port),
                              json.dumps(keys), str(tune_s), str(n)],
                             stdout=subprocess.PIPE)
            for n in range(processes)]


def collect(procs):
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=240)
        assert p.returncode == 0, f"worker exited {p.returncode}"
        results.append(json.loads(out))
    return results


def run_workers(port, keys, processes=8, tune_s=0.2):
    return collect(spawn_workers(port, keys, processes, tune_s))


def test_each_key_tuned_once():
    """8 processes x 20 keys: exactly 20 tunes, the same 20 values everywhere"""
    d = harness.Daemon(GPUTUNED)
    try:
        keys = tuned_keys(20)
        results = run_workers(d.port, keys)
        tunes = sum(r["tunes"] for r in results)
        assert tunes == 20, f"{tunes} tunes (want 20)"
        first = results[0]["values"]
        for r in results[1:]:
            assert r["values"] == first, "processes ended with other values"
        # The values are entries of the store: gputunectl sees them.
        assert len(first) == 20
    finally:
        kill_holders()
        d.close()


def test_plain_redis_tunes_more():
    """the same workload against redis-server tunes keys more than once"""
    ref = harness.RedisServer()
    try:
        keys = tuned_keys(20)
        results = run_workers(ref.port, keys)
        tunes = sum(r["tunes"] for r in results)
        print(f"     (redis-server: {tunes} tunes for 20 keys by 8 processes)")
        assert tunes >= 20
    finally:
        ref.close()


HOLDER = r"""
import sys, time, redis
r = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]))
assert r.get(sys.argv[2]) is None
print("holding", flush=True)
time.sleep(3600)
"""

READER = r"""
import sys, time, redis
r = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]), socket_timeout=float(sys.argv[3]) if len(sys.argv) > 3 else None)
r.ping()
print("asking", flush=True)
start = time.monotonic()
try:
    v = r.get(sys.argv[2])
    print("value" if v is not None else "nil", round(time.monotonic() - start, 3), flush=True)
except redis.exceptions.TimeoutError:
    print("timeout", flush=True)
"""


def read_once(port, key, socket_timeout=None):
    """One GET by a fresh process: "nil", "value" or "timeout"."""
    args = [sys.executable, "-c", READER, str(port), key]
    if socket_timeout is not None:
        args.append(str(socket_timeout))
    out = subprocess.run(args, capture_output=True, text=True,
                         timeout=120).stdout.split()
    return out[1] if len(out) > 1 else " ".join(out)


def start_reader(port, key):
    """A GET by a fresh process, started once its connection is up."""
    reader = subprocess.Popen([sys.executable, "-c", READER, str(port), key],
                              stdout=subprocess.PIPE, text=True)
    assert reader.stdout.readline().strip() == "asking"
    return reader


HOLDERS = []  # killed when a test ends, whatever it asserted


def start_holder(port, key):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(port), key],
                              stdout=subprocess.PIPE, text=True)
    HOLDERS.append(holder)
    assert holder.stdout.readline().strip() == "holding"
    return holder


def kill_holders():
    while HOLDERS:
        h = HOLDERS.pop()
        h.kill()
        h.wait()


def test_holder_killed_hands_over_at_once():
    """the holder killed -9 mid-tune: a waiter gets nil at once, not at the lease"""
    d = harness.Daemon(GPUTUNED, ["--redis_claim_ttl=10m", "--redis_wait=10m"])
    try:
        key = tuned_keys(1)[0]
        holder = start_holder(d.port, key)
        reader = start_reader(d.port, key)
        time.sleep(1.0)
        assert reader.poll() is None, "the reader did not wait for the holder"
        holder.kill()
        holder.wait()
        out, _ = reader.communicate(timeout=120)  # the lease is 10 minutes
        assert out.split()[0] == "nil", out
        # The reader became the holder and left without a SET: the next
        # reader is granted the key at once too.
        assert d.client().get(key) is None
    finally:
        kill_holders()
        d.close()


def test_waiters_get_the_holders_value():
    """readers that wait get the value the holder SETs"""
    d = harness.Daemon(GPUTUNED)
    try:
        key = tuned_keys(2)[1]
        import redis
        holder = d.client()
        assert holder.mget([key]) == [None]
        readers = [start_reader(d.port, key) for _ in range(3)]
        time.sleep(0.5)
        assert all(r.poll() is None for r in readers)
        holder.set(key, b"BLOCK_M=128")
        for r in readers:
            out, _ = r.communicate(timeout=120)
            assert out.split()[0] == "value", out
        assert d.client().get(key) == b"BLOCK_M=128"
    finally:
        kill_holders()
        d.close()


def test_lease_lapse_and_wait_bound():
    """a lapsed lease hands over; --redis_wait bounds a wait and says so"""
    d = harness.Daemon(GPUTUNED, ["--redis_claim_ttl=1s", "--redis_wait=30s"])
    try:
        key = tuned_keys(1)[0]
        holder = start_holder(d.port, key)
        assert read_once(d.port, key) == "nil"  # after the 1 s lease
        holder.kill()
        holder.wait()
    finally:
        kill_holders()
        d.close()
    d = harness.Daemon(GPUTUNED, ["--redis_claim_ttl=10m", "--redis_wait=1s"])
    try:
        key = tuned_keys(1)[0]
        holder = start_holder(d.port, key)
        assert read_once(d.port, key) == "nil"
        harness.wait_for(lambda: "waited --redis_wait=1s" in d.log_text(),
                         "the daemon's log line on the bounded wait")
        # A client whose socket timeout is shorter than the wait: the daemon
        # says so in its log.
        assert read_once(d.port, key, socket_timeout=0.3) == "timeout"
        harness.wait_for(lambda: "socket timeout shorter than --redis_wait"
                         in d.log_text(), "the log line on a client timeout")
        holder.kill()
        holder.wait()
    finally:
        kill_holders()
        d.close()


def test_untuned_keys_are_a_plain_cache():
    """keys outside the tuned patterns: every reader gets nil at once"""
    d = harness.Daemon(GPUTUNED)
    try:
        a, b = d.client(), d.client()
        assert a.get("triton:abc:kernel.cubin") is None
        assert b.get("triton:abc:kernel.cubin") is None
    finally:
        kill_holders()
        d.close()


if __name__ == "__main__":
    harness.require_tools()
    harness.run_tests([test_each_key_tuned_once, test_plain_redis_tunes_more,
                       test_holder_killed_hands_over_at_once,
                       test_waiters_get_the_holders_value,
                       test_lease_lapse_and_wait_bound,
                       test_untuned_keys_are_a_plain_cache])
