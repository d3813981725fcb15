from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PLANTED = ROOT / "examples" / "planted"


def _claims_dir(prefix: str) -> str:
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


# the tests' default core is the last one, whatever teperf runs claim on this machine (teperf.cpus); xdist's
# workers inherit the session's directory
if "TEPERF_RUNTIME_DIR" not in os.environ:
    os.environ["TEPERF_RUNTIME_DIR"] = _claims_dir("teperf-test-claims-")
# pip builds a wheel in the tree (build/, teperf.egg-info): two builds at once, one on each xdist worker,
# clash and one fails or ships a broken wheel; so the tests' wheel is built once, under a lock, and shared
if "TEPERF_TEST_WHEELS" not in os.environ:
    os.environ["TEPERF_TEST_WHEELS"] = _claims_dir("teperf-test-wheels-")
# ... and, for a test that starts no real worker, whatever a real-worker test beside it claims (make test runs
# two tests at a time): one directory per pytest process, so only its own tests' runs are there
IN_PROCESS_CLAIMS = _claims_dir("teperf-test-own-claims-")


@pytest.fixture(autouse=True)
def _release_core_claims(request, monkeypatch):
    """A run claims its measuring core for its process's life (teperf.cpus); tests share one process, so each
    test's in-process runs give theirs back, and the next test's default core is the last one again. Two
    real-worker tests side by side share the session's claims, so that their runs measure on two cores."""
    if not request.node.get_closest_marker("real_worker"):
        monkeypatch.setenv("TEPERF_RUNTIME_DIR", IN_PROCESS_CLAIMS)
    yield
    from teperf import cpus

    for f in cpus._CLAIMS.values():
        f.close()
    cpus._CLAIMS.clear()


def teperf_wheel() -> Path:
    """This checkout's wheel, built by the first test of the session that asks (see TEPERF_TEST_WHEELS)."""
    import fcntl

    wheels = Path(os.environ["TEPERF_TEST_WHEELS"])
    with open(wheels / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not list(wheels.glob("teperf-*.whl")):
            pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w"]
            subprocess.run([*pip, wheels, ROOT], check=True, capture_output=True, cwd=wheels)
        (wheel,) = list(wheels.glob("teperf-*.whl"))
    return wheel


def run_cli(*args, cwd=None, timeout=600, env=None):
    """Run the real `teperf` CLI in a subprocess; returns CompletedProcess (text)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "teperf", *map(str, args)],
        cwd=cwd or ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


def run_in_process(argv, capsys):
    """The real CLI entry point in this process: (exit status, stdout, stderr)."""
    from teperf import cli

    code = 0
    try:
        cli.main(argv)
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def one_error(code, out, err, *parts):
    """Bad input's answer: exit 2 and one 'teperf: error:' line holding every part, no traceback."""
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and err.startswith("teperf: error: ") and "Traceback" not in err, err
    for part in parts:
        assert part in err, err


def rows_by_module(stdout: str) -> dict:
    data = json.loads(stdout)
    return {r["module"]: r for r in data["rows"]}


# Make test's first part runs modules two at a time (-n 2 --dist loadscope --no-loadscope-reorder), each
# worker taking the next module in this order as it frees: the longest first (seconds of each module's tests
# in a fresh clone's make test, 2026-12-07, less what later commits cut: 138, 111, 96, 89, 86, 70, 41, 37,
# 34, 31, 27, 27, 20), so that no long one starts last beside an idle core. A module not listed follows them
# (real-worker modules before the in-process ones).
LONGEST_FIRST = (
    "test_calibration",
    "test_integration_git",
    "test_integration_bisect",
    "test_integration_engine",
    "test_integration_onetime",
    "test_integration_backfill",
    "test_history_integration_nightly",
    "test_integration_forkserver",
    "test_history_s3",
    "test_integration_sides_truth",
    "test_countergate",
    "test_autoschedule",
    "test_integration_signals",
)


def pytest_collection_modifyitems(config, items):
    """Every test of a file named *integration* (test_integration_*.py, test_history_integration_nightly.py)
    starts real workers: marked real_worker here, so that a new test there is marked too. Real-worker tests
    elsewhere carry @pytest.mark.real_worker themselves. Modules in LONGEST_FIRST's order, then the rest."""
    for item in items:
        if "integration" in item.path.stem:
            item.add_marker(pytest.mark.real_worker)
    real = {item.path for item in items if item.get_closest_marker("real_worker")}
    rank = {stem: i for i, stem in enumerate(LONGEST_FIRST)}
    # a stable sort: each module's own order of tests kept
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank) + (item.path not in real)))


@pytest.fixture(autouse=True)
def _real_worker_is_marked(request):
    """A test that is not marked real_worker and leaves a worker's log (a bundle's workers/*.log) under its
    tmp_path started a real worker: it fails, so that `make test-fast` stays free of them."""
    if request.node.get_closest_marker("real_worker") or "tmp_path" not in request.fixturenames:
        yield
        return
    tmp = request.getfixturevalue("tmp_path")
    yield
    logs = sorted(p.relative_to(tmp) for p in tmp.rglob("*.log") if p.parent.name == "workers")
    if logs:
        pytest.fail(f"started real workers ({logs[0]}, ...): mark it @pytest.mark.real_worker", pytrace=False)


@pytest.fixture
def results_dir(tmp_path):
    return tmp_path / "results"
