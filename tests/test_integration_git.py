"""Integration: ``teperf compare BASE..HEAD`` on a fixture git repo, through the real CLI and real workers."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import schedules
from conftest import rows_by_module, run_cli
from gitfixture import make_fixture

from teperf.sides import cachedir

# Changes under 3 % count as "no change" here: these tests check that the right code runs on each side
# (a 200 us busy-wait on ~500 us is +40 %), not the engine's A/A calibration (tested with many cells
# elsewhere).
SMALL = [*schedules.SMALL, "--no-counters", "--min-effect", "3"]
AA = [*schedules.AA, "--no-counters", "--min-effect", "3"]
TINY = [*schedules.ONE_PAIR, "--no-counters", "--modules", "MLP"]

CONFIG = """\
backend = "torch"
device = "cpu"
recipes = ["fp32"]
shapes = [[8, 2, 32]]

[modules.MLP]
factory = "mypkg.blocks:make_mlp"
kwargs = { width = 32, depth = 12 }

[modules.Norm]
factory = "mypkg.blocks:make_norm"
kwargs = { width = 32 }
"""


@pytest.fixture
def fx(tmp_path):
    f = make_fixture(tmp_path)
    (tmp_path / "git.toml").write_text(CONFIG)
    f.env = {"PYTHONPATH": str(f.site), "TEPERF_CACHE": str(tmp_path / "cache")}
    return f


def compare(fx, spec, *args, results_dir, repo=None, env=None):
    return run_cli(
        "compare",
        spec,
        "--repo",
        repo or fx.repo,
        "--package",
        "mypkg",
        "--config",
        fx.root / "git.toml",
        *args,
        "--format",
        "json",
        "--results-dir",
        results_dir,
        env={**fx.env, **(env or {})},
        cwd=fx.root,
    )


# The planted 200 us spin is many times the noise of 6 pairs: its verdict is asserted. The unchanged
# cell's false rate (5 % by design) is benchmarks/calibration.py's, not asserted here.
@pytest.mark.statistical
def test_overlay_detects_planted_slowdown(fx, results_dir):
    # 6 pairs, not SMALL's 4: with t over 3 degrees of freedom a loaded 2-core VM could leave 0 inside
    res = compare(
        fx, "v0.1.0..main", "--strategy", "overlay", *SMALL, "--processes", "6",
        "--max-contended", "100",  # load's own verdict is tests/test_load.py's: here, whatever the VM's load
        results_dir=results_dir,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    rows = rows_by_module(res.stdout)
    mlp, norm = rows["MLP"], rows["Norm"]
    assert mlp["verdict"] == "slower", mlp
    # head busy-waits 200 us per forward. The interval must reach into 120..320 us, not the estimate: at 6
    # pairs on a loaded 2-core VM the estimate read +336 us once (a fresh clone's CI run, 2026-12-07); how
    # close a plant reads to its size is benchmarks/plant_truth.py's subject
    assert mlp["delta_us"] >= 120 and 0 < mlp["ci_low_us"] <= 320, mlp
    assert norm["verdict"] is not None and norm["n_pairs"] == 6, norm
    meta = json.loads(res.stdout)["meta"]
    head, base = meta["sides"]["head"], meta["sides"]["base"]
    assert head["sha"] == fx.head and base["sha"] == fx.base
    assert head["strategy"] == "overlay" and head["subject"] == "head: make_mlp busy-waits 200 us"
    assert base["ref"] == "v0.1.0" and head["ref"] == "main" and head["dirty"] is False
    assert head["installed_version"] == "0.1.0" and head["installed_commit"] == fx.base
    assert head["sys_path"][0].startswith(str(fx.root / "cache" / "overlays"))


# An A/A's false-verdict rate is benchmarks/calibration.py's; here, that both sides are one overlay.
def test_overlay_a_a_measures_one_tree_twice(fx, results_dir):
    # forked workers (one torch import per side): the subject is the sides, not how workers start
    res = compare(fx, "main..main", "--strategy", "overlay", *AA, *schedules.FORKED, results_dir=results_dir)
    assert res.returncode == 0, res.stderr
    rows = rows_by_module(res.stdout)
    assert rows and all(r["verdict"] is not None for r in rows.values()), rows
    sides = json.loads(res.stdout)["meta"]["sides"]
    assert sides["base"]["sha"] == sides["head"]["sha"] == fx.head
    assert sides["base"]["sys_path"] == sides["head"]["sys_path"]


def test_build_strategy_builds_each_side_once_and_reuses(fx, results_dir):
    build = shlex.join(fx.build_command())
    res = compare(
        fx,
        "v0.1.0..cpp",
        "--strategy",
        "build",
        "--build-command",
        build,
        *TINY,
        results_dir=results_dir / "1",
    )
    assert res.returncode == 0, res.stderr
    assert fx.builds_run() == 2  # base and cpp differ in a compiled source: one build each
    meta = json.loads(res.stdout)["meta"]
    hashes = {meta["sides"][s]["build_hash"] for s in ("base", "head")}
    assert len(hashes) == 2 and not meta["sides"]["head"]["build_reused"]
    mlp = rows_by_module(res.stdout)["MLP"]
    assert mlp["status"] == "ok", mlp
    # Each side ran its own commit's code: what its worker imported, not the timing (one pair of 2
    # trials cannot time head's 200 us spin against a 1-2 ms step on a loaded VM; CI once read head
    # 2041 us < base 2100 us). Timing a planted spin is test_overlay_detects_planted_slowdown's job.
    imported = json.loads(res.stdout)["imported"]
    for side, slow in (("base", False), ("head", True)):
        pkg = Path(imported[side]["packages"]["mypkg"]["path"])
        assert pkg == Path(meta["sides"][side]["overlay"]) / "mypkg", (side, pkg)
        assert f"SLOW = {slow}" in (pkg / "blocks.py").read_text(), side
    assert imported["base"]["packages"]["mypkg"]["hash"] != imported["head"]["packages"]["mypkg"]["hash"]

    res = compare(
        fx,
        "v0.1.0..cpp",
        "--strategy",
        "build",
        "--build-command",
        build,
        *TINY,
        results_dir=results_dir / "2",
    )
    assert res.returncode == 0, res.stderr
    assert fx.builds_run() == 2  # the second run reuses both builds
    meta = json.loads(res.stdout)["meta"]
    assert meta["sides"]["base"]["build_reused"] and meta["sides"]["head"]["build_reused"]
    assert {meta["sides"][s]["build_hash"] for s in ("base", "head")} == hashes


def test_overlay_refusal_and_bad_input_exit_2(fx, tmp_path, results_dir):
    # one line even where the other test process's runs hold every core (the shared-core note waits for the
    # measuring, which a refusal never reaches; a fresh clone's CI run, 2026-12-07)
    res = compare(fx, "main..cpp", "--strategy", "overlay", *TINY, results_dir=results_dir)
    assert res.returncode == 2
    assert "mypkg/csrc/op.cpp" in res.stderr and "--strategy build" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    res = compare(fx, "main..no-such-ref", *TINY, results_dir=results_dir)
    assert res.returncode == 2 and "no-such-ref" in res.stderr
    plain = tmp_path / "plain"
    plain.mkdir()
    res = compare(fx, "a..b", *TINY, repo=plain, results_dir=results_dir)
    assert res.returncode == 2 and "not inside a git repository" in res.stderr, res.stderr
    res = compare(
        fx, "v0.1.0..main", "--strategy", "overlay", *TINY, env={"PYTHONPATH": ""}, results_dir=results_dir
    )
    assert res.returncode == 2 and "mypkg is not installed" in res.stderr, res.stderr
    assert not results_dir.exists() or not any(results_dir.iterdir())  # nothing measured


def test_cache_cli(fx):
    res = run_cli("cache", "list", "--format", "json", env=fx.env, cwd=fx.root)
    assert res.returncode == 0 and json.loads(res.stdout)["entries"] == []
    res = run_cli("cache", "clear", env=fx.env, cwd=fx.root)
    assert res.returncode == 0 and "removed 0 entries" in res.stdout


EXT_TINY = [*TINY[:-2], "--modules", "Block"]
EXT_CONFIG = """\
backend = "torch"
device = "cpu"
recipes = ["fp32"]
shapes = [[8, 2, 32]]

