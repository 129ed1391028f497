#!/usr/bin/env python3
"""Runs every checked command in the docs and compares what they print.

    scripts/docs-check.py --build build docs/client.md README.md
    scripts/docs-check.py --build build --update docs/client.md   # rewrite

A checked block is a fenced block right after the line `<!-- docs-check -->`.
Its lines starting with `$ ` are commands; every other line is output, and is
regenerated: each command runs (bash, in a scratch directory) against a fresh
gputuned (--backend=none) that holds the entries of tests/docs/entries.jsonl,
with the build's gputunectl and gputuned first on PATH and GPUTUNE_ENDPOINT
set to it. Blocks run in document order against the same daemon, so a block
sees what the blocks above it did. stdout and stderr are shown together;
"[exit N]" follows the output of a command that exits N != 0.

What differs from run to run is normalized before comparing, and only that:
the scratch directory is shown as /tmp/gt, the current time as
2026-12-01 12:00:00, uptimes as "up 1s" and lease times left as "9m59.9s".

Exits 1 and prints a diff when a document differs (--update writes the new
text instead), 2 on a usage or set-up error.
"""

import argparse
import datetime
import difflib
import os
import re
import subprocess
import sys
import tempfile
import time

MARKER = "<!-- docs-check -->"
SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def normalize(text, scratch):
    text = text.replace(scratch, "/tmp/gt")
    # Timestamps of this run (within a day of now): fixture times stay.
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)

    def stamp(m):
        t = datetime.datetime.strptime(m.group(0), "%Y-%m-%d %H:%M:%S")
        return ("2026-12-01 12:00:00"
                if abs((t - now).total_seconds()) < 86400 else m.group(0))

    text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", stamp, text)
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


def check(path, env, scratch):
    with open(path) as f:
        lines = f.read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        out.append(lines[i])
        if lines[i].strip() != MARKER:
            i += 1
            continue
        i += 1
        if i >= len(lines) or not lines[i].startswith("```"):
            raise SystemExit("%s:%d: %s must be followed by a ``` block"
                             % (path, i, MARKER))
        out.append(lines[i])
        i += 1
        block = []
        while i < len(lines) and not lines[i].startswith("```"):
            block.append(lines[i])
            i += 1
        for line in block:
            if line.startswith("$ "):
                out.append(line)
                printed = run(line[2:], env, scratch)
                if printed:  # a command that prints nothing adds no line
                    out.extend(printed.rstrip("\n").split("\n"))
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", required=True)
    parser.add_argument("--update", action="store_true")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    ctl = os.path.join(build, "client", "gputunectl")
    daemon = os.path.join(build, "daemon", "gputuned")
    for binary in (ctl, daemon):
        if not os.access(binary, os.X_OK):
            print("docs-check: %s is not built" % binary, file=sys.stderr)
            return 2

    scratch = tempfile.mkdtemp(prefix="gputune-docs-")
    socket = os.path.join(scratch, "gpu0.sock")
    env = dict(os.environ)
    env["PATH"] = "%s:%s:%s" % (os.path.dirname(ctl), os.path.dirname(daemon),
                                env.get("PATH", ""))
    env["GPUTUNE_ENDPOINT"] = "unix://" + socket
    env["LC_ALL"] = "C"
    env.pop("COLUMNS", None)
    log = open(os.path.join(scratch, "gputuned.log"), "w")
    proc = subprocess.Popen(
        [daemon, "--backend=none", "--listen=unix://" + socket,
         "--db=" + os.path.join(scratch, "gpu0.db")],
        stdout=log, stderr=subprocess.STDOUT)
    status = 0
    try:
        for _ in range(200):
            if subprocess.run([ctl, "status"], env=env,
                              stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode == 0:
                break
            time.sleep(0.05)
        else:
            print("docs-check: gputuned did not start (see %s)"
                  % log.name, file=sys.stderr)
            return 2
        fixture = os.path.join(SOURCE, "tests", "docs", "entries.jsonl")
        subprocess.run([ctl, "import", fixture], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for path in args.files:
            with open(path) as f:
                old = f.read()
            new = check(path, env, scratch)
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
        return status
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()
        subprocess.run(["rm", "-rf", scratch])


if __name__ == "__main__":
    sys.exit(main())
