"""Integration: teperf built as a wheel and installed (not editable) finds its shipped configs.

No network and no second torch: the fresh venv sees the test venv's site-packages
through a .pth path line (which, unlike a site dir, does not run the editable
install's own .pth hook, so `import teperf` gets the wheel).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from conftest import teperf_wheel


def _site_packages(venv: Path) -> Path:
    (site,) = list((venv / "lib").glob("python*/site-packages"))
    return site


def test_wheel_install_finds_shipped_configs_from_any_directory(tmp_path):
    wheel = teperf_wheel()
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    (_site_packages(venv) / "dev_site.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            venv / "bin" / "python",
            "install",
            "--no-deps",
            "-q",
            wheel,
        ],
        check=True,
        capture_output=True,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    teperf = venv / "bin" / "teperf"

    where = subprocess.run(
        [venv / "bin" / "python", "-c", "import teperf; print(teperf.__file__)"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=env,
        check=True,
    )
    assert str(_site_packages(venv)) in where.stdout  # the wheel, not the checkout

    helptext = subprocess.run(
        [teperf, "compare", "--help"], capture_output=True, text=True, cwd=elsewhere, env=env
    )
    assert helptext.returncode == 0 and "pr-thread" in helptext.stdout and "nightly" in helptext.stdout

    res = subprocess.run(
        [
            teperf,
            "run",
            "--modules",
            "Linear",
            "--processes",
            "1",
            "--rounds",
            "1",
            "--trials",
            "2",
            "--iters",
            "5",
            "--warmup",
            "1",
            "--format",
            "json",
            "--results-dir",
            tmp_path / "results",
        ],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=env,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["meta"]["config"]["source"] == "teperf.configs:default.toml"
    assert [r["status"] for r in out["rows"]] == ["ok"]
