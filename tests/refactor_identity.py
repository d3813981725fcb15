"""What the CLI and the config print, captured in-process, so that a refactor can prove it changed none of it.

``python -m tests.refactor_identity OUTDIR`` writes one file per capture; tests/test_refactor_identity.py
compares today's captures with the ones stored in tests/fixtures/refactor-identity.json (``--store``
rewrites it). Issue 25: the options table, option groups, api.nightly and the coordinator and explain
splits must not change a help text, a render, a resolved config or an error.
Nothing here starts a worker: the matrix is help texts, renders of the stored fixture bundles, the shipped
configs as resolved, the explain renders of a made-up profile, and the errors of bad input.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from unittest import mock

import click
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
BUNDLES = sorted(p for p in (FIXTURES / "bundles").iterdir() if p.is_dir())
CORES = [0, 1, 2, 3]  # the resolved config's default core is the last usable one: fixed so captures compare


def _invoke(argv: list[str]) -> str:
    from teperf.cli import main

    runner = CliRunner(env={"COLUMNS": "100", "TEPERF_CACHE": "/nonexistent/teperf-cache"})
    with runner.isolation() as streams:
        code = 0
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = streams[0].getvalue(), streams[1].getvalue()
    return f"exit {code}\n--- stdout\n{out.decode()}\n--- stderr\n{err.decode()}"


def _commands(group: click.Group, prefix: list[str]):
    for name in sorted(group.commands):
        cmd = group.commands[name]
        yield prefix + [name]
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, prefix + [name])


def helps() -> dict[str, str]:
    from teperf.cli import cli

    out = {"help/teperf": _invoke(["--help"])}
    for path in _commands(cli, []):
        # click keeps a command's --help option once made: a test that invoked the command alone (no -h)
        # must not decide what it looks like here
        cmd = cli
        for name in path:
            cmd = cmd.commands[name]
        cmd._help_option = None
        out["help/" + "-".join(path)] = _invoke(path + ["--help"])
    return out


def reports() -> dict[str, str]:
    from teperf.render import FORMATS

    out = {}
    for bundle in BUNDLES:
        for fmt in FORMATS:
            out[f"report/{bundle.name}.{fmt}"] = _invoke(["report", str(bundle), "--format", fmt])
        out[f"report/{bundle.name}.wall"] = _invoke(["report", str(bundle), "--metric", "wall"])
        out[f"report/{bundle.name}.by-lane"] = _invoke(["report", str(bundle), "--by-lane"])
    # where this checkout lives, not what the bundles recorded (one was made in /work/main: its config
    # path must stay as it is wherever the tests run)
    return {k: v.replace(str(FIXTURES), "FIXTURES") for k, v in out.items()}


def configs() -> dict[str, str]:
    from teperf import config

    cases = {name: (name, {}) for name in config.shipped_names()}
    cases["default+overrides"] = (
        "default",
        {
            "processes": 4,
            "trials": 4,
            "modules": ["Linear"],
            "shapes": [(4, 4, 64)],
            "timeout_s": 30.0,
            "min_effect_pct": 2.0,
            "precision_pct": 1.5,
            "prestart": "2",
            "compile_cache": "warm",
            "spawn": "forkserver",
            "server_pairs": 2,
            "max_contended_pct": 100.0,
            "metric": "wall",
        },
    )
    cases["none"] = (None, {})
    out = {}
    with mock.patch("teperf.cpus.available_cores", return_value=CORES):
        for key, (name, overrides) in cases.items():
            cfg = config.load_config(name, overrides)
            out[f"config/{key}"] = json.dumps(cfg.to_dict(), indent=1) + "\n"
            out[f"config/{key}.options"] = "\n".join(f"{k} {cfg.option(k)}" for k in cfg.from_cli) + "\n"
    return out


BAD_TOML = {
    "unknown-top": "colour = 1\n",
    "unknown-schedule": "[schedule]\nprocesses = 2\nbogus = 1\n",
    "unknown-stats": "[stats]\nalpha = 0.1\nwhat = 2\n",
    "retired": "[stats]\nnoise_limit_pct = 3\n",
    "bad-toml": "processes = = 2\n",
    "schedule-not-table": "schedule = 3\n",
    "bad-processes": "[schedule]\nprocesses = 0\n",
    "bad-warmup": "[schedule]\nwarmup = -1\n",
    "bad-timeout": "[schedule]\ntimeout_s = 0\n",
    "bad-alpha": "[stats]\nalpha = 0.7\n",
    "bad-metric": '[stats]\nmetric = "cycles"\n',
    "bad-min-effect": "[stats]\nmin_effect_pct = -1\n",
    "bad-contended": "[stats]\nmax_contended_pct = 101\n",
    "bad-min-pairs": "[schedule]\nmin_pairs = 1\n",
    "bad-spawn": '[schedule]\nspawn = "clone"\n',
    "bad-server-pairs": "[schedule]\nserver_pairs = 0\n",
    "bad-precision": "[schedule]\nprecision_pct = 0\n",
    "bad-budget": '[schedule]\nbudget_s = "5 parsecs"\n',
    "bad-backend": 'backend = "jax"\n',
    "bad-device": 'device = "tpu"\n',
    "te-on-cpu": 'backend = "te"\ndevice = "cpu"\n',
    "unknown-module": 'modules = ["Nope"]\n',
    "empty-modules": "modules = []\n",
    "modules-not-list": 'modules = "Linear"\n',
    "module-no-factory": "[modules.X]\nkwargs = {a = 1}\n",
    "module-bad-inputs": '[modules.X]\nfactory = "a:b"\ninputs = "nocolon"\n',
    "module-unknown-key": '[modules.X]\nfactory = "a:b"\ncolour = 1\n',
    "unknown-recipe": 'recipes = ["fp4"]\n',
    "empty-recipes": "recipes = []\n",
    "unknown-mode": 'modes = ["jit"]\n',
    "cuda-graph-on-cpu": 'modes = ["cuda-graph"]\n',
    "empty-shapes": "shapes = []\n",
    "bad-shape": "shapes = [[0, 2]]\n",
    "shapes-not-list": "shapes = 3\n",
    "bad-seed": "seed = -1\n",
    "bad-prestart": "prestart = -2\n",
    "bad-compile-cache": 'compile_cache = "lukewarm"\n',
    "bad-lanes": "lanes = 0\n",
    "bad-core": "core = 9999\n",
}

BAD_CLI = {
    "jobs": ["compare", "a..b", "--jobs", "x"],
    "processes": ["run", "--processes", "0"],
    "trials-odd": ["compare", "--base-path", ".", "--head-path", ".", "--trials", "3", "--rounds", "1"],
    "timeout": ["run", "--timeout", "-1"],
    "modules-empty": ["run", "--modules", ""],
    "module-unknown": ["run", "--modules", "Nope"],
    "shape": ["run", "--shape", "8,x"],
    "lanes": ["run", "--lanes", "zero"],
    "prestart": ["run", "--prestart", "-1"],
    "budget": ["run", "--budget", "soon"],
    "precision-run": ["run", "--precision", "1"],
    "precision-range": ["compare", "--base-path", ".", "--head-path", ".", "--precision", "0"],
    "min-effect": ["run", "--min-effect", "-2"],
    "max-contended": ["run", "--max-contended", "120"],
    "server-pairs": ["run", "--server-pairs", "0"],
    "spawn": ["run", "--spawn", "clone"],
    "core": ["run", "--core", "9999"],
    "config-missing": ["run", "--config", "no-such-config"],
    "config-dir": ["run", "--config", "tests"],
    "device-te": ["run", "--backend", "te", "--device", "cpu"],
    "nothing": ["compare"],
    "both-sides": ["compare", "a..b", "--base-path", "."],
    "plan-no-refs": ["compare", "--plan", "--base-python", "python3"],
    "explain-cell": ["compare", "--base-path", ".", "--head-path", ".", "--explain", "Nope/fp32"],
    "expected-no-counters": [
        "compare",
        "--base-path",
        ".",
        "--head-path",
        ".",
        "--expected",
        "x",
        "--no-counters",
    ],
    "expected-warm": [
        "compare",
        "--base-path",
        ".",
        "--head-path",
        ".",
        "--expected",
        "x",
        "--compile-cache",
        "warm",
    ],
    "sweep": ["run", "--sweep", "nope"],
    "fail-on": ["compare", "--base-path", ".", "--head-path", ".", "--fail-on", "worse"],
    "nightly-shard": ["nightly", "--shard", "3/2"],
    "nightly-shard-empty": ["nightly", "--shard", "999/999", "--modules", "Linear"],
    "nightly-night": ["nightly", "--night", " ", "--repo", "/nonexistent"],
    "nightly-repo": ["nightly", "--repo", "/nonexistent/repo"],
    "bisect-repo": ["bisect", "a..b", "--cell", "Linear/fp32", "--repo", "/nonexistent/repo"],
    "bisect-python": ["bisect", "a..b", "--cell", "Linear/fp32", "--python", "/nonexistent/python"],
    "compare-repo": ["compare", "a..b", "--repo", "/nonexistent/repo"],
    "compare-strategy": ["compare", "a..b", "--strategy", "magic"],
    "run-path": ["run", "--path", "/nonexistent/dir"],
}


def errors(tmp: Path) -> dict[str, str]:
    out = {}
    with mock.patch("teperf.cpus.available_cores", return_value=CORES):
        for name, text in BAD_TOML.items():
            path = tmp / f"{name}.toml"
            path.write_text(text)
            out[f"error-toml/{name}"] = _invoke(["run", "--config", str(path)]).replace(str(tmp), "TMP")
        for name, argv in BAD_CLI.items():
            out[f"error-cli/{name}"] = _invoke(argv)
    return out


def _profile(scale: float) -> list[dict]:
    """Rows shaped like teperf.worker.profile's, made up: six functions, one only in base or head."""
    rows = []
    for k in range(6):
        rows.append(
            {
                "file": f"/src/{'head' if scale > 1 else 'base'}/pkg/mod{k % 3}.py",
                "rel": f"pkg/mod{k % 3}.py",
                "line": 10 * k + 1,
                "name": f"fn{k}" if k else "<built-in method torch.mm>",
                "calls": 100.0 + k * (10 if scale > 1 and k % 2 else 0),
                "own_us": 10.0 * (k + 1) * (scale if k % 2 else 1.0),
                "cum_us": 20.0 * (k + 1) * scale,
            }
        )
    if scale > 1:
        rows.append(
            {
                "file": "/src/head/pkg/new.py",
                "rel": "pkg/new.py",
                "line": 5,
                "name": "added",
                "calls": 7.0,
                "own_us": 30.0,
                "cum_us": 30.0,
            }
        )
    else:
        rows.append(
            {
                "file": "/src/base/pkg/old.py",
                "rel": "pkg/old.py",
                "line": 9,
                "name": "gone",
                "calls": 3.0,
                "own_us": 20.0,
                "cum_us": 20.0,
            }
        )
    return rows


