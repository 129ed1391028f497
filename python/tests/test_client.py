"""gputune (Python) against the real gputuned: what a Python inference
server sees."""

from __future__ import annotations

import signal
import subprocess
import threading
import time

import pytest

import gputune
from gputune import Execution, Key, Measurement, State


def record_hit(client: gputune.Client, key, kernel: str = "py.kernel") -> None:
    with client.claim(key) as c:
        assert c.granted
        chosen = Execution(kernel, {"tile": 64, "threads": 2}, workspace_bytes=1024)
        c.record(
            chosen,
            [
                Measurement(chosen, median=41e-6, samples=10, chosen=True),
                Measurement(Execution("py.default"), median=82e-6, samples=10, is_default=True),
            ],
            default_time=82e-6,
            chosen_time=41e-6,
        )


def test_a_miss_claimed_and_recorded_is_a_hit_from_the_memo(daemon):
    client = gputune.Client(daemon.endpoint)
    key = Key.custom("py_attention", "b=8,h=32", candidate_set="v1")
    assert key.text == "py_attention/b=8,h=32@v1"
    r = client.lookup(key)
    assert r.state is State.MISS and not r.hit and r.execution is None

    record_hit(client, key)
    r = client.lookup(key)
    assert r.hit and r.from_memo
    assert r.execution.kernel == "py.kernel"
    assert dict(r.execution) == {"tile": 64, "threads": 2}
    assert r.execution["tile"] == 64
    assert r.execution.workspace_bytes == 1024
    assert r.chosen_time == pytest.approx(41e-6)
    assert r.default_time == pytest.approx(82e-6)
    assert r.speedup == pytest.approx(2.0)
    # Another process's client asks the daemon; a str key works too.
    other = gputune.Client(daemon.endpoint)
    r = other.lookup("py_attention/b=8,h=32@v1")
    assert r.hit and not r.from_memo


def test_lookup_states_pending_while_claimed(daemon):
    client = gputune.Client(daemon.endpoint)
    rival = gputune.Client(daemon.endpoint, holder="rival server")
    key = Key.dense("decode", "attn.qkv", m=1, k=4096, n=6144, candidate_set="cs1")
    assert str(key) == "dense_bf16/decode/attn.qkv/m=1/k=4096/n=6144@cs1"
    with rival.claim(key) as theirs:
        assert theirs.granted
        r = client.lookup(key)
        assert r.state is State.PENDING
        assert r.holder == "rival server"
        with client.claim(key) as mine:
            assert mine.outcome is gputune.ClaimOutcome.PENDING
            assert not mine.granted
            assert mine.holder == "rival server"
            assert mine.claim_id == theirs.claim_id
    assert client.lookup(key).state is State.MISS


def test_preload_memoises_hits(daemon):
    writer = gputune.Client(daemon.endpoint)
    keys = [Key(f"pre/x={i}@v1") for i in range(5)]
    record_hit(writer, keys[1])
    record_hit(writer, keys[3])
    client = gputune.Client(daemon.endpoint)
    assert client.preload(keys) == 2
    assert client.memo_size == 2
    assert client.lookup(keys[3]).from_memo
    client.forget(keys[3])
    assert client.memo_size == 1
    client.forget()
    assert client.memo_size == 0


def test_follow_changes_off_keeps_a_deleted_entry_memoised(daemon):
    from conftest import gputunectl

    key = Key("follow/x=1@v1")
    record_hit(gputune.Client(daemon.endpoint), key)
    following = gputune.Client(daemon.endpoint)
    not_following = gputune.Client(daemon.endpoint, follow_changes=False)
    for c in (following, not_following):
        # The change feed starts in the background; an entry memoised while
        # it catches up may be dropped once: memoise until it stays.
        give_up = time.monotonic() + 5
        while not (c.preload([key]) == 1 and c.memo_size == 1):
            assert time.monotonic() < give_up
            time.sleep(0.01)
    time.sleep(0.3)
    assert following.memo_size == 1 and not_following.memo_size == 1
    subprocess.run(
        [gputunectl(), "--endpoint=" + daemon.endpoint, "delete", str(key)],
        check=True,
        capture_output=True,
    )
    give_up = time.monotonic() + 2
    while following.memo_size != 0:
        assert time.monotonic() < give_up, "the delete did not reach the memo"
        time.sleep(0.01)
    time.sleep(0.3)
    assert not_following.memo_size == 1
    assert not_following.lookup(key).from_memo
    assert following.lookup(key).state == State.MISS


