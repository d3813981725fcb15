"""Integration: each side runs the code the user named, from a real non-editable install (issue 20).

The trap: teperf installed as a wheel into a driver venv D that also holds the package under
test (``spinpkg``, spinning 20 us). Side venvs A and B hold their own ``spinpkg`` (0 us and
40 us). Workers must import A's and B's, never D's: the bundle records what each side imported
(path and content hash), and the figures follow. No second torch: every venv sees the test
venv's site-packages through a .pth path line, after its own site-packages.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import teperf_wheel

SPIN = """
import time

import torch


class Spin(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.lin = torch.nn.Linear(hidden, hidden)

    def forward(self, x):
        end = time.thread_time() + {us} * 1e-6
        while time.thread_time() < end:
            pass
        return self.lin(x)


def make(hidden=16, **_):
    return Spin(hidden)
"""

CONFIG = """
backend = "torch"
device = "cpu"
recipes = ["fp32"]
shapes = [[4, 16]]

[modules.Spin]
factory = "spinpkg:make"
kwargs = { hidden = 16 }

[schedule]
processes = 2
rounds = 1
trials = 4
iters = 20
warmup = 5
"""


def _site(venv: Path) -> Path:
    (site,) = list((venv / "lib").glob("python*/site-packages"))
    return site


def _venv(path: Path, spin_us: int | None, torch: bool = True) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", path], check=True)
    if torch:
        (_site(path) / "dev_site.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    if spin_us is not None:
        pkg = _site(path) / "spinpkg"
        pkg.mkdir()
        (pkg / "__init__.py").write_text(SPIN.replace("{us}", str(spin_us)))
    return path / "bin" / "python"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """D: teperf from its wheel + spinpkg 20 us; A: spinpkg 0 us; B: spinpkg 40 us; A2: A's copy."""
    tmp = tmp_path_factory.mktemp("truth")
    wheel = teperf_wheel()
    driver = _venv(tmp / "D", 20)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", driver, "install", "--no-deps", "-q", wheel],
        check=True,
        capture_output=True,
    )
    (tmp / "cfg.toml").write_text(CONFIG)
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    return {
        "tmp": tmp,
        "teperf": tmp / "D" / "bin" / "teperf",
        "A": _venv(tmp / "A", 0),
        "A2": _venv(tmp / "A2", 0),
        "B": _venv(tmp / "B", 40),
        "bare": _venv(tmp / "bare", 0, torch=False),
        "cwd": elsewhere,
    }


def _teperf(world, *args):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [world["teperf"], *map(str, args)],
        capture_output=True,
        text=True,
        cwd=world["cwd"],
        env=env,
        timeout=600,
    )


def _compare_pythons(world, base, head, results, *extra):
    """`teperf compare --base-python BASE --head-python HEAD` of the spin config, from the wheel."""
    return _teperf(
        world,
        "compare",
        "--base-python", base,
        "--head-python", head,
        "--config", world["tmp"] / "cfg.toml",
        "--results-dir", results,
        *extra,
    )  # fmt: skip


@pytest.mark.statistical  # the sign of a planted +40 us on a ~20 us step, over 2 pairs
def test_env_sides_import_their_own_packages_from_a_wheel_install(world):
    res = _compare_pythons(world, world["A"], world["B"], world["tmp"] / "results", "--format", "json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    imported = out["imported"]
    spin = {label: imported[label]["packages"]["spinpkg"] for label in ("base", "head")}
    assert spin["base"]["path"].startswith(str(world["tmp"] / "A"))
    assert spin["head"]["path"].startswith(str(world["tmp"] / "B"))
    assert spin["base"]["hash"] != spin["head"]["hash"]
    assert imported["base"]["prefix"] == str(world["tmp"] / "A")
    assert out["code_problems"] == []
    (row,) = out["rows"]
    # +40 us; D's own spinpkg (20 us on both sides) would read about 0. The sign, not the verdict nor a
    # tight size: two pairs give a t over one degree of freedom, and a loaded VM reads a spin long (issue 32).
    assert 10 < row["delta_us"] < 200, row


def test_two_interpreters_with_identical_code_exit_1_and_say_so(world):
    res = _compare_pythons(world, world["A"], world["A2"], world["tmp"] / "results", "--processes", "1")
    assert res.returncode == 1, res.stderr
    assert "both sides ran identical code" in res.stdout + res.stderr
    assert "spinpkg hash" in res.stderr


def test_a_deliberate_a_a_is_no_error(world):
    res = _compare_pythons(world, world["A"], world["A"], world["tmp"] / "results", "--processes", "1")
    assert res.returncode == 0, res.stderr
    assert "identical code" not in res.stdout + res.stderr


def test_a_side_without_torch_is_refused_before_any_pair(world, tmp_path):
    res = _compare_pythons(world, world["A"], world["bare"], tmp_path / "results")
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) <= 2 and "Traceback" not in res.stderr
    assert (
        "head's interpreter" in res.stderr
        and str(world["bare"]) in res.stderr
        and "lacks torch" in res.stderr
    )
    assert not (tmp_path / "results").exists()  # refused before a bundle was made


def test_a_side_without_the_package_under_test_is_refused(world, tmp_path):
    nopkg = _venv(tmp_path / "nopkg", None)
    res = _compare_pythons(world, world["A"], nopkg, tmp_path / "results")
    assert res.returncode == 2, res.stderr
    assert "lacks spinpkg" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "results").exists()


def test_path_sides_import_their_own_package_from_a_wheel_install(world, tmp_path):
    """--base-path/--head-path from the wheel: each side's spinpkg comes from its directory, never D's."""
    for name, us in (("old", 0), ("new", 40)):
        (tmp_path / name / "spinpkg").mkdir(parents=True)
        (tmp_path / name / "spinpkg" / "__init__.py").write_text(SPIN.replace("{us}", str(us)))
    res = _teperf(
        world,
        "compare",
        "--base-path", tmp_path / "old",
        "--head-path", tmp_path / "new",
        "--config", world["tmp"] / "cfg.toml",
        "--processes", "1",
        "--prestart", "0",  # cold: the hash must still cover what the factories imported
        "--format", "json",
        "--results-dir", tmp_path / "results",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    imported = json.loads(res.stdout)["imported"]
    assert imported["base"]["packages"]["spinpkg"]["path"] == str(tmp_path / "old" / "spinpkg")
    assert imported["head"]["packages"]["spinpkg"]["path"] == str(tmp_path / "new" / "spinpkg")
    assert imported["head"]["sys_path"][0] == str(tmp_path / "new")  # before the interpreter's own packages
    assert imported["base"]["packages"]["spinpkg"]["hash"] != imported["head"]["packages"]["spinpkg"]["hash"]