def explains() -> dict[str, str]:
    from teperf.explain import diff as ex_diff
    from teperf.explain import render as ex_render

    base, head = _profile(1.0), _profile(1.5)
    deltas = ex_diff.diff_profiles(base, head)
    runs_b = [_profile(1.0), _profile(1.05)]
    runs_h = [_profile(1.5), _profile(1.45)]
    deltas = ex_diff.apply_intervals(deltas, ex_diff.own_time_intervals(runs_b, runs_h))
    counters = (
        {"python_calls": 120.0, "aten_ops": 30.0},
        {"python_calls": 150.0, "aten_ops": 30.0, "new": 1.0},
    )
    out = {
        "explain/text": ex_render.render_text(deltas, n=5, title="Linear/fp32"),
        "explain/summary": ex_render.summary(deltas) + "\n",
        "explain/json": json.dumps(ex_render.to_json(deltas, n=4), indent=1, default=str) + "\n",
        "explain/counters": ex_render.counters_diff(*counters)
        + "\n"
        + ex_render.counters_diff(*counters, full=True),
        "explain/combined": json.dumps(ex_diff.combine_profiles([base, head]), indent=1) + "\n",
    }
    report = {
        "cell": "Linear/fp32/8x2x64/eager",
        "core": 3,
        "iters": 100,
        "repeats": 1,
        "sides": ["base", "head"],
        "counters": {"base": counters[0], "head": {**counters[1], "break_reasons": ["a", "b"]}},
        "counters_diff": ex_render.counters_diff(*counters, full=True),
        "errors": {"core": "the bundle's core 9 is not usable here; profiled on core 3"},
        "profiles": {"base": base, "head": head},
        "imported": {},
        "own_time_ci": ex_diff.own_time_intervals(runs_b, runs_h),
        "saved_to": "/somewhere/explain.json",
    }
    out["explain/report"] = ex_render.render_report(report, n=4)
    one = {**report, "sides": ["run"], "profiles": {"run": base}, "counters": {"run": counters[0]}}
    out["explain/report-one-side"] = ex_render.render_report(one, n=3)
    return out


