#!/usr/bin/python3
"""Single flight across hosts: two gputuned of one fleet (a PostgreSQL
server started here), 4 tuner processes on each, 20 tuned keys: 20 tunes in
all, every process ending with the same values.

usage: fleet_test.py GPUTUNED
"""
import os
import pwd
import shutil
import subprocess
import sys
import tempfile

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


def test_two_fleet_daemons_tune_each_key_once():
    """2 fleet daemons x 4 processes x 20 keys: 20 tunes in all"""
    pg = Postgres()
    daemons = []
    try:
        for _ in range(2):
            # The host backend: a fleet needs the device's fingerprint, and
            # both daemons have this machine's.
            daemons.append(harness.Daemon(sf.GPUTUNED, [
                "--backend=host", f"--fleet={pg.conninfo}",
                "--fleet_poll_interval=100ms"]))
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


if __name__ == "__main__":
    harness.require_tools()
    sf.GPUTUNED = sys.argv[1]
    harness.run_tests([test_two_fleet_daemons_tune_each_key_once])