def test_try_lookup_never_blocks_and_fills_in_the_background(daemon):
    writer = gputune.Client(daemon.endpoint)
    key = Key("try/x=1@v1")
    record_hit(writer, key)
    client = gputune.Client(daemon.endpoint)
    assert client.try_lookup(key).state is State.UNSPECIFIED
    deadline = time.monotonic() + 60  # generous: a loaded machine
    while not client.try_lookup(key).hit:
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_an_exception_in_the_claim_block_abandons_with_its_text(daemon):
    client = gputune.Client(daemon.endpoint)
    key = Key("abandon/x=1@v1")
    with pytest.raises(RuntimeError, match="tuning blew up"):
        with client.claim(key) as c:
            assert c.granted
            assert client.lookup(key).state is State.PENDING
            raise RuntimeError("tuning blew up")
    assert client.lookup(key).state is State.MISS
    assert "RuntimeError: tuning blew up" in daemon.log()
    # Leaving the block without a record abandons too.
    with client.claim(key) as c:
        assert c.granted
    assert client.lookup(key).state is State.MISS
    assert "released without record" in daemon.log()


def test_a_claim_is_renewed_past_its_lease(daemon):
    # Renewed every third of the 2 s lease: a renewal may be 1.3 s late (a
    # loaded machine) before the claim is lost; the wait is past the first.
    client = gputune.Client(daemon.endpoint, lease_ttl=2.0)
    key = Key("renew/x=1@v1")
    with client.claim(key) as c:
        time.sleep(2.5)
        assert not c.lost
        c.record(Execution("slow.tune"))
        assert not c.granted
    assert client.lookup(key).execution.kernel == "slow.tune"


def test_record_after_abandon_is_failed_precondition(daemon):
    client = gputune.Client(daemon.endpoint)
    with client.claim("late/x=1@v1") as c:
        c.abandon("changed my mind")
        with pytest.raises(gputune.FailedPrecondition, match="holds no claim"):
            c.record(Execution("late.kernel"))
    assert "changed my mind" in daemon.log()


def test_watch_iterates_until_the_hit(daemon):
    client = gputune.Client(daemon.endpoint)
    key = Key("watched/x=1@v1")
    seen = []
    with client.watch(key, timeout=30) as w:
        it = iter(w)
        first = next(it)
        assert first.state is State.MISS
        writer = threading.Thread(
            target=record_hit, args=(gputune.Client(daemon.endpoint), key))
        writer.start()
        for status in it:
            seen.append(status.state)
        writer.join()
        assert seen[-1] is State.HIT
        assert status.execution.kernel == "py.kernel"


def test_watch_calls_back_until_the_hit(daemon):
    client = gputune.Client(daemon.endpoint)
    key = Key("watched_cb/x=1@v1")
    seen = []
    first = threading.Event()
    done = threading.Event()

    def on_status(status):
        seen.append((status.state, status.execution))
        first.set()
        if status.hit:
            done.set()

    with client.watch(key, callback=on_status, timeout=30) as w:
        # The stream opens in the background: the key changes only after
        # the watch has reported its current state.
        assert first.wait(5)
        record_hit(gputune.Client(daemon.endpoint), key)
        w.wait(10)
        assert done.wait(5)
    assert seen[0][0] is State.MISS
    assert seen[-1][0] is State.HIT and seen[-1][1].kernel == "py.kernel"


def test_a_watch_that_times_out_raises_deadline_exceeded(daemon):
    client = gputune.Client(daemon.endpoint)
    with client.watch("never/x=1@v1", timeout=0.3) as w:
        with pytest.raises(gputune.DeadlineExceeded):
            list(w)


