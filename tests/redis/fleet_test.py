#!/usr/bin/python3
"""Two gputuned of one fleet (a PostgreSQL server started here). Single
flight across hosts: 4 tuner processes on each, 20 tuned keys: 20 tunes in
all, every process ending with the same values. The fleet's first value of
a key stays; a value too large for the fleet stays on its daemon.

usage: fleet_test.py GPUTUNED
"""
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time

import harness
import single_flight_test as sf

BINDIR = os.environ.get("GPUTUNE_PG_BINDIR", "/usr/lib/postgresql/15/bin")
PASSWORD = "gputune-test"


class Postgres:
    """A throw-away PostgreSQL on a unix socket in its own directory."""

    def __init__(self):
        for tool in ("initdb", "pg_ctl"):
            if not os.access(f"{BINDIR}/{tool}", os.X_OK):
                print(f"skipped: {BINDIR}/{tool} not found (postgresql-15)")
                sys.exit(harness.SKIP)
        self.dir = tempfile.mkdtemp(prefix="gputune-redis-pg-")
        self.data = f"{self.dir}/data"
        self.user = None
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            self.user = pwd.getpwnam(os.environ.get("GPUTUNE_PG_USER", "nobody"))
            os.chown(self.dir, self.user.pw_uid, self.user.pw_gid)
        with open(f"{self.dir}/pw", "w") as f:
            f.write(PASSWORD + "\n")
        if self.user:
            os.chown(f"{self.dir}/pw", self.user.pw_uid, self.user.pw_gid)
        self.run([f"{BINDIR}/initdb", "-D", self.data, "-U", "postgres",
                  "--auth-local=scram-sha-256", "--auth-host=reject",
                  f"--pwfile={self.dir}/pw", "--no-sync", "-E", "UTF8"])
        with open(f"{self.data}/postgresql.conf", "a") as f:
            f.write(f"listen_addresses = ''\nunix_socket_directories = '{self.dir}'\n"
                    "fsync = off\n")
        self.run([f"{BINDIR}/pg_ctl", "-D", self.data, "-l",
                  f"{self.dir}/log", "-w", "start"])
        psql = f"{BINDIR}/psql" if os.path.exists(f"{BINDIR}/psql") else "psql"
        self.run([psql, "-h", self.dir, "-U", "postgres", "-c",
                  "CREATE DATABASE fleet"], env={"PGPASSWORD": PASSWORD})
        self.conninfo = (f"host={self.dir} dbname=fleet user=postgres "
                         f"password={PASSWORD}")

    def run(self, args, env=None):
        def demote():
            if self.user:
                os.setgid(self.user.pw_gid)
                os.setuid(self.user.pw_uid)
        subprocess.run(args, check=True, preexec_fn=demote, cwd=self.dir,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env={**os.environ, **(env or {})})

    def close(self):
        self.run([f"{BINDIR}/pg_ctl", "-D", self.data, "-m", "immediate",
                  "-w", "stop"])
        shutil.rmtree(self.dir, ignore_errors=True)


def fleet_daemons(pg, n=2):
    # The host backend: a fleet needs the device's fingerprint, and both
    # daemons have this machine's.
    return [harness.Daemon(sf.GPUTUNED, [
        "--backend=host", f"--fleet={pg.conninfo}",
        "--fleet_poll_interval=100ms"]) for _ in range(n)]


def test_two_fleet_daemons_tune_each_key_once():
    """2 fleet daemons x 4 processes x 20 keys: 20 tunes in all"""
    pg = Postgres()
    daemons = []
    try:
        daemons = fleet_daemons(pg)
        keys = sf.tuned_keys(20)
        procs = []
        for d in daemons:
            procs += sf.spawn_workers(d.port, keys, processes=4)
        results = sf.collect(procs)
        tunes = sum(r["tunes"] for r in results)
        assert tunes == 20, f"{tunes} tunes (want 20)"
        first = results[0]["values"]
        for r in results[1:]:
            assert r["values"] == first, "processes ended with other values"
    finally:
        for d in daemons:
            d.close()
        pg.close()


def test_first_value_stays_and_large_values_stay_local():
    """a later SET keeps the fleet's first value; over 1 MiB stays local"""
    pg = Postgres()
    daemons = []
    try:
        daemons = fleet_daemons(pg)
        a, b = daemons[0].client(), daemons[1].client()
        key = "pt2:fx-graph-v1::fshared:c1"
        assert a.set(key, "first")
        harness.wait_for(lambda: b.get(key) == b"first", "b to see a's value")
        # Answered OK (Inductor and Triton expect it), and GET answers the
        # fleet's first value from then on, not the SET's for a moment.
        assert b.set(key, "second")
        assert b.get(key) == b"first"
        assert b.mset({key: "third"})
        assert b.get(key) == b"first"
        assert b.expire(key, 100) is False  # the expiry would come back
        time.sleep(1)  # the feed's lag, several times over
        assert b.get(key) == b"first" and a.get(key) == b"first"
        # Over a fleet row (1 MiB): kept where it was SET, not published;
        # the fleet goes on sharing what comes after it.
        big = os.urandom(2 << 20)
        assert a.set("triton:0a1b:big_kernel.cubin", big)
        assert a.set("after", "small")
        harness.wait_for(lambda: b.get("after") == b"small",
                         "b to see the value SET after the large one")
        assert a.get("triton:0a1b:big_kernel.cubin") == big
        assert b.get("triton:0a1b:big_kernel.cubin") is None
        assert "kept on this daemon only" in daemons[0].log_text()
    finally:
        for d in daemons:
            d.close()
        pg.close()


if __name__ == "__main__":
    harness.require_tools()
    sf.GPUTUNED = sys.argv[1]
    harness.run_tests([test_two_fleet_daemons_tune_each_key_once,
                       test_first_value_stays_and_large_values_stay_local])
