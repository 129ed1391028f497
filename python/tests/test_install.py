"""The package installs offline with pip (nothing to compile, no index)
and works from where it was installed."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_pip_installs_offline_and_the_package_imports(tmp_path, daemon):
    # From a copy: a legacy setup.py build writes build/ and *.egg-info into
    # the tree it builds, and may reuse a stale build/ there.
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", "tests", "examples"))
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps",
         "--disable-pip-version-check", "--quiet", "--target", str(target),
         str(source)],
        check=True,
        cwd=tmp_path,
    )
    assert (target / "gputune" / "py.typed").exists()
    env = dict(os.environ, PYTHONPATH=str(target))
    run = subprocess.run(
        [sys.executable, "-c",
         "import gputune, sys; c = gputune.Client(sys.argv[1]); "
         "print(gputune.__file__, c.lookup('pip/x=1@v1').state.name)",
         daemon.endpoint],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(str(target)) and run.stdout.strip().endswith("MISS")