def test_deadlines_hold_with_the_daemon_stopped(daemon):
    client = gputune.Client(daemon.endpoint, lookup_deadline=0.2, deadline=0.3)
    key = Key("stopped/x=1@v1")
    record_hit(client, key)
    assert client.lookup(key).from_memo
    daemon.stop()  # hung: accepts nothing, answers nothing
    try:
        start = time.monotonic()
        # The memo keeps answering a HIT; everything else fails in time.
        assert client.lookup(key).hit
        raised = []
        for _ in range(4):
            with pytest.raises((gputune.DeadlineExceeded, gputune.Unavailable)) as e:
                client.lookup(Key("stopped/x=2@v1"))
            raised.append(e.type)
        with pytest.raises((gputune.DeadlineExceeded, gputune.Unavailable)) as e:
            client.claim("stopped/x=3@v1")
        raised.append(e.type)
        # Two deadlines, then the breaker answers at once (Unavailable, no
        # RPC: a stopped daemon makes every RPC wait out its deadline). On a
        # loaded machine its 250 ms may pass before the last calls: then one
        # of them is the half-open probe, another deadline.
        assert raised[:2] == [gputune.DeadlineExceeded] * 2
        assert gputune.Unavailable in raised[2:]
        # Every call ended by its deadline (a generous bound for a loaded
        # machine: none waited for the stopped daemon).
        assert time.monotonic() - start < 30
    finally:
        daemon.signal(signal.SIGCONT)


def test_a_dead_daemon_is_unavailable_and_says_what_to_check(daemon):
    client = gputune.Client(daemon.endpoint)
    daemon.kill()
    with pytest.raises(gputune.Unavailable) as e:
        client.lookup("dead/x=1@v1")
    assert isinstance(e.value, ConnectionError)
    assert "cannot reach gputuned at " + daemon.endpoint in e.value.message
    assert str(e.value).startswith("UNAVAILABLE: ")


def test_errors_map_to_exceptions(daemon):
    client = gputune.Client(daemon.endpoint)
    with pytest.raises(gputune.InvalidArgument, match="6 '/'-separated parts") as e:
        Key("dense_bf16/decode/x/m=1/k=8@cs1")
    assert isinstance(e.value, ValueError) and e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(gputune.InvalidArgument):
        Key.dense("sideways", "r", 1, 8, 8, "cs1")
    with pytest.raises(gputune.NotFound):
        client.get_entry("nothing/x=1@v1")
    with pytest.raises(gputune.InvalidArgument):
        gputune.Client(daemon.endpoint, deadline=-1)
    with pytest.raises(gputune.FailedPrecondition, match="no benchmark backend|backend"):
        client.tune_dense("dense_bf16/decode/r/m=1/k=64/n=64@cs1")


def test_every_c_code_has_its_exception():
    from gputune import _errors

    names = ["CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
             "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED",
             "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
             "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE",
             "DATA_LOSS", "UNAUTHENTICATED"]
    for number, name in enumerate(names, start=1):
        e = _errors.error_for(number)
        assert type(e).code == name and type(e) is not _errors.Error
    assert type(_errors.error_for(99)) is gputune.Unknown
    assert type(_errors.error_for(7)) is gputune.PermissionDenied
    assert isinstance(_errors.error_for(5), LookupError)


def test_tune_dense_with_the_host_backend(host_daemon):
    client = gputune.Client(host_daemon.endpoint)
    r = client.tune_dense("dense_bf16/decode/py.tune/m=1/k=64/n=64@cs1", wait=True)
    assert r.hit and r.execution.kernel.startswith("host.")
    assert client.lookup("dense_bf16/decode/py.tune/m=1/k=64/n=64@cs1").from_memo


def test_operator_calls_return_the_api_json(daemon):
    client = gputune.Client(daemon.endpoint)
    key = Key("ops/x=1@v1")
    record_hit(client, key)
    status = client.status()
    assert status["entries"] == "1" and status["backend"] == "none"
    page = client.list_entries(op="ops")
    assert [e["execution"]["kernel"] for e in page["entries"]] == ["py.kernel"]
    assert client.list_entries(op="other").get("entries", []) == []
    entry = client.get_entry(key)
    assert entry["state"] == "KEY_STATE_HIT"
    assert len(entry["entry"]["measurements"]) == 2


def test_the_dense_runner_without_a_gpu_says_why():
    try:
        runner = gputune.DenseRunner()
    except gputune.FailedPrecondition as e:
        assert "CUDA" in e.message or "cuda" in e.message
    else:  # a machine with a usable GPU
        runner.close()
