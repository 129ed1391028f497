#!/usr/bin/env python3
"""Runs every checked command in the docs and compares what they print.

    scripts/docs-check.py --build build README.md docs/*.md
    scripts/docs-check.py --build build --update docs/client.md   # rewrite
    scripts/docs-check.py --build build --list-not-run README.md docs/*.md

A checked block is a fenced block right after the line `<!-- docs-check -->`
(both may be indented alike, as in a list item). Its lines starting with `$ `
are commands; every other line is output, and is regenerated: each command
runs (bash, in a scratch directory) against a fresh gputuned (--backend=none)
that holds the entries of tests/docs/entries.jsonl (and is given a GPU
UUID with --device_uuid), with the build's
gputunectl and gputuned first on PATH and GPUTUNE_ENDPOINT set to it. Each
document has a daemon of its own; its blocks run in order against it, so a
block sees what the blocks above it did. stdout and stderr are shown together; "[exit N]" follows
the output of a command that exits N != 0. A command that only assigns a
single-quoted literal to a shell variable (`$ K='{"dense_bf16": ...}'`), or
the part of one after a prefix (`$ SOCK=${GPUTUNE_ENDPOINT#unix://}`), prints
nothing and is remembered: later commands of the same document run after it.

The reflection examples (commands that call grpcurl) run with grpcurl where
it is on PATH, else with grpcprobe, a stand-in with the same reflection client
and JSON, behind tests/support/grpcurl-via-grpcprobe (which takes grpcurl's
command line). Where neither is on PATH they are skipped, their output kept as
written, with one line saying so; every other command still runs and is
compared.

Every other `$ ` line of a fenced block in the files given (a command shown
with its output that this check does not run) must match an entry of NOT_RUN
below, which says why it cannot run here (systemd, root, a GPU, a whole
package build, timings); one that matches none fails the check, as does an
entry that matches nothing. Nothing is skipped without its reason.

What differs from run to run is normalized before comparing, and only that:
the scratch directory is shown as /tmp/gt; times from the start of the run to
a day after it as 2026-12-01 12:00:00 (RFC 3339 ones, as in JSON, as
2026-12-01T12:00:00Z; earlier times, such as the fixture's, stay); uptimes as
"up 1s", lease times left as "9m59.9s" and claim ids as those of one fixed
start. grpcprobe's JSON spacing (protojson prints two spaces after some
colons) is shown as grpcurl's: one.

Exits 1 and prints a diff when a document differs (--update writes the new
text instead), 2 on a usage or set-up error (gputunectl or gputuned missing).
"""

import argparse
import datetime
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

MARKER = "<!-- docs-check -->"
SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Commands the docs show with output that this check cannot run: (document,
# regular expression a command must match from its start, why not).
_ROOT = ("needs the package installed on this machine as root (it changes "
         "users, /etc, /var/lib and dpkg's database)")
_SERVICE = ("talks to the installed gputuned@N services (/run/gputuned, "
            "/var/lib/gputuned), which need systemd as PID 1")
NOT_RUN = [
    ("docs/client.md", r"cc -std=c11 example\.c|\./example",
     "needs the client installed into a prefix and a host-backend daemon; "
     "ctest \"a C11 program builds against the installed C API and runs\" "
     "does exactly this"),
    ("docs/api.md", r"grpcurl .*Lookup.*\| protoc",
     "needs tune.proto installed in /usr/include/gputune (libgputune-dev)"),
    ("docs/operations.md", r"cpack |ls -s /tmp/pkg|dpkg-deb -I ",
     "packs a whole build (minutes); tests/deploy/package_test.cc builds the "
     "packages and checks their contents and lintian"),
    ("docs/operations.md", r"dpkg (-i|-r|--purge) |id gputune|"
     r"ls -l?d? /run/gputuned|ls -l /etc/gputune|ls -ld /etc/gputune", _ROOT),
    ("docs/operations.md", r"systemd-analyze ",
     "reads the units installed in /usr/lib/systemd/system; "
     "tests/deploy/unit_file_test.cc runs the same on an install under a "
     "scratch prefix"),
    ("docs/operations.md", r"runuser |usermod ",
     _ROOT + "; tests/integration/hardening_test.cc and "
     "tests/client/gputunectl_test.cc check the same refusals"),
    ("docs/operations.md",
     r"gputunectl (list|get|backup|delete|status|export)|"
     r"gputunectl --device=[0-9]|grpcurl -plaintext -unix -d '\{\"path\"|ls -l /var/lib|"
     r"sqlite3 /var/lib|sh -c 'cd /var/lib|sh -c 'echo \"this is not",
     _SERVICE + "; their output comes from host-backend tunes, whose times "
     "differ on every run"),
    ("docs/operations.md", r"grep \^log_level /etc|kill -HUP|tail -n 2 /tmp/walk",
     _SERVICE + " (a running instance's pid and log)"),
    ("docs/operations.md", r"gputunectl --endpoint=unix:///tmp/h6pgdoc",
     "needs PostgreSQL and two daemons of a fleet; tests/fleet checks the "
     "same"),
    ("docs/client.md", r"python3 python/examples/torch_toy\.py",
     "needs Debian's /usr/bin/python3 with python3-torch (the python3 on "
     "PATH may be another); python/tests/test_torch.py runs the example "
     "against a daemon and checks these lines"),
    ("docs/performance.md", r"(nice -n [0-9]+ )?build(-nocuda)?/bench/",
     "benchmarks: times of the machine named with each result"),
    ("docs/performance.md", r"bash bench/redis/run\.sh",
     "a benchmark against redis-server: times of the machine named with it"),
]


RUN_START = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)


