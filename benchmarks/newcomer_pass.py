"""A newcomer's pass over every subcommand (issue 33): 150+ odd, bad and edge inputs.

Not a pytest test: run it against an installed teperf, from any directory:

    python benchmarks/newcomer_pass.py [--teperf /tmp/venv/bin/teperf] [--json out.json] [--only SUBSTR]

For each input it records the exit status, whether stderr has a traceback, the number of stderr lines and the
first error line, and classifies it: OK (one `teperf: error:` line and a non-zero exit for bad input, success
for
good input), WRONG (traceback, exit 0 for bad input, a crash, a run that went on), MISLEADING (a message that
names
a wrong cause or a wrong fix; from the reviewed list below), CHECK (not one line: read it). Inputs that start
workers are few and tiny (the demo's planted blocks, a few steps).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))
from schedules import TWO_PAIRS  # noqa: E402

PLANTED = HERE / "examples" / "planted"
BUNDLES = HERE / "tests" / "fixtures" / "bundles"
HISTORY = HERE / "tests" / "fixtures" / "history-v1"
TINY = TWO_PAIRS

# The installed teperf's own interpreter (main sets it): a side with the same code as this one.
TEPERF_PYTHON = [sys.executable]

# Reviewed by hand: messages that name a wrong cause or a wrong fix (name -> why).
MISLEADING: dict[str, str] = {}


def _git(repo, *args):
    env = dict(os.environ, GIT_AUTHOR_NAME="n", GIT_AUTHOR_EMAIL="n@x", GIT_COMMITTER_NAME="n")
    env["GIT_COMMITTER_EMAIL"] = "n@x"
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


def make_world(w: Path) -> dict:
    """Temporary files every case can point at."""
    repo = w / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    shutil.copytree(PLANTED / "base" / "demo_blocks", repo / "demo_blocks")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    _git(repo, "tag", "v1")
    shutil.rmtree(repo / "demo_blocks")
    shutil.copytree(PLANTED / "head" / "demo_blocks", repo / "demo_blocks")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "head")
    _git(repo, "tag", "v2")
    (w / "dir").mkdir()
    (w / "empty.toml").write_text("")
    (w / "malformed.toml").write_text("backend = \n[modules\n")
    (w / "unknown_key.toml").write_text('backend = "torch"\nbogus_key = 1\n')
    (w / "nocolon.toml").write_text('backend = "torch"\n[modules.X]\nfactory = "nocolon"\n')
    (w / "nomodules.toml").write_text('backend = "torch"\nmodules = []\n')
    (w / "badshape.toml").write_text('backend = "torch"\nshapes = [[8, -2, 64]]\n')
    (w / "strshape.toml").write_text('backend = "torch"\nshapes = "8,2,64"\n')
    (w / "badsched.toml").write_text('backend = "torch"\n[schedule]\nprocesses = -3\n')
    (w / "strsched.toml").write_text('backend = "torch"\n[schedule]\niters = "many"\n')
    (w / "unicode ünï.toml").write_text(
        'backend = "torch"\nrecipes = ["fp32"]\n[modules.Lïnear]\nfactory = "x:y"\n'
    )
    (w / "latin1.toml").write_bytes(b'backend = "torch" # \xe9\xe9\n')
    (w / "unreadable.toml").write_text('backend = "torch"\n')
    os.chmod(w / "unreadable.toml", 0)
    (w / "bad_expected.toml").write_text("[[[ nope")
    (w / "empty_expected.toml").write_text("")
    (w / "layout_bad.toml").write_text("core = 3\n[[\n")
    # bundles
    for b in BUNDLES.iterdir():
        if b.is_dir():
            shutil.copytree(b, w / "bundles" / b.name)
    dmg = w / "bundles" / "damaged-meta"
    shutil.copytree(BUNDLES / "v1-compare-counters", dmg)
    (dmg / "meta.json").write_text("{ not json")
    nometa = w / "bundles" / "no-meta"
    shutil.copytree(BUNDLES / "v1-compare-counters", nometa)
    (nometa / "meta.json").unlink()
    recdir = w / "bundles" / "records-dir"
    shutil.copytree(BUNDLES / "v1-compare-counters", recdir)
    (recdir / "records.jsonl").unlink()
    (recdir / "records.jsonl").mkdir()
    metalist = w / "bundles" / "meta-list"
    shutil.copytree(BUNDLES / "v1-compare-counters", metalist)
    (metalist / "meta.json").write_text("[1, 2]")
    binrec = w / "bundles" / "binary-records"
    shutil.copytree(BUNDLES / "v1-compare-counters", binrec)
    (binrec / "records.jsonl").write_bytes(os.urandom(2000))
    (w / "bundles" / "empty").mkdir()
    shutil.copytree(HISTORY, w / "hist")
    (w / "hist_empty").mkdir()
    (w / "file_not_dir").write_text("x")
    badhist = w / "hist_bad"
    shutil.copytree(HISTORY, badhist)
    first = sorted(badhist.glob("*.parquet"))[0]
    first.write_bytes(first.read_bytes()[:100])
    (w / "cache").mkdir()
    _damaged_bundles(w)
    _more_damaged_bundles(w)
    return {"repo": repo}


def _damaged_bundles(w: Path) -> None:
    """Issue 46: every kind of damaged bundle, each a copy of a complete one changed one way."""
    src = BUNDLES / "v2-compare-compile-cpu"

    def copy(name):
        dst = w / "bundles" / name
        shutil.copytree(src, dst)
        return dst

    lines = (src / "records.jsonl").read_text().splitlines(keepends=True)
    (copy("cut-short") / "records.jsonl").write_text("".join(lines[:60]))
    (copy("torn-last-line") / "records.jsonl").write_text("".join(lines) + lines[-1][:40])
    (copy("records-empty") / "records.jsonl").write_text("")
    (copy("meta-empty") / "meta.json").write_text("")
    (copy("records-nul") / "records.jsonl").write_text("".join(lines[:80]) + "\0\0\0\n" + "".join(lines[80:]))
    (copy("records-unknown-kind") / "records.jsonl").write_text(
        '{"kind": "bogus", "x": 1}\n' + "".join(lines)
    )
    (copy("records-no-trials") / "records.jsonl").write_text(
        "".join(ln for ln in lines if '"kind":"trial"' not in ln)
    )
    meta = json.loads((src / "meta.json").read_text())
    for name, change in [
        ("meta-schema-99", lambda m: m.update(schema=99)),
        ("meta-config-list", lambda m: m.update(config=[1])),
        ("meta-cases-garbage", lambda m: m.update(cases=[1, "x", None])),
        ("meta-no-sides", lambda m: m.pop("sides")),
        ("meta-status-running", lambda m: m.update(status="running")),
        ("meta-metric-bogus", lambda m: m["config"]["stats"].update(metric="bogus")),
        ("meta-processes-string", lambda m: m["config"]["schedule"].update(processes="many")),
    ]:
        m = json.loads(json.dumps(meta))
        change(m)
        (copy(name) / "meta.json").write_text(json.dumps(m))
    os.symlink(w / "bundles" / "v1-compare-counters", w / "bundles" / "symlinked")


def _more_damaged_bundles(w: Path) -> None:
    """The fifth pass: damage of other kinds, each on a copy of a complete bundle."""
    src = BUNDLES / "v2-compare-compile-cpu"
    D = w / "bundles"

    def copy(name):
        shutil.copytree(src, D / name)
        return D / name

    text = (src / "records.jsonl").read_text()
    lines = text.splitlines()
    meta = json.loads((src / "meta.json").read_text())
    with tarfile.open(D / "archived.tar.xz", "w:xz") as tar:  # as results/evidence keeps bundles
        tar.add(src, arcname="archived")
    (copy("meta-bom") / "meta.json").write_bytes(b"\xef\xbb\xbf" + (src / "meta.json").read_bytes())
    (copy("crlf") / "records.jsonl").write_text("\r\n".join(lines) + "\r\n")
    (copy("records-twice") / "records.jsonl").write_text(text + text)
    for name, value in [("trial-negative", -1000), ("trial-nan", float("nan"))]:
        i = next(i for i, ln in enumerate(lines) if '"kind":"trial"' in ln)
        trial = dict(json.loads(lines[i]), process_cpu_ns=value)
        (copy(name) / "records.jsonl").write_text("\n".join([*lines[:i], json.dumps(trial), *lines[i + 1 :]]))
    for name in ("meta.json", "records.jsonl"):
        dst = copy(f"dangling-{name}")
        (dst / name).unlink()
        os.symlink(w / "nowhere", dst / name)
    gz = copy("records-gzipped")
    subprocess.run(["gzip", str(gz / "records.jsonl")], check=True)
    metadir = copy("meta-a-directory")
    (metadir / "meta.json").unlink()
    (metadir / "meta.json").mkdir()
    for name, change in [
        ("meta-newer-release", dict(schema=3, teperf_version="9.0.0")),
        ("meta-status-failed", dict(status="failed", error="worker died")),
        ("meta-cases-empty", dict(cases=[])),
        ("meta-sides-list", dict(sides=["base", "head"])),
        ("meta-no-config", dict(config=None)),
    ]:
        (copy(name) / "meta.json").write_text(json.dumps({**meta, **change}))
    shutil.copytree(src, D / "spaced ünï bundle")
    for name in ("20261205-a", "20261205-b"):  # results/ as a run leaves it: bundles in a directory
        shutil.copytree(src, w / "results" / name)


def cases(w: Path, repo: Path) -> list[dict]:
    out: list[dict] = []

    def case(expect, timeout):
        def add(name, *argv, cwd=None, env=None, timeout=timeout, **more):
            out.append(
                dict(name=name, argv=list(argv), expect=expect, cwd=cwd, env=env, timeout=timeout, **more)
            )

        return add

    bad, fail, good = case("bad", 20), case("fail", 60), case("good", 60)

    B = str(PLANTED / "base")
    H = str(PLANTED / "head")
    demo = ["--config", "demo"]
    bund = str(w / "bundles" / "v1-compare-counters")
    fixed = ["--base-path", B, "--head-path", H, *TINY]
    night = ["nightly", "--repo", str(repo), *demo, "--dry-run"]

    # --- top level and help
    good(
        "bare teperf",
    )
    good("--help", "--help")
    good("--version", "--version")
    bad("unknown command", "frobnicate")
    bad("typo command", "compar")
    bad("unknown top option", "--verbose")
    good("counters bare", "counters")
    good("cache bare", "cache")
    bad("counters unknown sub", "counters", "bogus")
    bad("cache unknown sub", "cache", "bogus")
    for c in [
        "compare",
        "run",
        "report",
        "explain",
        "bisect",
        "nightly",
        "history",
        "dashboard",
        "import",
        "doctor",
    ]:
        good(f"{c} -h", c, "-h")
    good("counters check -h", "counters", "check", "-h")
    good("cache clear -h", "cache", "clear", "-h")

    # --- run: numbers
    for flag in ["--processes", "--rounds", "--trials", "--iters", "--warmup"]:
        for v in ["-1", "0", "abc", "99999999999999999999"]:
            if flag == "--warmup" and v == "0":
                continue  # no warm-up is a valid choice
            bad(f"run {flag} {v}", "run", *demo, "--path", B, flag, v)
    for flag in ["--timeout", "--min-effect", "--precision", "--max-contended", "--min-effect-once"]:
        for v in ["-1", "nan", "inf", "x"]:
            bad(f"run {flag} {v}", "run", *demo, "--path", B, flag, v)
    bad("run --timeout 0", "run", *demo, "--path", B, "--timeout", "0")
    bad("run --max-contended 101", "run", *demo, "--path", B, "--max-contended", "101")
    bad("run --precision 0", "run", *demo, "--path", B, "--precision", "0")
    bad("run --core -1", "run", *demo, "--path", B, "--core", "-1")
    bad("run --core 999", "run", *demo, "--path", B, "--core", "999")
    bad("run --seed x", "run", *demo, "--path", B, "--seed", "x")
    for v in ["0", "-5m", "abc", "5x", "", "nan", "inf", "1e999s"]:
        bad(f"run --budget {v!r}", "run", *demo, "--path", B, "--budget", v)
    for v in ["0", "-1", "x", "99"]:
        bad(f"run --lanes {v}", "run", *demo, "--path", B, "--lanes", v)
    for v in ["-1", "x"]:
        bad(f"run --prestart {v}", "run", *demo, "--path", B, "--prestart", v)
    bad(
        "run --server-pairs 0 forkserver",
        "run",
        *demo,
        "--path",
        B,
        "--spawn",
        "forkserver",
        "--server-pairs",
        "0",
    )
    bad("run --server-pairs w/o forkserver", "run", *demo, "--path", B, "--server-pairs", "3")
    bad("run --metric bogus", "run", "--metric", "bogus")
    bad("run --format bogus", "run", "--format", "bogus")
    bad("run --backend bogus", "run", "--backend", "bogus")
    bad("run --backend te --device cpu", "run", "--backend", "te", "--device", "cpu")
    bad("run --device cuda (no GPU)", "run", "--device", "cuda", "--backend", "torch")

    # --- run: modules, recipes, shapes, modes
    bad("run --modules unknown", "run", "--modules", "Nope")
    bad("run --modules empty", "run", "--modules", "")
    bad("run --modules ,", "run", "--modules", ",")
    bad("run --modules unicode", "run", "--modules", "Lïnéar☃")
    bad("run --recipes unknown", "run", "--recipes", "fp9")
    bad("run --recipes empty", "run", "--recipes", "")
    bad("run --modes unknown", "run", "--modes", "turbo")
    bad("run --modes cuda-graph cpu", "run", "--modes", "cuda-graph")
    for v in [
        "",
        "8,2,",
        "8,-2,256",
        "0,2,256",
        "a,b",
        "8;2;256",
        "nan,2,2",
        "99999999,99999,99999",
        "1e3,2,2",
    ]:
        bad(f"run --shape {v!r}", "run", "--shape", v)
    bad(
        "run demo --modules LayerNormMLP (not in demo)",
        "run",
        *demo,
        "--path",
        B,
        "--modules",
        "LayerNormMLP",
    )

    # --- run: configs and paths
    bad("run --config missing file", "run", "--config", str(w / "nope.toml"))
    bad("run --config missing name", "run", "--config", "nope")
    bad("run --config directory", "run", "--config", str(w / "dir"))
    good(
        "run --config empty file (defaults)",
        "run",
        "--config",
        str(w / "empty.toml"),
        *TINY,
        "--modules",
        "Linear",
        "--results-dir",
        str(w / "res"),
        timeout=60,
    )
    bad("run --config malformed", "run", "--config", str(w / "malformed.toml"))
    bad("run --config unknown key", "run", "--config", str(w / "unknown_key.toml"))
    bad("run --config factory nocolon", "run", "--config", str(w / "nocolon.toml"))
    bad("run --config modules = []", "run", "--config", str(w / "nomodules.toml"))
    bad("run --config negative shape", "run", "--config", str(w / "badshape.toml"))
    bad("run --config shapes string", "run", "--config", str(w / "strshape.toml"))
    bad("run --config processes -3", "run", "--config", str(w / "badsched.toml"))
    bad("run --config iters string", "run", "--config", str(w / "strsched.toml"))
    bad("run --config latin1", "run", "--config", str(w / "latin1.toml"))
    bad("run --config unicode name/module", "run", "--config", str(w / "unicode ünï.toml"), "--path", B)
    bad("run --config '' ", "run", "--config", "")
    bad("run --path missing", "run", *demo, "--path", str(w / "nope"))
    bad("run --path is a file", "run", *demo, "--path", str(w / "file_not_dir"))
    bad("run --path ''", "run", *demo, "--path", "")
    bad("run --python missing", "run", "--python", str(w / "nope" / "python"))
    bad("run --python is a dir", "run", "--python", str(w / "dir"))
    bad("run --python not executable", "run", "--python", str(w / "file_not_dir"))
    bad("run --python not a python", "run", "--python", "/bin/true")
    bad("run --python PATH name missing", "run", "--python", "python9.9")
    bad("run demo without path", "run", *demo)
    bad(
        "run --results-dir is a file",
        "run",
        *demo,
        "--path",
        B,
        "--results-dir",
        str(w / "file_not_dir"),
        *TINY,
    )
    for what, value in [("malformed", "nokv"), ("empty values", "hidden="), ("builtin kwargs", "hidden=1,2")]:
        bad(f"run --sweep {what}", "run", "--sweep", value)
    fail(
        "run a cell that fails: --sweep an unknown kwarg (no 'tree changed')",
        "run",
        *demo,
        "--path",
        B,
        "--sweep",
        "bogus=1,2",
        *TINY,
        "--modules",
        "Linear",
        "--results-dir",
        str(w / "res"),
        avoid="tree changed",
    )
    bad("run --sweep demo non-number", "run", *demo, "--path", B, "--sweep", "hidden=a,b")
    bad("run --label ''", "run", *demo, "--path", B, "--label", "", *TINY)
    bad("run relative --path from elsewhere", "run", *demo, "--path", "examples/planted/base")
    bad("run extra argument", "run", "extra")
    bad("run --compile-cache bogus", "run", "--compile-cache", "bogus")

    # --- compare
    bad("compare nothing", "compare")
    refs = ["compare", "v1..v2", "--repo", str(repo), *demo]
    # git's own range forms: A..A is a deliberate A/A, '' is HEAD; --plan measures nothing
    good("compare a..a --plan", "compare", "v1..v1", "--repo", str(repo), *demo, "--plan")
    good("compare ..b --plan", "compare", "..v2", "--repo", str(repo), *demo, "--plan")
    good("compare a.. --plan", "compare", "v1..", "--repo", str(repo), *demo, "--plan")
    bad("compare .. --plan", "compare", "..", "--repo", str(repo), *demo, "--plan")
    good("compare a...b --plan", "compare", "v1...v2", "--repo", str(repo), *demo, "--plan")
    bad("compare ...", "compare", "...", "--repo", str(repo), *demo, "--plan")
    bad("compare a..b..c", "compare", "v1..v2..v1", "--repo", str(repo), *demo, "--plan")
    bad("compare ref with space", "compare", "v1..v 2", "--repo", str(repo), *demo, "--plan")
    bad("compare ref option-like", "compare", "--..v2", "--repo", str(repo), *demo, "--plan")
    bad("compare unknown ref", "compare", "v1..nope", "--repo", str(repo), *demo, "--plan")
    bad("compare single root commit", "compare", "v1", "--repo", str(repo), *demo, "--plan")
    bad("compare --repo not git", "compare", "v1..v2", "--repo", str(w / "dir"), *demo, "--plan")
    bad("compare --repo missing", "compare", "v1..v2", "--repo", str(w / "nope"), *demo, "--plan")
    bad("compare --repo file", "compare", "v1..v2", "--repo", str(w / "file_not_dir"), *demo, "--plan")
    bad("compare range outside a repo (cwd)", "compare", "v1..v2", *demo, "--plan")
    bad("compare refs and --base-path", "compare", "v1..v2", "--repo", str(repo), *demo, *fixed, "--plan")
    bad("compare only --base-path", "compare", *demo, "--base-path", B)
    fail(
        "compare only --head-python (same code: said, exit 1)",
        "compare",
        "--head-python",
        TEPERF_PYTHON[0],
        *TINY,
        "--modules",
        "Linear",
        "--results-dir",
        str(w / "res"),
        timeout=60,
    )
    bad("compare --base-path missing", "compare", *demo, "--base-path", str(w / "nope"), "--head-path", H)
    bad("compare odd rounds*trials", "compare", *demo, *fixed, "--rounds", "1", "--trials", "3")
    bad("compare --strategy with paths", "compare", *demo, *fixed, "--strategy", "overlay")
    bad("compare --fail-on ''", "compare", *demo, *fixed, "--fail-on", "")
    bad("compare --fail-on bogus", "compare", *demo, *fixed, "--fail-on", "bogus")
    bad("compare --explain bad cell", "compare", *demo, *fixed, "--explain", "Nope/fp32", *TINY)
    bad("compare --explain malformed", "compare", *demo, *fixed, "--explain", "nocell")
    bad("compare --expected missing", "compare", *demo, *fixed, "--expected", str(w / "nope.toml"))
    bad(
        "compare --layout malformed",
        *refs,
        "--layout",
        str(w / "layout_bad.toml"),
    )
    bad("compare --jobs 0", "compare", "v1..v2", "--repo", str(repo), *demo, "--jobs", "0")
    bad("compare --jobs -1", "compare", "v1..v2", "--repo", str(repo), *demo, "--jobs", "-1")
    bad(
        "compare --package missing in repo",
        *refs,
        "--package",
        "nopkg",
        "--plan",
    )
    bad(
        "compare --package-dir missing",
        *refs,
        "--package-dir",
        "nope/dir",
        "--plan",
    )
    good(
        "compare --cache-dir file --plan (plan only)",
        *refs,
        "--cache-dir",
        str(w / "file_not_dir"),
        "--plan",
    )
    bad(
        "compare --strategy env with refs",
        "compare",
        "v2..v1",
        "--repo",
        str(repo),
        *demo,
        "--strategy",
        "env",
        "--plan",
    )
    good("compare --plan (git)", "compare", "v1..v2", "--repo", str(repo), *demo, "--plan")
    good("compare reversed --plan", "compare", "v2..v1", "--repo", str(repo), *demo, "--plan")
    good(
        "compare --plan relative repo from cwd", "compare", "v1..v2", "--repo", "repo", *demo, "--plan", cwd=w
    )
    good("compare --plan HEAD~1..HEAD", "compare", "HEAD~1..HEAD", "--repo", str(repo), *demo, "--plan")
    bad(
        "compare HEAD~5..HEAD (too far back)", "compare", "HEAD~5..HEAD", "--repo", str(repo), *demo, "--plan"
    )

    bad(
        "compare --cache-dir file (sides made)",
        *refs,
        "--cache-dir",
        str(w / "file_not_dir"),
        *TINY,
        "--modules",
        "Linear",
        "--results-dir",
        str(w / "res"),
    )
    bad(
        "compare --package-dir absolute (outside the repo)",
        *refs,
        "--package-dir",
        str(w / "dir"),
        "--plan",
    )
    bad("run --config '  '", "run", "--config", "  ")
    bad("import --sha ''", "import", bund, "--history", str(w / "h3"), "--sha", "")
    bad("import --sha v1.0", "import", bund, "--history", str(w / "h3"), "--sha", "v1.0")
    bad("history --config without --explain", "history", "--history", str(w / "hist"), "--config", "demo")
    bad(
        "history --results-dir without --explain",
        "history",
        "--history",
        str(w / "hist"),
        "--results-dir",
        "x",
    )
    bad(
        "nightly --backfill a.. (dry run)",
        *night,
        "--backfill",
        "v1..",
        "--history",
        str(w / "h1"),
    )
    good(
        "nightly --backfill --tags --every 2 --dry-run",
        *night,
        "--backfill",
        "v1..v2",
        "--tags",
        "--every",
        "2",
        "--history",
        str(w / "h1"),
    )
    fail("doctor --python /bin/false (check fails)", "doctor", "--python", "/bin/false")

    # --- report
    bad("report nothing", "report")
    bad("report missing", "report", str(w / "nope"))
    bad("report a file", "report", str(w / "file_not_dir"))
    bad("report empty dir", "report", str(w / "bundles" / "empty"))
    bad("report damaged meta", "report", str(w / "bundles" / "damaged-meta"))
    bad("report no meta", "report", str(w / "bundles" / "no-meta"))
    bad("report meta is a list", "report", str(w / "bundles" / "meta-list"))
    bad("report records is a dir", "report", str(w / "bundles" / "records-dir"))
    good("report --by-lane of a one-lane run", "report", bund, "--by-lane")
    bad("report --format bogus", "report", bund, "--format", "bogus")
    bad("report --metric bogus", "report", bund, "--metric", "bogus")
    bad("report two bundles", "report", bund, bund)
    bad("report binary records (all lines garbage)", "report", str(w / "bundles" / "binary-records"))
    for b in sorted((BUNDLES).iterdir()):
        if b.is_dir():
            for fmt in ["table", "json", "markdown", "csv"]:
                good(f"report {b.name} {fmt}", "report", str(w / "bundles" / b.name), "--format", fmt)
    good("report relative path", "report", "bundles/v1-run-failures", cwd=w)
    good("report --metric wall", "report", bund, "--metric", "wall")

    # --- explain (refused before any worker)
    bad("explain nothing", "explain")
    bad("explain missing bundle", "explain", str(w / "nope"), "--cell", "Linear/fp32")
    bad("explain no --cell", "explain", bund)
    bad("explain unknown cell", "explain", bund, "--cell", "Nope/fp32")
    bad("explain malformed cell", "explain", bund, "--cell", "Linear")
    bad("explain cell ''", "explain", bund, "--cell", "")
    bad("explain cell bad shape", "explain", bund, "--cell", "Linear/fp32/8,x/eager")
    bad("explain --iters 0", "explain", bund, "--cell", "Linear/fp32", "--iters", "0")
    bad("explain --repeats -1", "explain", bund, "--cell", "Linear/fp32", "--repeats", "-1")
    bad("explain --top 0", "explain", bund, "--cell", "Linear/fp32", "--top", "0")
    bad("explain --timeout nan", "explain", bund, "--cell", "Linear/fp32", "--timeout", "nan")
    bad("explain --core 999", "explain", bund, "--cell", "LayerNormLinear/bf16", "--core", "999")
    bad("explain damaged bundle", "explain", str(w / "bundles" / "damaged-meta"), "--cell", "Linear/fp32")

    # --- bisect (plans only)
    bad("bisect nothing", "bisect")
    bad("bisect no --cell", "bisect", "v1..v2", "--repo", str(repo), *demo)
    bad("bisect a..a", "bisect", "v1..v1", "--repo", str(repo), *demo, "--cell", "MLP/fp32", "--plan")
    bad("bisect ..b", "bisect", "..v2", "--repo", str(repo), *demo, "--cell", "MLP/fp32", "--plan")
    bad(
        "bisect unknown cell", "bisect", "v1..v2", "--repo", str(repo), *demo, "--cell", "Nope/fp32", "--plan"
    )
    good("bisect module-only cell", "bisect", "v1..v2", "--repo", str(repo), *demo, "--cell", "MLP", "--plan")
    bad("bisect unknown ref", "bisect", "v1..zzz", "--repo", str(repo), *demo, "--cell", "MLP/fp32", "--plan")
    bad("bisect not git", "bisect", "v1..v2", "--repo", str(w / "dir"), *demo, "--cell", "MLP/fp32", "--plan")
    bad(
        "bisect --format csv",
        "bisect",
        "v1..v2",
        "--repo",
        str(repo),
        *demo,
        "--cell",
        "MLP/fp32",
        "--format",
        "csv",
    )
    good("bisect --plan", "bisect", "v1..v2", "--repo", str(repo), *demo, "--cell", "MLP/fp32", "--plan")
    bad(
        "bisect reversed --plan",
        "bisect",
        "v2..v1",
        "--repo",
        str(repo),
        *demo,
        "--cell",
        "MLP/fp32",
        "--plan",
    )

    # --- counters
    bad("counters check no --expected", "counters", "check", *demo, "--path", B)
    bad(
        "counters check --expected missing",
        "counters",
        "check",
        *demo,
        "--path",
        B,
        "--expected",
        str(w / "nope.toml"),
    )
    bad(
        "counters check --expected malformed",
        "counters",
        "check",
        *demo,
        "--path",
        B,
        "--expected",
        str(w / "bad_expected.toml"),
    )
    bad(
        "counters check --expected dir", "counters", "check", *demo, "--path", B, "--expected", str(w / "dir")
    )
    bad(
        "counters check --path missing",
        "counters",
        "check",
        *demo,
        "--path",
        str(w / "nope"),
        "--expected",
        str(w / "empty_expected.toml"),
    )
    bad(
        "counters check --modules unknown",
        "counters",
        "check",
        "--modules",
        "Nope",
        "--expected",
        str(w / "empty_expected.toml"),
    )

    # --- nightly (dry runs and refusals)
    bad("nightly no repo (cwd not git)", "nightly", *demo, "--dry-run")
    bad("nightly --repo not git", "nightly", "--repo", str(w / "dir"), *demo, "--dry-run")
    bad(
        "nightly --ref unknown",
        "nightly",
        "--repo",
        str(repo),
        "--ref",
        "nope",
        *demo,
        "--dry-run",
        "--history",
        str(w / "h1"),
    )
    for v in ["0/2", "3/2", "1/0", "x", "1/", "-1/2", "1/2/3"]:
        bad(
            f"nightly --shard {v}",
            "nightly",
            "--repo",
            str(repo),
            *demo,
            "--dry-run",
            "--shard",
            v,
            "--history",
            str(w / "h1"),
        )
    good(
        "nightly --backfill a..a (A alone)",
        *night,
        "--backfill",
        "v1..v1",
        "--history",
        str(w / "h1"),
    )
    bad(
        "nightly --backfill ..b",
        *night,
        "--backfill",
        "..v2",
        "--history",
        str(w / "h1"),
    )
    bad(
        "nightly --backfill reversed",
        *night,
        "--backfill",
        "v2..v1",
        "--history",
        str(w / "h1"),
    )
    bad(
        "nightly --every 0",
        *night,
        "--backfill",
        "v1..v2",
        "--every",
        "0",
        "--history",
        str(w / "h1"),
    )
    bad(
        "nightly --every without --backfill",
        *night,
        "--every",
        "2",
        "--history",
        str(w / "h1"),
    )
    bad(
        "nightly --tags without --backfill",
        *night,
        "--tags",
        "--history",
        str(w / "h1"),
    )
    bad(
        "nightly --history is a file",
        *night,
        "--history",
        str(w / "file_not_dir"),
    )
    bad(
        "nightly --history bogus URL",
        *night,
        "--history",
        "bogus://x/y",
    )
    good("nightly --dry-run", "nightly", "--repo", str(repo), *demo, "--dry-run", "--history", str(w / "h1"))
    good(
        "nightly --backfill --dry-run",
        *night,
        "--backfill",
        "v1..v2",
        "--history",
        str(w / "h1"),
    )

    # --- history
    H_ = ["--history", str(w / "hist")]
    good("history fixture", "history", *H_)
    good("history json", "history", *H_, "--format", "json")
    good("history --changes", "history", *H_, "--changes")
    good("history --nights", "history", *H_, "--nights")
    bad("history missing store", "history", "--history", str(w / "nope"))
    bad("history empty store (no history)", "history", "--history", str(w / "hist_empty"))
    bad("history store is a file", "history", "--history", str(w / "file_not_dir"))
    bad("history bogus URL", "history", "--history", "bogus://x")
    bad("history --last 0", "history", *H_, "--last", "0")
    bad("history --last -1", "history", *H_, "--last", "-1")
    bad("history --changes --nights", "history", *H_, "--changes", "--nights")
    bad("history --explain without --changes", "history", *H_, "--explain")
    bad("history --budget without --explain", "history", *H_, "--budget", "5m")
    bad("history --budget garbage", "history", *H_, "--changes", "--explain", "--budget", "x")
    bad("history --module unknown", "history", *H_, "--module", "Nope")
    bad("history --machine unicode", "history", *H_, "--machine", "☃")
    good("history cut-short parquet", "history", "--history", str(w / "hist_bad"))

    # --- dashboard
    bad("dashboard missing store", "dashboard", "--history", str(w / "nope"), "--out", str(w / "site1"))
    bad("dashboard --out is a file", "dashboard", *H_, "--out", str(w / "file_not_dir"))
    bad("dashboard --out non-empty foreign dir", "dashboard", *H_, "--out", str(repo))
    bad("dashboard --min-effect -1", "dashboard", *H_, "--out", str(w / "site2"), "--min-effect", "-1")
    bad("dashboard --sig-level 2", "dashboard", *H_, "--out", str(w / "site2"), "--sig-level", "2")
    bad("dashboard --sig-level 0", "dashboard", *H_, "--out", str(w / "site2"), "--sig-level", "0")
    good("dashboard fixture", "dashboard", *H_, "--out", str(w / "site3"))
    good("dashboard again same out", "dashboard", *H_, "--out", str(w / "site3"))
    good(
        "dashboard cut-short parquet",
        "dashboard",
        "--history",
        str(w / "hist_bad"),
        "--out",
        str(w / "site4"),
    )

    # --- import
    bad("import nothing", "import", "--history", str(w / "h2"))
    bad("import missing bundle", "import", str(w / "nope"), "--history", str(w / "h2"))
    bad("import a file", "import", str(w / "file_not_dir"), "--history", str(w / "h2"))
    bad("import damaged", "import", str(w / "bundles" / "damaged-meta"), "--history", str(w / "h2"))
    bad("import --shard 0/1", "import", bund, "--history", str(w / "h2"), "--shard", "0/1")
    bad(
        "import --commit-date garbage",
        "import",
        bund,
        "--history",
        str(w / "h2"),
        "--sha",
        "abc1234",
        "--commit-date",
        "yesterday",
    )
    bad("import --subject without --sha", "import", bund, "--history", str(w / "h2"), "--subject", "x")
    bad("import --sha garbage", "import", bund, "--history", str(w / "h2"), "--sha", "not a sha!")
    bad("import --history is a file", "import", bund, "--history", str(w / "file_not_dir"))
    good(
        "import interrupted w/o --include-partial (skipped, said)",
        "import",
        str(w / "bundles" / "v1-compare-interrupted"),
        "--history",
        str(w / "h2"),
        "--sha",
        "abc1234",
    )
    good("import with --sha", "import", bund, "--history", str(w / "h2"), "--sha", "abc1234")
    good("import twice adds once", "import", bund, "--history", str(w / "h2"), "--sha", "abc1234")

    # --- cache
    C = ["--cache-dir", str(w / "cache")]
    good("cache list", "cache", "list", *C)
    good("cache list json", "cache", "list", *C, "--format", "json")
    good("cache list missing dir", "cache", "list", "--cache-dir", str(w / "nocache"))
    bad("cache list --cache-dir file", "cache", "list", "--cache-dir", str(w / "file_not_dir"))
    bad("cache clear --older-than -1", "cache", "clear", *C, "--older-than", "-1")
    bad("cache clear --older-than nan", "cache", "clear", *C, "--older-than", "nan")
    bad("cache clear --older-than x", "cache", "clear", *C, "--older-than", "x")
    bad("cache clear bogus kind", "cache", "clear", *C, "bogus")
    good("cache clear empty", "cache", "clear", *C)

    # --- doctor
    good("doctor", "doctor")
    good("doctor json", "doctor", "--format", "json")
    bad("doctor --core 999", "doctor", "--core", "999")
    bad("doctor --core -1", "doctor", "--core", "-1")
    fail("doctor --python missing (check fails)", "doctor", "--python", str(w / "nope"))
    fail("doctor --python /bin/true (check fails)", "doctor", "--python", "/bin/true")
    bad("doctor --format csv", "doctor", "--format", "csv")

    # --- environment oddities
    good(
        "compare --plan with TEPERF_CACHE a file (plan only)",
        *refs,
        "--plan",
        env={"TEPERF_CACHE": str(w / "file_not_dir")},
    )
    good("report NO cwd (deleted)", "report", bund, cwd="DELETED")

    _fourth_pass(w, repo, bad, good, fail, out)
    before = len(out)
    _fifth_pass(w, repo, bad, good, fail, out)
    for c in out[before:]:
        c["fifth"] = True  # --fifth runs only these

    # --- a tiny real run, and signals into it
    good("run tiny demo", "run", *demo, "--path", B, *TINY, "--results-dir", str(w / "res"), timeout=120)
    good(
        "run tiny demo relative path from elsewhere",
        "run",
        *demo,
        "--path",
        "../../base",
        *TINY,
        "--results-dir",
        str(w / "res"),
        cwd=str(PLANTED / "head" / "demo_blocks"),
        timeout=120,
    )
    stages = [("SIGINT", 3.0), ("SIGINT", 0.5), ("SIGTERM", 3.0), ("SIGINT2", 3.0)]
    stages += [("SIGINT", 0.1), ("SIGINT", 1.5), ("SIGINT", 8.0), ("SIGTERM", 0.3), ("SIGTERM", 8.0)]
    stages += [("SIGINT2", 8.0)]
    for sig, when in stages:
        argv = ["run", *demo, "--path", B, *TINY, "--results-dir", str(w / f"res-{sig}-{when}")]
        out.append(
            dict(name=f"{sig} into a tiny run after {when}s", argv=argv, expect="signal", sig=sig, when=when)
        )
    return out


def _fourth_pass(w: Path, repo: Path, bad, good, fail, out) -> None:
    """Issue 46: what teperf says after something went wrong; each of its 13 items again, and more."""
    B = str(PLANTED / "base")
    H = str(PLANTED / "head")
    demo = ["--config", "demo"]
    D = w / "bundles"
    bund = str(D / "v1-compare-counters")
    hist = str(w / "hist")
    night = ["nightly", "--repo", str(repo), *demo, "--dry-run"]

    # damaged bundles: report reads what it can and says what it left out; import keeps partial ones out
    good("report cut-short records (partial)", "report", str(D / "cut-short"), want="partial")
    good("report cut-short json", "report", str(D / "cut-short"), "--format", "json", want='"partial"')
    good("report torn last line", "report", str(D / "torn-last-line"), want="unreadable line")
    bad("report records empty, meta complete", "report", str(D / "records-empty"))
    bad("report meta.json empty", "report", str(D / "meta-empty"))
    good("report NUL line in records", "report", str(D / "records-nul"), want="unreadable line")
    good("report unknown record kind", "report", str(D / "records-unknown-kind"))
    good("report no trials (every cell missing)", "report", str(D / "records-no-trials"), want="not measured")
    bad("report schema 99", "report", str(D / "meta-schema-99"))
    bad("report config is a list", "report", str(D / "meta-config-list"))
    good("report cases garbage", "report", str(D / "meta-cases-garbage"), want="damaged")
    good("report meta without sides", "report", str(D / "meta-no-sides"))
    good("report status running", "report", str(D / "meta-status-running"), want="running")
    bad("report recorded metric bogus", "report", str(D / "meta-metric-bogus"))
    good(
        "report recorded metric bogus, --metric given",
        "report",
        str(D / "meta-metric-bogus"),
        "--metric",
        "wall",
    )
    good("report processes a string", "report", str(D / "meta-processes-string"))
    good("report via a symlink", "report", str(D / "symlinked"))
    good("report trailing slash", "report", str(D / "v1-compare-counters") + "/")
    good("report --by-lane cut short", "report", str(D / "cut-short"), "--by-lane")
    good("report csv cut short", "report", str(D / "cut-short"), "--format", "csv")
    bad("report /dev/null", "report", "/dev/null")
    bad("report /proc", "report", "/proc")
    bad("report /sys/kernel", "report", "/sys/kernel")
    bad("report ~ unexpanded", "report", "~/no-such-bundle")
    good(
        "import cut-short w/o --include-partial (kept out, said)",
        "import",
        str(D / "cut-short"),
        "--history",
        str(w / "h46"),
        "--sha",
        "abc1234",
        want="cells partial",
    )
    good(
        "import cut-short --include-partial",
        "import",
        str(D / "cut-short"),
        "--history",
        str(w / "h46b"),
        "--sha",
        "abc1234",
        "--include-partial",
        want="1 bundle added",
    )
    good(
        "import status running w/o --include-partial",
        "import",
        str(D / "meta-status-running"),
        "--history",
        str(w / "h46"),
        "--sha",
        "abc1234",
        want="skipped",
    )
    bad("import schema 99", "import", str(D / "meta-schema-99"), "--history", str(w / "h46"))
    bad("import meta empty", "import", str(D / "meta-empty"), "--history", str(w / "h46"))
    bad("import --history /sys/kernel/h", "import", bund, "--history", "/sys/kernel/h", "--sha", "abc1234")
    bad("import --history /proc/h", "import", bund, "--history", "/proc/h", "--sha", "abc1234")
    bad("import /dev/null", "import", "/dev/null", "--history", str(w / "h46"))
    good(
        "import the same bundle twice in one call",
        "import",
        bund,
        bund,
        "--history",
        str(w / "h46c"),
        want="already in the history",
    )
    bad("explain cut-short bad cell", "explain", str(D / "cut-short"), "--cell", "Nope/fp32")
    bad("explain meta empty", "explain", str(D / "meta-empty"), "--cell", "Linear/fp32")
    bad("explain /dev/null", "explain", "/dev/null", "--cell", "Linear/fp32")

    # special and unwritable paths
    for where in ["/sys/kernel", "/proc/teperf", "/dev/null"]:
        bad(f"run --results-dir {where}", "run", *demo, "--path", B, *TINY, "--results-dir", where)
        bad(f"dashboard --out {where}", "dashboard", "--history", hist, "--out", where)
    bad("history --history /proc", "history", "--history", "/proc")
    bad("history --history /dev/null", "history", "--history", "/dev/null")
    bad("cache list --cache-dir /dev/null", "cache", "list", "--cache-dir", "/dev/null")
    bad("run --config /proc/self/status", "run", "--config", "/proc/self/status")
    bad("run --config /dev/null/x", "run", "--config", "/dev/null/x")
    bad("run --path /proc", "run", *demo, "--path", "/proc/self/fdinfo", *TINY)
    for where in ["/proc/cnt.toml", "/sys/kernel/x.toml"]:
        counters = ["counters", "check", *demo, "--path", B, "--modules", "Linear"]
        bad(
            f"counters check --expected {where} --update",
            *counters,
            "--expected",
            where,
            "--update",
            timeout=90,
        )
    good("doctor with TEPERF_RUNTIME_DIR unusable", "doctor", env={"TEPERF_RUNTIME_DIR": "/proc/x"})
    good(
        "compare --plan with TEPERF_RUNTIME_DIR a file",
        "compare",
        "v1..v2",
        "--repo",
        str(repo),
        *demo,
        "--plan",
        env={"TEPERF_RUNTIME_DIR": str(w / "file_not_dir")},
    )
    good("report COLUMNS=10", "report", bund, env={"COLUMNS": "10"})
    good("report LANG=C", "report", bund, env={"LANG": "C", "LC_ALL": "C"})
    good("history NO_COLOR", "history", "--history", hist, env={"NO_COLOR": "1"})

    # refs that do not exist
    bad("compare both refs unknown", "compare", "nope1..nope2", "--repo", str(repo), *demo, "--plan")
    bad("compare unknown sha", "compare", "v1..deadbeef", "--repo", str(repo), *demo, "--plan")
    bad("compare ref HEAD@{99}", "compare", "v1..HEAD@{99}", "--repo", str(repo), *demo, "--plan")
    good(
        "compare HEAD..HEAD~1 --plan (reversed)",
        "compare",
        "HEAD..HEAD~1",
        "--repo",
        str(repo),
        *demo,
        "--plan",
    )
    cell = ["--cell", "Linear/fp32"]
    bad("bisect unknown good", "bisect", "nope..v2", "--repo", str(repo), *demo, *cell)
    bad("bisect unknown bad", "bisect", "v1..nope", "--repo", str(repo), *demo, *cell)
    bad("bisect a..a (no --plan)", "bisect", "v1..v1", "--repo", str(repo), *demo, *cell)
    bad("bisect reversed", "bisect", "v2..v1", "--repo", str(repo), *demo, *cell)
    bad(
        "bisect unknown cell (no --plan)",
        "bisect",
        "v1..v2",
        "--repo",
        str(repo),
        *demo,
        "--cell",
        "Nope/fp32",
    )
    bad("bisect --cell ''", "bisect", "v1..v2", "--repo", str(repo), *demo, "--cell", "")
    bad("bisect --repo missing", "bisect", "v1..v2", "--repo", str(w / "nope"), *demo, *cell)
    bad("bisect --repo a file", "bisect", "v1..v2", "--repo", str(w / "file_not_dir"), *demo, *cell)
    good("bisect --plan Linear/fp32", "bisect", "v1..v2", "--repo", str(repo), *demo, *cell, "--plan")
    bad("bisect --budget 0", "bisect", "v1..v2", "--repo", str(repo), *demo, *cell, "--budget", "0")
    bad(
        "nightly --ref deadbeef",
        "nightly",
        "--repo",
        str(repo),
        "--ref",
        "deadbeef",
        *demo,
        "--dry-run",
        "--history",
        str(w / "h1"),
    )
    bad(
        "nightly --backfill nope..v2",
        *night,
        "--backfill",
        "nope..v2",
        "--history",
        str(w / "h1"),
    )

    # the 13 items of issue 46, again
    bad("run --shape 100000,1000,100000 (40 TB)", "run", *demo, "--path", B, "--shape", "100000,1000,100000")
    bad(
        "run --shape 99999999999999999999,2,64",
        "run",
        *demo,
        "--path",
        B,
        "--shape",
        "99999999999999999999,2,64",
    )
    fail(
        "run --budget 1s (nothing measured, said)",
        "run",
        *demo,
        "--path",
        B,
        *TINY,
        "--budget",
        "1s",
        "--results-dir",
        str(w / "res46"),
        timeout=90,
        want="budget",
    )
    bad(
        "bisect --rounds 1 --trials 3",
        "bisect",
        "v1..v2",
        "--repo",
        str(repo),
        *demo,
        *cell,
        "--rounds",
        "1",
        "--trials",
        "3",
    )
    bad("compare --head-path only", "compare", *demo, "--head-path", H)
    for flag, v in [("--modules", "Linear,Linear"), ("--recipes", "fp32,fp32"), ("--modes", "eager,eager")]:
        bad(f"run {flag} {v}", "run", *demo, "--path", B, flag, v)
    bad("run --shape given twice", "run", *demo, "--path", B, "--shape", "8,2,64", "--shape", "8,2,64")
    bad(
        "compare --strategy env --base-python/--head-python (missing)",
        "compare",
        "--strategy",
        "env",
        "--base-python",
        str(w / "a" / "python"),
        "--head-python",
        str(w / "b" / "python"),
    )
    for flag, v in [("--min-effect", "1e9"), ("--min-effect", "100.5"), ("--min-effect-once", "1e9")]:
        bad(f"run {flag} {v}", "run", *demo, "--path", B, flag, v)
    bad(
        "dashboard --min-effect 1e9",
        "dashboard",
        "--history",
        hist,
        "--out",
        str(w / "s46"),
        "--min-effect",
        "1e9",
    )

    def cores():
        metas = [list((w / f"res-two-{tag}").glob("*/meta.json")) for tag in "AB"]
        return [json.loads(m[0].read_text())["config"]["core"] if m else None for m in metas]

    out.append(
        dict(
            name="two tiny runs at once pin different cores",
            argvs=[
                ["run", *demo, "--path", B, *TINY, "--results-dir", str(w / f"res-two-{tag}")] for tag in "AB"
            ],
            expect="parallel",
            stagger=2.0,  # the second starts once the first has claimed its core
            check=lambda: None not in cores() and len(set(cores())) == 2,
            cwd=None,
            env=None,
            timeout=150,
        )
    )

    # limits and past them
    good(
        "run --seed 2**64 (any whole seed >= 0 works)", "run", *demo, "--path", B, *TINY, "--seed", str(2**64)
    )
    bad(
        "compare --processes 0",
        "compare",
        *demo,
        "--base-path",
        B,
        "--head-path",
        H,
        "--processes",
        "0",
    )
    bad("run --iters 2**63", "run", *demo, "--path", B, "--iters", str(2**63))
    bad("run --timeout 1e300", "run", *demo, "--path", B, "--timeout", "1e300", "--iters", str(10**12))
    bad("run --budget 1e9h (a malformed duration)", "run", *demo, "--path", B, "--budget", "1e9h")
    bad("run --lanes 10**6", "run", *demo, "--path", B, "--lanes", str(10**6))
    good(
        "compare --plan --prestart huge (at most one spare core per worker)",
        "compare",
        "v1..v2",
        "--repo",
        str(repo),
        *demo,
        "--plan",
        "--prestart",
        "99999999999999999999999",
    )
    good("history --last 10**30", "history", "--history", hist, "--last", str(10**30))
    good("history --last 10**6", "history", "--history", hist, "--last", str(10**6))
    bad(
        "cache clear --older-than 1e400",
        "cache",
        "clear",
        "--cache-dir",
        str(w / "cache"),
        "--older-than",
        "1e400",
    )
    bad(
        "nightly --shard 99999999999999999999/2",
        *night,
        "--shard",
        "99999999999999999999/2",
        "--history",
        str(w / "h1"),
    )


def _fifth_pass(w: Path, repo: Path, bad, good, fail, out) -> None:
    """The fifth pass (2026-12-05 b): damage of new kinds, signals at other stages, runs at once, special
    paths, and limits just past the edge of the options added lately."""
    B = str(PLANTED / "base")
    demo = ["--config", "demo"]
    D = w / "bundles"
    hist = str(w / "hist")
    tiny = ["run", *demo, "--path", B, *TINY]
    plan = ["compare", "v1..v2", "--repo", str(repo), *demo, "--plan"]
    cell = ["bisect", "v1..v2", "--repo", str(repo), *demo]

    # damaged bundles of other kinds
    archive = str(D / "archived.tar.xz")
    bad("report a bundle kept as .tar.xz", "report", archive, want="tar -xf")
    bad("import a bundle kept as .tar.xz", "import", archive, "--history", str(w / "h5"), want="tar -xf")
    bad("explain a bundle kept as .tar.xz", "explain", archive, want="tar -xf")
    good("report meta.json saved with a BOM", "report", str(D / "meta-bom"))
    good("report records with CRLF line ends", "report", str(D / "crlf"), avoid="unreadable")
    good(
        "report records written twice (counted once)",
        "report",
        str(D / "records-twice"),
        want="written twice",
    )
    good("report --by-lane records written twice", "report", str(D / "records-twice"), "--by-lane")
    good(
        "import records written twice",
        "import",
        str(D / "records-twice"),
        "--history",
        str(w / "h5"),
        "--sha",
        "abc1234",
        want="1 bundle added",
    )
    good("report a trial with a negative time", "report", str(D / "trial-negative"), want="unreadable line")
    good("report a trial with a NaN time", "report", str(D / "trial-nan"), want="unreadable line")
    good("report json, a trial with a NaN time", "report", str(D / "trial-nan"), "--format", "json")
    bad("report meta.json a dangling symlink", "report", str(D / "dangling-meta.json"), want="broken link")
    bad(
        "report records.jsonl a dangling symlink", "report", str(D / "dangling-records.jsonl"), want="missing"
    )
    bad("report records.jsonl gzipped", "report", str(D / "records-gzipped"), want="missing")
    bad("report meta.json a directory", "report", str(D / "meta-a-directory"), want="a directory, not a file")
    bad("report schema of a newer release", "report", str(D / "meta-newer-release"), want="9.0.0 or newer")
    good("report status failed", "report", str(D / "meta-status-failed"), want="worker died")
    good("report cases []", "report", str(D / "meta-cases-empty"), want="lists no cases")
    bad("report sides a list", "report", str(D / "meta-sides-list"), want="not dict")
    good("report config null", "report", str(D / "meta-no-config"))
    good("report a bundle named with spaces and unicode", "report", str(D / "spaced ünï bundle"))
    bad("report results/ (a directory of bundles)", "report", str(w / "results"), want="e.g. the last")
    bad("import results/ (a directory of bundles)", "import", str(w / "results"), "--history", str(w / "h5"))
    for name in ("meta.json", "records.jsonl"):
        bad(
            f"report a bundle's {name}", "report", str(w / "results" / "20261205-a" / name), want="directory:"
        )

    # signals at other stages: making git sides, bisecting, checking counters, importing, a dashboard
    for name, argv, sig, when in [
        ("compare v1..v2 (sides being made)", [*plan[:-1], *TINY], "SIGINT", 1.0),
        ("compare v1..v2 (measuring)", [*plan[:-1], *TINY], "SIGTERM", 5.0),
        ("bisect (counters)", [*cell, "--cell", "MLP/fp32"], "SIGINT", 3.0),
        ("bisect (timing)", [*cell, "--cell", "MLP/fp32"], "SIGTERM", 9.0),
        (
            "counters check",
            ["counters", "check", *demo, "--path", B, "--expected", str(w / "c5.toml"), "--update"],
            "SIGINT",
            1.5,
        ),
        (
            "import",
            ["import", str(D / "v1-compare-counters"), "--history", str(w / "h5s"), "--sha", "ab12"],
            "SIGINT",
            0.6,
        ),
        ("dashboard", ["dashboard", "--history", hist, "--out", str(w / "site5s")], "SIGTERM", 0.8),
        ("a forkserver run", [*tiny, "--spawn", "forkserver"], "SIGINT", 4.0),
        (
            "nightly",
            ["nightly", "--repo", str(repo), *demo, "--history", str(w / "h5n"), *TINY],
            "SIGTERM",
            6.0,
        ),
    ]:
        out.append(
            dict(name=f"{sig} into {name} after {when}s", argv=argv, expect="signal", sig=sig, when=when)
        )

    # several teperf runs at once
    out.append(
        dict(
            name="two tiny runs into one --results-dir at once",
            argvs=[[*tiny, "--results-dir", str(w / "r5")]] * 2,
            expect="parallel",
            check=lambda: len(list((w / "r5").glob("*/meta.json"))) == 2,
            cwd=None,
            env=None,
            timeout=150,
        )
    )
    out.append(
        dict(
            name="two imports into one history at once",
            expect="parallel",
            cwd=None,
            env=None,
            timeout=90,
            argvs=[
                ["import", str(D / b), "--history", str(w / "h5p"), "--sha", sha]
                for b, sha in (("v1-compare-counters", "aaaa111"), ("v2-compare-compile-cpu", "bbbb222"))
            ],
            check=lambda: len(list((w / "h5p").rglob("*.parquet"))) == 2,
        )
    )
    out.append(
        dict(
            name="two dashboards into one --out at once",
            expect="parallel",
            cwd=None,
            env=None,
            timeout=90,
            argvs=[["dashboard", "--history", hist, "--out", str(w / "site5p")]] * 2,
            check=lambda: (w / "site5p" / "index.html").is_file(),
        )
    )
    good(
        "a run while every core is claimed (said)",
        *tiny,
        "--results-dir",
        str(w / "r5h"),
        hold=True,
        want="every core is claimed",
    )
    good(
        "a run on --core 0 while every core is claimed (told to)",
        *tiny,
        "--core",
        "0",
        "--results-dir",
        str(w / "r5h"),
        hold=True,
        avoid="every core is claimed",
    )
    good("doctor while every core is claimed", "doctor", hold=True, want="another teperf run")

    # special paths
    good("run --results-dir with spaces and unicode", *tiny, "--results-dir", str(w / "rés ults"))
    good(
        "dashboard --out with spaces and unicode", "dashboard", "--history", hist, "--out", str(w / "sïte 5")
    )
    good("history --history with a trailing slash", "history", "--history", hist + "/")
    good(
        "import --history relative to the cwd",
        "import",
        str(D / "v1-compare-counters"),
        "--history",
        "h5r",
        "--sha",
        "abc1234",
        cwd=str(w),
    )
    pipe = f"--config <(cat {HERE / 'teperf' / 'configs' / 'demo.toml'})"
    counters = ["counters", "check", "--path", B, "--modules", "Linear", "--expected", str(w / "c5p.toml")]
    good("counters check --config <(...) (a pipe)", *counters, "--update", bash_tail=pipe)
    bad("run --results-dir under a file", *tiny, "--results-dir", str(w / "file_not_dir" / "sub"))
    bad("run --config '~/x.toml' (no shell to expand ~)", "run", "--config", "~/x.toml")

    # limits just past the edge of the options added lately
    good(
        "run --max-contended 100 (any load)", *tiny, "--max-contended", "100", "--results-dir", str(w / "r5")
    )
    good("run --max-contended 0 (no load)", *tiny, "--max-contended", "0", "--results-dir", str(w / "r5e"))
    bad("run --max-contended 100.0001", *tiny, "--max-contended", "100.0001")
    good("compare --plan --min-effect 100 (the edge)", *plan, "--min-effect", "100")
    bad("compare --plan --min-effect 100.0001", *plan, "--min-effect", "100.0001")
    good("compare --plan --precision 0.01 (the edge)", *plan, "--precision", "0.01")
    bad("compare --plan --precision 0.0099", *plan, "--precision", "0.0099")
    bad("bisect --max-contended 101", *cell, "--cell", "MLP/fp32", "--max-contended", "101")
    bad("bisect --precision 0.001", *cell, "--cell", "MLP/fp32", "--precision", "0.001")
    good(
        "bisect --no-confirm, counters moved (exit 0: explained)",
        *cell,
        "--cell",
        "MLP/fp32",
        "--no-confirm",
        rc=0,
    )
    good("bisect --no-confirm, nothing moved (exit 4)", *cell, "--cell", "Linear/fp32", "--no-confirm", rc=4)
    fail(
        "bisect --budget 1s (exit 1: undecided within it)",
        *cell,
        "--cell",
        "Linear/fp32",
        "--budget",
        "1s",
        timeout=150,
        want="--budget",
    )
    bad("run --timeout 0.001 (the worker cannot start)", *tiny, "--timeout", "0.001", want="raise --timeout")
    good("run --iters 1 --warmup 0", *tiny, "--iters", "1", "--warmup", "0", "--results-dir", str(w / "r5"))
    good(
        "run --spawn forkserver --server-pairs 1",
        *tiny,
        "--spawn",
        "forkserver",
        "--server-pairs",
        "1",
        "--results-dir",
        str(w / "r5"),
    )
    bad("run --seed -1", *tiny, "--seed", "-1")
    dry = ["nightly", "--repo", str(repo), *demo, "--dry-run", "--history", str(w / "h1")]
    good("nightly --backfill --every 10**6 --dry-run", *dry, "--backfill", "v1..v2", "--every", str(10**6))
    good(
        "cache clear --older-than 1e308",
        "cache",
        "clear",
        "--cache-dir",
        str(w / "cache"),
        "--older-than",
        "1e308",
    )


def _default_signals():
    """A terminal's Ctrl-C reaches teperf with SIGINT's default action; a shell's background job has it
    ignored, and Python then installs no KeyboardInterrupt handler: undo that, as a terminal would."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _env(w: Path, case: dict) -> dict:
    """The pass's own cache and core claims: other teperf runs on a shared machine decide no case."""
    env = dict(
        os.environ, TEPERF_CACHE=str(w / "cache"), COLUMNS="120", TEPERF_RUNTIME_DIR=str(w / "runtime")
    )
    return {**env, **(case.get("env") or {})}