[modules.Block]
factory = "extpkg.blocks:make_block"
kwargs = { width = 32 }

[modules.Plain]
factory = "extpkg.blocks:make_plain"
kwargs = { width = 32 }
"""


def ext_fixture_compare(fx, tmp_path, results_dir, env):
    """``teperf compare`` on the extension fixture package, JSON out, one results directory per call."""

    def compare(spec, *args, out):
        return run_cli(
            "compare",
            spec,
            "--repo",
            fx.repo,
            "--package",
            "extpkg",
            "--layout",
            fx.layout,
            "--config",
            tmp_path / "ext.toml",
            "--jobs",
            "2",
            *args,
            "--format",
            "json",
            "--results-dir",
            results_dir / out,
            env=env,
            cwd=tmp_path,
        )

    return compare


@pytest.mark.statistical  # a real build, then a planted 200 us spin: many times the noise
def test_extension_tier_builds_measures_and_reuses_the_cache(tmp_path, results_dir):
    """A real torch.utils.cpp_extension build of each side's C++ (head spins 200 us in it), over an installed
    core."""
    from gitfixture import make_ext_fixture

    fx = make_ext_fixture(tmp_path)
    (tmp_path / "ext.toml").write_text(EXT_CONFIG)
    env = {"PYTHONPATH": str(fx.site), "TEPERF_CACHE": str(tmp_path / "cache")}

    ext_compare = ext_fixture_compare(fx, tmp_path, results_dir, env)

    res = ext_compare("v0.1.0..main", *SMALL, "--max-contended", "100", out="1")  # whatever the VM's load
    assert res.returncode == 0, res.stderr
    assert "strategy extension: the extension's sources differ (extpkg/ext/csrc/ext.cpp)" in res.stderr
    assert res.stderr.count("building the extpkg extension from its tree") == 2
    # base's and head's extensions build at the same time (issue 34), each with half of --jobs 2, one ccache:
    # the build stamps overlap (no wall-clock threshold)
    building = [
        line for line in res.stderr.splitlines() if "building the extpkg extension from its tree" in line
    ]
    assert all("1 job" in line for line in building), building
    rows = rows_by_module(res.stdout)
    assert rows["Block"]["verdict"] == "slower" and 120 <= rows["Block"]["delta_us"] <= 320, rows["Block"]
    assert rows["Plain"]["verdict"] is not None, rows["Plain"]  # its false rate: benchmarks/calibration.py
    sides = json.loads(res.stdout)["meta"]["sides"]
    assert {sides[s]["strategy"] for s in sides} == {"extension"}
    assert not sides["base"]["ext_reused"] and not sides["head"]["ext_reused"]
    assert sides["base"]["ext_key"] != sides["head"]["ext_key"]
    ext_dir = cachedir.kind_dir("ext", tmp_path / "cache")
    metas = [cachedir.read_json(ext_dir / sides[s]["ext_key"] / "build.json") for s in ("base", "head")]
    assert all(m["ok"] and m["env"]["MAX_JOBS"] == "1" for m in metas), metas  # 2 jobs split in two
    first, second = sorted(metas, key=lambda m: m["started_at"])
    assert second["started_at"] < first["ended_at"], metas  # the two builds overlap in time
    shadow = sides["head"]["sys_path"][0]
    built = sides["head"]["overlay_own_files"]
    assert len(built) == 1 and built[0].startswith("_lib/extpkg_ext")
    assert os.readlink(f"{shadow}/extpkg/{built[0]}").startswith(sides["head"]["ext_prefix"])
    assert not os.path.exists(
        f"{shadow}/extpkg/_lib/extpkg_ext.cpython-fake.so"
    )  # the installed one is replaced
    assert os.readlink(f"{shadow}/extpkg/_lib/libextpkg_core.so") == str(
        fx.site / "extpkg/_lib/libextpkg_core.so"
    )

    res = ext_compare("v0.1.0..main", *EXT_TINY, out="2")  # the second run builds nothing
    assert res.returncode == 0, res.stderr
    assert (
        "building the" not in res.stderr and res.stderr.count("extension reused from the cache") == 4
    )  # plan+log
    sides2 = json.loads(res.stdout)["meta"]["sides"]
    assert sides2["base"]["ext_reused"] and sides2["head"]["ext_reused"]
    assert [sides2[s]["ext_key"] for s in ("base", "head")] == [sides[s]["ext_key"] for s in ("base", "head")]
    listed = json.loads(run_cli("cache", "list", "--format", "json", env=env, cwd=tmp_path).stdout)["entries"]
    assert sorted(e["key"] for e in listed if e["kind"] == "ext") == sorted(
        sides[s]["ext_key"] for s in sides
    )

    # an extension that needs a core symbol the installed core lacks: one line naming --strategy build
    res = ext_compare("v0.1.0..badsym", *EXT_TINY, out="3")
    assert res.returncode == 2
    last = res.stderr.strip().splitlines()[-1]
    assert "undefined symbol" in last and "extpkg_core_new" in last and "--strategy build" in last, res.stderr
    assert res.stderr.count("building the extpkg extension") == 1  # base's came from the cache


def test_plan_only_and_bare_repo_through_the_cli(fx, tmp_path, results_dir):
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(fx.repo), str(bare)], check=True)
    res = compare(fx, "main..cpp", "--plan", results_dir=results_dir, repo=bare)
    assert res.returncode == 0, res.stderr
    lines = res.stderr.strip().splitlines()
    assert lines[1] == "teperf: strategy build: compiled sources differ (mypkg/csrc/op.cpp)", lines
    assert lines[2].startswith("teperf:   base: ") and lines[3].startswith("teperf:   head: ")
    # --format json: the plan, on stdout; nothing built, nothing measured
    assert json.loads(res.stdout)["plan"]["spec"] == "main..cpp" and not results_dir.exists()
    res = run_cli("compare", "--plan", "--base-python", "python3", env=fx.env, cwd=fx.root)
    assert res.returncode == 2 and "--plan needs git refs" in res.stderr


@pytest.mark.statistical  # a planted 200 us spin in the core: many times the noise
def test_core_strategy_builds_the_core_incrementally_in_one_tree_and_shares_ccache(tmp_path, results_dir):
    """A real CMake/Ninja build of each side's core library (head's spins 200 us per call) and of the
    extension, over an installed package: auto picks core, head rebuilds only what its change reaches,
    a second run builds nothing, and a cleared build cache comes back from ccache."""
    from gitfixture import make_ext_fixture

    if not (shutil.which("cmake") and shutil.which("ninja")):
        pytest.skip("needs cmake and ninja")
    fx = make_ext_fixture(tmp_path)
    (tmp_path / "ext.toml").write_text(EXT_CONFIG)
    env = {"PYTHONPATH": str(fx.site), "TEPERF_CACHE": str(tmp_path / "cache")}

    core_compare = ext_fixture_compare(fx, tmp_path, results_dir, env)

    res = core_compare("v0.1.0..corespin", *SMALL, "--max-contended", "100", out="1")
    assert res.returncode == 0, res.stderr
    assert "strategy core: the core library's sources differ (extpkg/core/core.c)" in res.stderr
    assert "full core build with 2 jobs" in res.stderr and "incremental core build in" in res.stderr  # plan
    rows = rows_by_module(res.stdout)
    assert rows["Block"]["verdict"] == "slower" and 120 <= rows["Block"]["delta_us"] <= 320, rows["Block"]
    assert rows["Plain"]["verdict"] is not None, rows["Plain"]  # its false rate: benchmarks/calibration.py
    sides = json.loads(res.stdout)["meta"]["sides"]
    base, head = sides["base"], sides["head"]
    assert base["strategy"] == head["strategy"] == "core"
    # one tree: base configured and built it all (2 objects + the link), head recompiled core.c and relinked
    assert base["core_steps"] == [3, 3] and head["core_steps"] == [2, 3], (
        base["core_steps"],
        head["core_steps"],
    )
    assert base["core_key"] != head["core_key"] and base["ext_key"] == head["ext_key"]
    assert not base["ext_reused"] and head["ext_reused"]  # the extension's inputs are the same
    assert re.search(r"\d+\.\d+", base["core_compilers"]["CMAKE_C_COMPILER"]), base[
        "core_compilers"
    ]  # version
    assert base["core_flags"].get("CMAKE_BUILD_TYPE") == "Release"
    assert base["core_ccache"]["misses"] >= 2  # the compiler cache was used (and was empty)
    shadow = head["sys_path"][0]
    assert os.readlink(f"{shadow}/extpkg/_lib/libextpkg_core.so") == f"{head['core_lib']}/libextpkg_core.so"
    assert os.readlink(f"{shadow}/extpkg/_lib/libextpkg_core.so") != os.readlink(
        f"{sides['base']['sys_path'][0]}/extpkg/_lib/libextpkg_core.so"
    )

    res = core_compare("v0.1.0..corespin", *EXT_TINY, out="2")  # the second run builds nothing
    assert res.returncode == 0, res.stderr
    assert "building the" not in res.stderr, res.stderr
    assert res.stderr.count("core reused from the cache") == 2  # the plan, per side
    assert res.stderr.count("core library reused from the cache") == 2, res.stderr  # the log, per side
    sides2 = json.loads(res.stdout)["meta"]["sides"]
    assert sides2["base"]["core_reused"] and sides2["head"]["core_reused"]

    # the built libraries and the Ninja tree gone: the rebuild compiles nothing (ccache hits)
    cleared = run_cli("cache", "clear", "cores", "buildtrees", env=env, cwd=tmp_path)
    assert cleared.returncode == 0, cleared.stderr
    res = core_compare("v0.1.0..corespin", *EXT_TINY, out="3")
    assert res.returncode == 0, res.stderr
    sides3 = json.loads(res.stdout)["meta"]["sides"]
    assert not sides3["base"]["core_reused"] and sides3["base"]["core_steps"] == [3, 3]
    hits = sides3["base"]["core_ccache"]  # both objects (and CMake's compiler check) from the cache
    assert hits["misses"] == 0 and hits["hits"] >= 2, hits
    listed = json.loads(run_cli("cache", "list", "--format", "json", env=env, cwd=tmp_path).stdout)["entries"]
    assert {e["kind"] for e in listed} >= {"cores", "buildtrees", "ccache", "ext"}
