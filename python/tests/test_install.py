"""The package installs offline with pip (nothing to compile, no index)
and works from where it was installed."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import gputune

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _source_copy(tmp_path):
    # From a copy: setuptools writes build/ and *.egg-info into the tree it
    # builds, and may reuse a stale build/ there.
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", "tests", "examples"))
    return source


def _pip(python, *args, cwd):
    """pip install offline as the README shows it; returns its output. The
    build goes through pyproject.toml's backend: not through setup.py, which
    pip 23 runs as a deprecated `setup.py install` where no wheel package is
    installed (a plain venv) and pip 23.1 and later refuse."""
    run = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-index",
         "--no-build-isolation", "--no-deps", "--disable-pip-version-check",
         *args],
        capture_output=True, text=True, cwd=cwd,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout + run.stderr
    assert "setup.py" not in out and "DEPRECATION" not in out, out
    return out


def _lookup(python, env, cwd, endpoint):
    run = subprocess.run(
        [str(python), "-c",
         "import gputune, sys; c = gputune.Client(sys.argv[1]); "
         "print(gputune.__file__, c.lookup('pip/x=1@v1').state.name)",
         endpoint],
        capture_output=True, text=True, env=env, cwd=cwd,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def _installed_version(python, env, cwd):
    """What pip recorded as the installed distribution's version."""
    run = subprocess.run(
        [str(python), "-c",
         "import importlib.metadata as m; print(m.version('gputune'))"],
        capture_output=True, text=True, env=env, cwd=cwd,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


def test_pip_installs_offline_and_the_package_imports(tmp_path, daemon):
    source = _source_copy(tmp_path)
    target = tmp_path / "site"
    _pip(sys.executable, "--target", str(target), str(source), cwd=tmp_path)
    assert (target / "gputune" / "py.typed").exists()
    env = dict(os.environ, PYTHONPATH=str(target))
    out = _lookup(sys.executable, env, tmp_path, daemon.endpoint)
    assert out.startswith(str(target)) and out.strip().endswith("MISS")
    # The distribution's version is the package's (pyproject.toml reads it).
    assert _installed_version(sys.executable, env, tmp_path) == gputune.__version__


def test_pip_installs_offline_into_a_venv(tmp_path, daemon):
    # --system-site-packages: the venv sees the system's setuptools and
    # wheel, which the offline build uses.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages",
                    str(venv)], check=True, cwd=tmp_path)
    python = venv / "bin" / "python"
    _pip(python, str(_source_copy(tmp_path)), cwd=tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = _lookup(python, env, tmp_path, daemon.endpoint)
    assert out.startswith(str(venv)) and out.strip().endswith("MISS")