@contextlib.contextmanager
def _cores_held(w: Path, hold: bool):
    """Every core claimed as another teperf run would claim it (a lock file per core, this pid in it)."""
    held = []
    if hold:
        (w / "runtime" / "teperf-cores").mkdir(parents=True, exist_ok=True)
        for core in os.sched_getaffinity(0):
            f = open(w / "runtime" / "teperf-cores" / f"core{core}", "w")
            f.write(str(os.getpid())), f.flush(), fcntl.flock(f, fcntl.LOCK_EX)
            held.append(f)
    try:
        yield
    finally:
        [f.close() for f in held]


def run_parallel(teperf: str, case: dict, w: Path, run_dir: Path) -> dict:
    """Several teperf commands at once: each must finish well, and what they made must be whole (check)."""
    t0 = time.monotonic()
    procs = []
    for argv in case["argvs"]:
        procs.append(
            subprocess.Popen(
                [teperf, *argv],
                cwd=run_dir,
                env=_env(w, case),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
            )
        )
        time.sleep(case.get("stagger", 0.3))
    outs = [p.communicate(timeout=case["timeout"]) for p in procs]
    rcs = [p.returncode for p in procs]
    lines = [ln for _, e in outs for ln in e.splitlines() if ln.strip()]
    rec = dict(
        name=case["name"],
        argv=case["argvs"][0],
        expect="parallel",
        rc=max(rcs),
        traceback=any("Traceback" in e for _, e in outs),
        stderr_lines=len(lines),
        first_error=next((ln for ln in lines if "error" in ln.lower()), ""),
        stdout_head=outs[0][0][:300],
        timed_out=False,
        seconds=round(time.monotonic() - t0, 1),
    )
    ok = rcs == [0] * len(rcs) and not rec["traceback"] and case["check"]()
    rec["verdict"], rec["why"] = (
        ("OK", "") if ok else ("WRONG", f"exits {rcs}, or what they made is not whole")
    )
    if not rec["first_error"]:
        rec["first_error"] = f"{len(rcs)} at once: exits {rcs}"
    if not ok:
        rec["stderr_tail"] = "\n".join(e[-1500:] for _, e in outs)
    return rec


