"""The package as Python users expect it: `import gputune` works without
libgputune, the first use says how to point at the library, the version is
the build's, and DenseRunner is a context manager."""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import gputune

PACKAGE_ROOT = pathlib.Path(__file__).resolve().parents[1]  # python/
MISSING = "/nonexistent/gputune-test/libgputune.so.0"


def _fresh_python(code: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    """Runs code in a new interpreter (this one has loaded the library
    already), importing gputune from this tree."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(PACKAGE_ROOT), **env),
    )


def test_import_succeeds_without_the_library():
    run = _fresh_python(
        """
        import gputune, gputune.client, gputune.dense
        print(gputune.__version__, gputune._capi.lib is None)
        """,
        GPUTUNE_LIBRARY=MISSING,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [gputune.__version__, "True"]


def test_gputune_torch_without_the_library_runs_torchs_linear():
    pytest.importorskip("torch")
    run = _fresh_python(
        """
        import torch
        import gputune.torch as gt
        print(tuple(gt.dense(torch.ones(2, 3), torch.ones(4, 3)).shape))
        print(gt.TunedDense().client())  # no client: dense() falls back
        """,
        GPUTUNE_LIBRARY=MISSING,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[:2] == ["(2, 4)", "None"]
    assert "cannot load libgputune" in run.stderr  # logged once, with why


def test_the_first_use_says_how_to_point_at_the_library(daemon):
    gputune.Key("pkg/x=1@v1")  # loads the library in this process
    real = gputune._capi.lib._name  # under ctest, the build's
    run = _fresh_python(
        """
        import os, sys, gputune
        endpoint, real = sys.argv[1:]
        for first_use in (lambda: gputune.Client(endpoint),
                          lambda: gputune.Key("pkg/x=1@v1"),
                          gputune.library_version):
            try:
                first_use()
            except gputune.LibraryNotFound as e:
                assert isinstance(e, ImportError)
                print("refused:", e)
            else:
                print("not refused")
        # Doing what the message says, in the same process, is enough.
        os.environ["GPUTUNE_LIBRARY"] = real
        print("then:", gputune.Client(endpoint).lookup("pkg/x=1@v1").state.name)
        """,
        daemon.endpoint,
        real,
        GPUTUNE_LIBRARY=MISSING,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 4, run.stdout
    for refused in lines[:3]:
        assert refused.startswith("refused: cannot load libgputune"), refused
        assert MISSING in refused  # what was tried
        assert "GPUTUNE_LIBRARY=/" in refused  # and how to point at one
    assert lines[3] == "then: MISS"


def test_the_package_version_is_the_builds():
    # libgputune's version comes from CMakeLists.txt's project(VERSION); the
    # package's from gputune/_version.py, which must say the same.
    assert gputune.__version__ == gputune.library_version()


def test_a_dense_runner_is_a_context_manager():
    assert issubclass(gputune.DenseRunner, contextlib.AbstractContextManager)


def test_a_with_block_closes_its_dense_runner():
    try:
        gputune.DenseRunner().close()
    except gputune.FailedPrecondition as e:
        pytest.skip(f"needs a usable CUDA device: {e.message}")
    with gputune.DenseRunner() as runner:
        assert isinstance(runner, gputune.DenseRunner)
        assert not runner.closed
    assert runner.closed
    with pytest.raises(ValueError, match="closed"):
        runner.run(None, 1, 64, 64, 0, 0, 0)
    runner.close()  # again: nothing happens

    with pytest.raises(RuntimeError, match="in the block"):
        with gputune.DenseRunner() as failing:
            raise RuntimeError("in the block")
    assert failing.closed