def capture(tmp: Path) -> dict[str, str]:
    return {**helps(), **reports(), **configs(), **errors(tmp), **explains()}


def write(outdir: Path, captured: dict[str, str]) -> None:
    for key, text in captured.items():
        path = outdir / (key + ".txt")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


STORED = FIXTURES / "refactor-identity.json"


def _short_floats(text: str) -> str:
    """Floats at 9 significant digits: csv and json print them whole, and their last digits move with
    numpy's and scipy's versions (a fresh install on 2026-12-02 changed two hashes, no figure)."""
    import re

    return re.sub(r"-?\d+\.\d{7,}(?:e[+-]?\d+)?", lambda m: format(float(m.group()), ".9g"), text)


def digest(captured: dict[str, str]) -> dict[str, str]:
    """What is stored: the text, or for the renders of the fixture bundles (800 kB) their sha256."""
    import hashlib

    def hashed(text: str) -> str:
        return "sha256:" + hashlib.sha256(_short_floats(text).encode()).hexdigest()

    return {
        key: hashed(text) if key.startswith("report/") else text for key, text in sorted(captured.items())
    }


if __name__ == "__main__":
    import tempfile

    if len(sys.argv) != 2 or (sys.argv[1].startswith("-") and sys.argv[1] != "--store"):
        # an option is never an OUTDIR: `--help` once wrote the captures into ./--help/
        sys.exit("usage: python -m tests.refactor_identity OUTDIR | --store")
    with tempfile.TemporaryDirectory() as tmp:
        captured = capture(Path(tmp))
    if sys.argv[1:] == ["--store"]:  # only when an output is meant to change: review the diff of the JSON
        STORED.write_text(json.dumps(digest(captured), indent=1) + "\n")
    else:
        write(Path(sys.argv[1]), captured)