def run_case(teperf: str, case: dict, w: Path, run_dir: Path) -> dict:
    if case["expect"] == "parallel":
        return run_parallel(teperf, case, w, run_dir)
    env = _env(w, case)
    cwd = case.get("cwd") or run_dir
    if cwd == "DELETED":
        cwd = w / "gone"
        cwd.mkdir(exist_ok=True)
        argv = ["sh", "-c", f'cd "{cwd}" && rmdir "{cwd}" && exec "$0" "$@"', teperf, *case["argv"]]
    elif case.get("bash_tail"):  # what a shell passes for --config <(...): /dev/fd/63
        argv = ["bash", "-c", f'exec "$0" "$@" {case["bash_tail"]}', teperf, *case["argv"]]
    else:
        argv = [teperf, *case["argv"]]
    t0 = time.monotonic()
    with _cores_held(w, case.get("hold")):
        rec = _run_one(argv, case, cwd, env, t0)
    if case["expect"] == "signal" and rec["verdict"] == "OK" and "measured: " in rec["stderr"]:
        # what was measured must still read: report the bundle the interrupted run names
        bundle = rec["stderr"].split("measured: ", 1)[1].split()[0]
        rep = subprocess.run(  # from where the command ran: the bundle's path may be relative (results/...)
            [teperf, "report", bundle], capture_output=True, text=True, env=env, timeout=60, cwd=cwd
        )
        rec["report_rc"] = rep.returncode
        if rep.returncode not in (0, 1) or "Traceback" in rep.stderr or "interrupted" not in rep.stdout:
            rec["verdict"], rec["why"] = "WRONG", f"report of the interrupted bundle: exit {rep.returncode}"
    rec.pop("stderr")
    return rec