def of_this_run(t):
    """Whether a time shown is one of this run (it started at RUN_START,
    printed times are cut to the second; leases end up to a day later)."""
    return (RUN_START - datetime.timedelta(seconds=2) <= t
            <= datetime.datetime.now(datetime.timezone.utc).replace(
                tzinfo=None) + datetime.timedelta(days=1))


def normalize(text, scratch):
    text = text.replace(scratch, "/tmp/gt")

    def stamp(m):
        t = datetime.datetime.strptime(m.group(0), "%Y-%m-%d %H:%M:%S")
        return "2026-12-01 12:00:00" if of_this_run(t) else m.group(0)

    def rfc3339(m):
        t = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")
        return "2026-12-01T12:00:00Z" if of_this_run(t) else m.group(0)

    text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", stamp, text)
    text = re.sub(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z", rfc3339, text)
    text = re.sub(r"\bup [0-9hms.]+", "up 1s", text)
    text = re.sub(r"\(in [0-9hms.]+\)", "(in 9m59.9s)", text)
    text = re.sub(r"(?m)(\s)\d+m[0-9.]+s$", r"\g<1>9m59.9s", text)
    # Claim ids carry the start's epoch in their high bits (never reused
    # across restarts): the k-th distinct one of a text reads as the k-th of
    # one fixed start.
    ids = {}

    def claim_id(m):
        return str(1883416521662791681 + ids.setdefault(m.group(0), len(ids)))

    text = re.sub(r"\b\d{18,20}\b", claim_id, text)
    text = re.sub(r'(?m)^(\s*"[^"\n]*"):  ', r"\1: ", text)
    return text


def run(command, env, scratch):
    r = subprocess.run(["bash", "-c", command], cwd=scratch, env=env,
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=120)
    out = r.stdout.decode("utf-8", "replace")
    if out and not out.endswith("\n"):
        out += "\n"
    if r.returncode != 0:
        out += "[exit %d]\n" % r.returncode
    return normalize(out, scratch)


ASSIGNMENT = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*=('[^']*'|\$\{[A-Za-z_][A-Za-z0-9_]*#[^}'\"$`]*\})$")
REFLECTION = re.compile(r"(^|[\s|;&(])grpcurl\s")


def relative(path):
    return os.path.relpath(os.path.abspath(path), SOURCE)


class NotRun:
    """The `$ ` lines outside checked blocks, each matched to NOT_RUN."""

    def __init__(self):
        self.used = set()
        self.shown = []      # (where, command, reason)
        self.unlisted = []   # (where, command)

    def note(self, path, number, command):
        doc = relative(path)
        where = "%s:%d" % (doc, number)
        for i, (entry_doc, pattern, reason) in enumerate(NOT_RUN):
            if entry_doc == doc and re.match(pattern, command):
                self.used.add(i)
                self.shown.append((where, command, reason))
                return
        self.unlisted.append((where, command))

    def problems(self, docs):
        out = ["%s: `$ %s` shows output but is neither in a checked block "
               "nor listed in NOT_RUN (scripts/docs-check.py) with the "
               "reason it cannot run here" % (where, command)
               for where, command in self.unlisted]
        for i, (doc, pattern, _) in enumerate(NOT_RUN):
            if doc in docs and i not in self.used:
                out.append("NOT_RUN entry %r for %s matches no command: "
                           "remove it" % (pattern, doc))
        return out