def _run_one(argv, case, cwd, env, t0) -> dict:
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
        preexec_fn=_default_signals,
    )
    timed_out = False
    finished_first = False
    if case["expect"] == "signal":
        time.sleep(case["when"])
        finished_first = proc.poll() is not None  # a busy machine made the run shorter than the wait
        sig = signal.SIGTERM if case["sig"] == "SIGTERM" else signal.SIGINT
        proc.send_signal(sig)
        if case["sig"] == "SIGINT2":
            time.sleep(0.3)
            proc.send_signal(sig)
    try:
        stdout, stderr = proc.communicate(timeout=case.get("timeout", 60))
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    first_err = next((ln for ln in lines if "error" in ln.lower()), lines[0] if lines else "")
    rec = dict(
        name=case["name"],
        argv=case["argv"],
        expect=case["expect"],
        rc=proc.returncode,
        traceback="Traceback" in stderr,
        stderr_lines=len(lines),
        first_error=first_err[:300],
        stdout_head=stdout[:300],
        timed_out=timed_out,
        seconds=round(time.monotonic() - t0, 1),
    )
    rec["verdict"], rec["why"] = classify(rec, case, stderr, stdout)
    if finished_first and proc.returncode == 0:
        rec["verdict"], rec["why"] = "OK", "the run ended before the signal was sent"
    if rec["verdict"] != "OK":
        rec["stderr_tail"] = stderr[-3000:]
    rec["stderr"] = stderr
    return rec


def classify(rec, case, stderr, stdout):
    if rec["traceback"]:
        return "WRONG", "traceback"
    if rec["timed_out"]:
        return "WRONG", "still running at the time limit"
    rc = rec["rc"]
    if case["expect"] == "signal" and case["sig"] != "SIGTERM" and rc == -signal.SIGINT:
        rc = 130  # a second Ctrl-C during the clean-up: killed by SIGINT, which a shell shows as 130
    if rc is not None and rc < 0:
        return "WRONG", f"died of signal {-rc}"
    if case["name"] in MISLEADING:
        return "MISLEADING", MISLEADING[case["name"]]
    if case.get("want") and case["want"] not in stdout + stderr:
        return "WRONG", f"does not say {case['want']!r}"
    if case.get("avoid") and case["avoid"] in stdout + stderr:
        return "MISLEADING", f"says {case['avoid']!r}"
    if case.get("rc") is not None:  # an exit status that is an answer (bisect's)
        return ("OK", "") if rc == case["rc"] else ("WRONG", f"exit {rc}, want {case['rc']}")
    if case["expect"] == "good":
        return ("OK", "") if rc == 0 else ("WRONG", f"exit {rc} for good input")
    if case["expect"] == "signal":
        want = 143 if case["sig"] == "SIGTERM" else 130
        if rc != want:
            return "WRONG", f"exit {rc}, want {want}"
        return "OK", ""
    if case["expect"] == "fail":
        return ("OK", "") if rc == 1 else ("WRONG", f"exit {rc}, want 1 (a failed cell)")
    if rc == 0:
        return "WRONG", "exit 0 for bad input"
    errs = [ln for ln in stderr.splitlines() if ln.strip()]
    # one error line, last; before it only teperf's own progress lines ("teperf: package under test: ...")
    one = [ln for ln in errs if ln.startswith("teperf: error: ")]
    info = all(ln.startswith(("teperf: ", "nightly: ", "backfill")) for ln in errs[:-1])
    if rc == 2 and len(one) == 1 and errs[-1] == one[0] and info:
        return "OK", "" if ";" in one[0] else "(no '; fix' part)"
    return "CHECK", f"exit {rc}, {len(errs)} stderr lines"