def check(path, env, scratch, not_run, reflection):
    """Runs path's checked blocks; returns (new text, commands run, reflection
    commands skipped). reflection: whether a grpcurl (or its stand-in) is on
    env's PATH; without one, grpcurl commands keep the output written."""
    with open(path) as f:
        lines = f.read().split("\n")
    out = []
    assignments = []
    ran = 0
    skipped = 0
    i = 0
    in_fence = False
    while i < len(lines):
        line = lines[i]
        out.append(line)
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        elif in_fence and line.lstrip().startswith("$ "):
            not_run.note(path, i + 1, line.lstrip()[2:])
        if line.strip() != MARKER:
            i += 1
            continue
        indent = line[:len(line) - len(line.lstrip())]
        i += 1
        if i >= len(lines) or not lines[i].startswith(indent + "```"):
            raise SystemExit("%s:%d: %s must be followed by a ``` block "
                             "indented alike" % (path, i, MARKER))
        out.append(lines[i])
        in_fence = True  # its closing line, next in the loop, ends it
        i += 1
        block = []
        while i < len(lines) and not lines[i].lstrip().startswith("```"):
            block.append(lines[i])
            i += 1
        for j, text in enumerate(block):
            if not text.startswith(indent + "$ "):
                continue
            out.append(text)
            command = text[len(indent) + 2:]
            if ASSIGNMENT.match(command):
                assignments.append(command)
                continue
            if not reflection and REFLECTION.search(command):
                skipped += 1
                for written in block[j + 1:]:
                    if written.startswith(indent + "$ "):
                        break
                    out.append(written)
                continue
            ran += 1
            printed = run("\n".join(assignments + [command]), env, scratch)
            if printed:  # a command that prints nothing adds no line
                out.extend(indent + l if l else l
                           for l in printed.rstrip("\n").split("\n"))
    return "\n".join(out), ran, skipped


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", required=True)
    parser.add_argument("--update", action="store_true",
                        help="rewrite the checked blocks' outputs")
    parser.add_argument("--list-not-run", action="store_true",
                        help="list the commands shown but not run, and why")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    ctl = os.path.join(build, "client", "gputunectl")
    daemon = os.path.join(build, "daemon", "gputuned")
    for binary in (ctl, daemon):
        if not os.access(binary, os.X_OK):
            print("docs-check: %s is not built" % binary, file=sys.stderr)
            return 2
    # api.md and operations.md call the API through reflection (grpcurl).
    stand_in = None
    if shutil.which("grpcurl") is None and shutil.which("grpcprobe") is not None:
        stand_in = os.path.join(SOURCE, "tests", "support",
                                "grpcurl-via-grpcprobe")
    reflection = stand_in is not None or shutil.which("grpcurl") is not None

    not_run = NotRun()
    status = 0
    ran = 0
    skipped = 0
    for path in args.files:
        with open(path) as f:
            old = f.read()
        try:
            new, count, not_here = with_daemon(
                ctl, daemon, stand_in,
                lambda env, scratch: check(path, env, scratch, not_run,
                                           reflection))
        except SetupError as e:
            print("docs-check: %s" % e, file=sys.stderr)
            return 2
        ran += count
        skipped += not_here
        if new == old:
            continue
        if args.update:
            with open(path, "w") as f:
                f.write(new)
            print("docs-check: updated %s" % path)
            continue
        status = 1
        sys.stdout.writelines(difflib.unified_diff(
            old.splitlines(True), new.splitlines(True),
            path + " (as written)", path + " (as run)"))
    if status:
        print("docs-check: the output above drifted; rerun with --update "
              "and review the change", file=sys.stderr)
    problems = not_run.problems({relative(p) for p in args.files})
    for problem in problems:
        print("docs-check: " + problem, file=sys.stderr)
    if problems:
        status = 1
    if args.list_not_run:
        for where, command, reason in not_run.shown:
            print("%s: not run: $ %s\n    because it %s"
                  % (where, command, reason))
    if skipped:
        print("docs-check: skipped %d reflection examples (their output kept "
              "as written): neither grpcurl nor grpcprobe is on PATH"
              % skipped)
    elif stand_in:
        print("docs-check: grpcurl examples ran with grpcprobe (no grpcurl "
              "on PATH)")
    print("docs-check: %d commands run in %d files; %d shown but not run, "
          "each with its reason (--list-not-run)"
          % (ran, len(args.files), len(not_run.shown)))
    return status


class SetupError(Exception):
    pass


def with_daemon(ctl, daemon, stand_in, body):
    """Runs body(env, scratch) against a fresh gputuned holding the fixture;
    stand_in, when not None, is put on PATH as grpcurl."""
    scratch = tempfile.mkdtemp(prefix="gputune-docs-")
    socket = os.path.join(scratch, "gpu0.sock")
    env = dict(os.environ)
    path = [os.path.dirname(ctl), os.path.dirname(daemon)]
    if stand_in:
        os.mkdir(os.path.join(scratch, "bin"))
        os.symlink(stand_in, os.path.join(scratch, "bin", "grpcurl"))
        path.append(os.path.join(scratch, "bin"))
    env["PATH"] = ":".join(path + [env.get("PATH", "")])
    env["GPUTUNE_ENDPOINT"] = "unix://" + socket
    env["LC_ALL"] = "C"
    env.pop("COLUMNS", None)
    log = open(os.path.join(scratch, "gputuned.log"), "w")
    proc = subprocess.Popen(
        # An identity, as a GPU's daemon has (GetStatus.device_uuid, the
        # by-uuid link): --backend=none has none of its own.
        [daemon, "--backend=none", "--listen=unix://" + socket,
         "--db=" + os.path.join(scratch, "gpu0.db"),
         "--device_uuid=GPU-5d1a7c3e-0b2f-4e6a-9c8d-1f2e3a4b5c6d"],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(200):
            if subprocess.run([ctl, "status"], env=env,
                              stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode == 0:
                break
            time.sleep(0.05)
        else:
            log.flush()
            with open(log.name) as f:
                raise SetupError("gputuned did not start:\n" + f.read())
        fixture = os.path.join(SOURCE, "tests", "docs", "entries.jsonl")
        subprocess.run([ctl, "import", fixture], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return body(env, scratch)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()
        subprocess.run(["rm", "-rf", scratch])


if __name__ == "__main__":
    sys.exit(main())