CLASS = {"OK": "clean", "MISLEADING": "misleading", "WRONG": "wrong", "CHECK": "check"}


def write_table(where: Path, results: list[dict]) -> None:
    """README.md: counts per class, then command, exit code, first line and class of every case."""
    where.mkdir(parents=True, exist_ok=True)
    keep = (
        "name",
        "argv",
        "expect",
        "rc",
        "traceback",
        "stderr_lines",
        "first_error",
        "seconds",
        "verdict",
        "fifth",
    )
    slim = [{k: r.get(k) for k in (*keep, "why")} for r in results]  # --json keeps the stderr tails
    (where / "results.json").write_text(json.dumps(slim, indent=0))
    classes = [REVIEWED.get(r["name"], (CLASS[r["verdict"]], r["why"])) for r in results]
    counts = {c: sum(k == c for k, _ in classes) for c in ("clean", "misleading", "wrong", "check")}

    def cell(text):
        return str(text).replace("|", "\\|").replace("\n", " ")[:160]

    lines = [
        "# A newcomer's pass, 2026-12-05 b (issue 46)",
        "",
        "`python benchmarks/newcomer_pass.py --teperf /tmp/nc-venv/bin/teperf --table DIR`, run from another",
        "directory against a non-editable install (`pip install .` in its own venv, torch 2.13.0 CPU) on",
        "the shared 2-core machine, with the pass's own `TEPERF_RUNTIME_DIR` (other teperf runs on the",
        "machine claim no core of its cases; the cases 'while every core is claimed' claim them all).",
        "clean: good input works, bad input is one `teperf: error:` line with its fix and a non-zero exit;",
        "misleading: a message that names a wrong cause or fix; wrong: exit 0 on bad input, a traceback, a",
        "wrong number, lost data or a hang. Cases marked (5th) are the fifth pass's (`--fifth` runs them).",
        "",
        f"**{len(results)} cases: " + ", ".join(f"{v} {k}" for k, v in counts.items() if v) + "**",
        "",
        "| # | case | command | exit | first line | class |",
        "|---|---|---|---|---|---|",
    ]
    for i, (r, (klass, why)) in enumerate(zip(results, classes), 1):
        cmd = "teperf " + " ".join(a if a and " " not in a else repr(a) for a in r["argv"])
        first = r["first_error"] or r["stdout_head"].split("\n")[0]
        name = r["name"] + (" (5th)" if r.get("fifth") else "")
        lines.append(
            f"| {i} | {cell(name)} | `{cell(cmd)}` | {r['rc']} | {cell(first)} | "
            f"{klass}{' (' + cell(why) + ')' if why and klass != 'clean' else ''} |"
        )
    (where / "README.md").write_text("\n".join(lines) + "\n")


# Read by hand after a run: CHECK cases that are clean (name -> (class, why)).
REVIEWED: dict[str, tuple[str, str]] = {}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--teperf", default=shutil.which("teperf") or "teperf")
    ap.add_argument("--json", default=None)
    ap.add_argument("--only", default=None, help="only the cases whose name holds one of A|B|...")
    ap.add_argument("--fifth", action="store_true", help="only the fifth pass's cases")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--table", default=None, help="write README.md (counts and the table) to this directory")
    args = ap.parse_args()
    beside = Path(args.teperf).parent / "python"
    TEPERF_PYTHON[0] = str(beside) if beside.exists() else sys.executable
    w = Path(tempfile.mkdtemp(prefix="teperf-newcomer-"))
    run_dir = Path(tempfile.mkdtemp(prefix="teperf-newcomer-cwd-"))
    world = make_world(w)
    todo = [
        c
        for c in cases(w, world["repo"])
        if not args.only or any(o in c["name"] for o in args.only.split("|"))
    ]
    todo = [c for c in todo if c.get("fifth") or not args.fifth]
    results = []
    for i, case in enumerate(todo, 1):
        rec = run_case(args.teperf, case, w, run_dir)
        rec["fifth"] = bool(case.get("fifth"))
        results.append(rec)
        mark = "" if rec["verdict"] == "OK" else f"  <-- {rec['verdict']} {rec['why']}"
        print(
            f"[{i:3}/{len(todo)}] rc={rec['rc']} lines={rec['stderr_lines']} {rec['seconds']:5}s "
            f"{rec['name']}: {rec['first_error'][:200]}{mark}",
            flush=True,
        )
    counts = {}
    for r in results:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    print(f"\n{len(results)} inputs: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.table:
        write_table(Path(args.table), results)
    os.chmod(w / "unreadable.toml", 0o644)
    shutil.rmtree(w, ignore_errors=True)
    shutil.rmtree(run_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
