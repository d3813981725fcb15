"""Sides from git refs: ref parsing, trees, overlay decision and shadow trees, builds, cache command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gitfixture import commit, git, make_fixture

from teperf.errors import TeperfError
from teperf.sides import buildrun, cachedir, changes, gitrepo
from teperf.sides import installed as installed_mod
from teperf.sides.git import plan_sides
from teperf.sides.gitrepo import parse_spec, resolve_spec
from teperf.sides.layout import GENERIC, TE_LAYOUT
from teperf.sides.strategies.build import compiled_hash
from teperf.sides.target import Refused


@pytest.fixture
def fx(tmp_path, monkeypatch):
    f = make_fixture(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(f.site))
    monkeypatch.setenv("TEPERF_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("TEPERF_ALLOW_DIRTY", raising=False)
    monkeypatch.delenv("TEPERF_BUILD_GLOBS", raising=False)
    return f


def quiet(_msg):
    pass


def sides(fx, spec, **kw):
    kw.setdefault("package", "mypkg")
    kw.setdefault("log", quiet)
    return plan_sides(spec, repo=str(fx.repo), **kw).make()


def overlay_basis(fx, a, b):
    """What the overlay strategy checked for a..b: the installed build and the known .py files."""
    from teperf.sides.gitrepo import commit_info
    from teperf.sides.strategies.overlay import Overlay
    from teperf.sides.target import Pair, Target

    target = Target(repo=fx.repo, package="mypkg", package_dir="mypkg", layout=GENERIC, log=quiet)
    pair = Pair(
        base=commit_info(fx.repo, a, "a"),
        head=commit_info(fx.repo, b, "b"),
        changes=changes.diff(fx.repo, a, b, GENERIC, "mypkg"),
    )
    strategy = Overlay(target, pair)
    strategy.plan()
    return strategy.basis, pair


def run_py(side, code, env=None):
    """Run code in side's interpreter the way the worker sets sys.path; return stdout."""
    prelude = f"import sys; sys.path[0:0] = {list(side.sys_path)!r}\n"
    proc = subprocess.run(
        [side.python, "-c", prelude + code],
        capture_output=True,
        text=True,
        cwd="/",
        env={**os.environ, **(env or {}), **side.env},
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


# ------------------------------------------------------------------ parsing and resolving


@pytest.mark.parametrize(
    "text, base, head, mode",
    [
        ("main..topic", "main", "topic", "range"),
        ("main...topic", "main", "topic", "merge-base"),
        ("v1.0..HEAD", "v1.0", "HEAD", "range"),
        ("abc1234", "abc1234^1", "abc1234", "parent"),
        ("HEAD", "HEAD^1", "HEAD", "parent"),
        ("..topic", "HEAD", "topic", "range"),
        ("main..", "main", "HEAD", "range"),
        ("feature/x...origin/main", "feature/x", "origin/main", "merge-base"),
    ],
)
def test_parse_spec(text, base, head, mode):
    spec = parse_spec(text)
    assert (spec.base_ref, spec.head_ref, spec.mode) == (base, head, mode)


@pytest.mark.parametrize("text", ["", "  ", "a..b..c", "..", "..."])
def test_parse_spec_rejects(text):
    with pytest.raises(TeperfError):
        parse_spec(text)


def test_resolve_forms(fx):
    r = resolve_spec("v0.1.0..main", fx.repo)
    assert (r.base.sha, r.head.sha) == (fx.base, fx.head)
    assert r.head.subject == "head: make_mlp busy-waits 200 us" and r.base.ref == "v0.1.0"
    assert len(r.base.short_sha) >= 7 and fx.base.startswith(r.base.short_sha)
    r = resolve_spec(f"{fx.base[:8]}..HEAD", fx.repo)
    assert (r.base.sha, r.head.sha) == (fx.base, fx.head)
    r = resolve_spec("HEAD", fx.repo)  # single ref: base is its first parent
    assert (r.base.sha, r.head.sha, r.spec.mode) == (fx.base, fx.head, "parent")
    r = resolve_spec("cpp~1..cpp", fx.repo)
    assert (r.base.sha, r.head.sha) == (fx.head, fx.cpp)
    r = resolve_spec("topic...cpp", fx.repo)  # merge-base of topic and cpp is base
    assert (r.base.sha, r.head.sha) == (fx.base, fx.cpp)
    assert r.base.ref.startswith("merge-base(")
    r = resolve_spec("main..main", fx.repo)
    assert r.base.sha == r.head.sha == fx.head
    # a subdirectory of the repo works as --repo
    assert resolve_spec("HEAD", fx.repo / "mypkg").repo == fx.repo


def test_bad_ref(fx):
    with pytest.raises(TeperfError) as exc:
        resolve_spec("main..no-such-branch", fx.repo)
    assert "no-such-branch" in str(exc.value) and "does not name a commit" in str(exc.value)
    with pytest.raises(TeperfError, match="has no parent"):
        resolve_spec(fx.base, fx.repo)  # the root commit
    with pytest.raises(TeperfError, match="not a valid ref"):
        resolve_spec("--output=x..main", fx.repo)


def test_git_words_are_kept(fx, tmp_path):
    # issue 59: an ambiguous name was taken silently, a date past the reflog answered with its oldest entry,
    # :/text refused, and a shallow clone's missing parent had no hint to fetch it
    git(fx.repo, "tag", "topic", fx.base)  # a tag named as the branch
    with pytest.raises(TeperfError) as info:
        gitrepo.resolve(fx.repo, "topic", what="head ref")
    assert (
        "'topic' is ambiguous" in str(info.value) and "refs/heads/topic or refs/tags/topic" in info.value.fix
    )
    assert gitrepo.resolve(fx.repo, "refs/heads/topic") != fx.base
    with pytest.raises(TeperfError, match="older than its reflog .git: log for 'main' only goes back to"):
        gitrepo.resolve(fx.repo, "main@{10 years ago}")
    assert gitrepo.resolve(fx.repo, ":/busy-waits") == fx.head
    assert resolve_spec(":/mypkg blocks..:/busy-waits", str(fx.repo)).base.sha == fx.base
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{fx.repo}", str(shallow))
    with pytest.raises(TeperfError) as info:
        resolve_spec("HEAD", str(shallow))
    assert (
        "has no parent commit" in str(info.value)
        and "this clone is shallow: fetch the parent" in info.value.fix
    )


def test_non_repo(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(TeperfError, match="not inside a git repository"):
        plan_sides("a..b", repo=str(plain), package="mypkg", log=quiet).make()
    with pytest.raises(TeperfError, match="no such directory"):
        plan_sides("a..b", repo=str(tmp_path / "missing"), package="mypkg", log=quiet).make()


def test_errors_are_one_line_exit_2(fx):
    with pytest.raises(TeperfError) as exc:
        plan_sides("main..nope", repo=str(fx.repo), package="mypkg", log=quiet).make()
    assert "\n" not in exc.value.one_line() and exc.value.exit_code == 2


# ------------------------------------------------------------------ trees


def test_materialize_is_cached_and_leaves_the_checkout_alone(fx, tmp_path):
    git_dir = fx.repo / ".git"
    status_before = git(fx.repo, "status", "--porcelain")  # (this refreshes the index itself)
    index_before = (git_dir / "index").stat().st_mtime_ns
    tree = gitrepo.materialize(fx.repo, fx.head, cache_dir=tmp_path / "c")
    assert tree == tmp_path / "c" / "trees" / fx.head
    assert (tree / "mypkg" / "new.py").exists() and not (tree / "mypkg" / "old.py").exists()
    assert (tree / "mypkg" / "blocks.py").read_text() == (fx.repo / "mypkg" / "blocks.py").read_text()
    assert not (tree / ".git").exists()
    marker = json.loads((tree / ".teperf.json").read_text())
    assert marker["sha"] == fx.head and marker["complete"]
    (tree / "sentinel").write_text("x")  # a second call reuses the tree rather than re-extracting it
    assert gitrepo.materialize(fx.repo, fx.head, cache_dir=tmp_path / "c") == tree
    assert (tree / "sentinel").exists()
    assert (git_dir / "index").stat().st_mtime_ns == index_before
    assert git(fx.repo, "status", "--porcelain") == status_before
    assert not (git_dir / "worktrees").exists()


@pytest.mark.parametrize("bare", [False, True])
def test_materialize_keeps_export_ignored_files_as_committed(fx, tmp_path, bare):
    # issue 59: git archive dropped export-ignore files (the side failed with a circular import) and
    # rewrote export-subst ones; a side is the commit's files as committed
    (fx.repo / ".gitattributes").write_text("mypkg/new.py export-ignore\nmypkg/stamp.py export-subst\n")
    (fx.repo / "mypkg" / "stamp.py").write_text('SHA = "$Format:%H$"\n')
    sha = commit(fx.repo, "mark files for export")
    repo = fx.repo
    if bare:
        repo = tmp_path / "bare.git"
        git(tmp_path, "clone", "-q", "--bare", str(fx.repo), str(repo))
    tree = gitrepo.materialize(repo, sha, cache_dir=tmp_path / "c")
    assert (tree / "mypkg" / "new.py").read_text() == (fx.repo / "mypkg" / "new.py").read_text()
    assert (tree / "mypkg" / "stamp.py").read_text() == 'SHA = "$Format:%H$"\n'
    only = tmp_path / "only"  # one path (a partial mirror's fallback) is taken as committed too
    only.mkdir()
    gitrepo._extract_archive(repo, sha, only, ("mypkg",))
    assert (only / "mypkg" / "new.py").exists() and not (only / ".gitattributes").exists()


def test_materialize_with_submodule(fx, tmp_path):
    sub = tmp_path / "subrepo"
    sub.mkdir()
    git(sub, "init", "-q", "-b", "main")
    (sub / "kernel.cu").write_text("// kernel\n")
    git(sub, "add", "-A")
    git(sub, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "sub")
    git(fx.repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "3rdparty/sub")
    git(fx.repo, "commit", "-q", "-m", "add submodule")
    sha = git(fx.repo, "rev-parse", "HEAD")
    tree = gitrepo.materialize(fx.repo, sha, cache_dir=tmp_path / "c", submodules=True)
    assert (tree / "3rdparty" / "sub" / "kernel.cu").read_text() == "// kernel\n"
    # a submodule bump is a build input: overlay refuses
    inputs = [
        e.path
        for e in gitrepo.diff_entries(fx.repo, fx.head, sha)
        if changes.is_build_input(e.path, "mypkg", e.submodule)
    ]
    assert inputs == ["3rdparty/sub"]  # .gitmodules alone is not


def test_find_package_dir(fx):
    assert gitrepo.find_package_dir(fx.repo, fx.head, "mypkg") == "mypkg"
    assert gitrepo.find_package_dir(fx.repo, fx.head, "nothere") is None


# ------------------------------------------------------------------ dirty work tree


def test_dirty_tree_matters_only_for_the_checked_out_commit(fx):
    (fx.repo / "mypkg" / "blocks.py").write_text("# uncommitted edit\n")
    with pytest.raises(TeperfError, match="uncommitted changes") as exc:
        sides(fx, "HEAD", strategy="overlay")
    assert "--allow-dirty" in str(exc.value) and "mypkg/blocks.py" in str(exc.value)
    base, head = sides(fx, "HEAD", strategy="overlay", allow_dirty=True)
    assert head.description["dirty"] is True and base.description["dirty"] is False
    # a comparison of other commits does not care
    base, head = sides(fx, "topic...cpp", strategy="build", build_command=fx.build_command())
    assert not head.description["dirty"]


def test_dirty_outside_the_package_does_not_matter(fx, monkeypatch):
    (fx.repo / "README.md").write_text("edited\n")
    base, head = sides(fx, "HEAD", strategy="overlay")
    assert head.description["dirty"] is False
    (fx.repo / "setup.py").write_text("# a build input\n")
    git(fx.repo, "add", "setup.py")  # staged counts too
    with pytest.raises(TeperfError, match="setup.py"):
        sides(fx, "HEAD", strategy="overlay")
    monkeypatch.setenv("TEPERF_ALLOW_DIRTY", "1")
    assert sides(fx, "HEAD", strategy="overlay")[1].description["dirty"] is True


# ------------------------------------------------------------------ the overlay decision


@pytest.mark.parametrize(
    "path, expected",
    [
        ("mypkg/blocks.py", False),
        ("mypkg/sub/new.py", False),
        ("mypkg/README.md", False),
        ("mypkg/_table.json", True),
        ("mypkg/csrc/op.cpp", True),
        ("mypkg/pytorch/setup.py", True),
        ("setup.py", True),
        ("pyproject.toml", True),
        ("build_tools/utils.py", True),
        ("3rdparty/cutlass", True),
        ("CMakeLists.txt", True),
        ("docs/index.rst", False),
        ("docs/conf.py", False),
        ("tests/pytorch/test_x.py", False),
        ("tests/cpp/test.cu", False),
        ("tests/CMakeLists.txt", False),
        ("othersrc/common/gemm.cu", True),
        ("csrc/x.cu", True),
        ("examples/run.sh", False),
        (".github/workflows/ci.yml", False),
        ("README.md", False),
        ("LICENSE", False),
        ("tools/gen.sh", True),
    ],
)
def test_is_build_input(path, expected):
    assert changes.is_build_input(path, "mypkg") is expected


def test_version_commit():
    assert installed_mod.version_commit("2.20.0.dev0+d0067d0") == "d0067d0"
    assert installed_mod.version_commit("1.2+gabcdef12") == "abcdef12"
    assert installed_mod.version_commit("1.2+git.abcdef12") == "abcdef12"
    assert installed_mod.version_commit("2.20.2") is None
    assert installed_mod.version_commit("2.1+cu121") is None


def test_overlay_plan_python_only(fx):
    basis, pair = overlay_basis(fx, fx.base, fx.head)
    assert basis.installed.location == fx.site / "mypkg"
    assert basis.installed.version == "0.1.0" and basis.installed.in_site_dir is False
    assert basis.commit == fx.base and "tag v0.1.0" in basis.check
    assert set(pair.changes.paths(changes.PYTHON)) == {"mypkg/blocks.py", "mypkg/old.py", "mypkg/new.py"}
    assert {"old.py", "new.py", "blocks.py", "__init__.py"} <= basis.known_py


def test_overlay_refuses_non_python_change(fx):
    with pytest.raises(Refused) as exc:
        sides(fx, "main..cpp", strategy="overlay")
    text = str(exc.value)
    assert "mypkg/csrc/op.cpp" in text and "--strategy build" in text
    # the installed build's commit is checked too: installed = base (tag), head = cpp differs from it
    with pytest.raises(Refused, match="installed mypkg 0.1.0 was built from"):
        overlay_basis(fx, fx.cpp, fx.cpp)


def test_overlay_checks_plus_sha_version(fx):
    dist = fx.site / "mypkg-0.1.0.dist-info" / "METADATA"
    dist.write_text(f"Metadata-Version: 2.1\nName: mypkg\nVersion: 0.1.0+{fx.cpp[:7]}\n")
    basis, _ = overlay_basis(fx, fx.cpp, fx.cpp)
    assert basis.commit == fx.cpp and basis.check.startswith("verified")
    with pytest.raises(Refused, match="built from"):
        overlay_basis(fx, fx.base, fx.head)
    dist.write_text("Metadata-Version: 2.1\nName: mypkg\nVersion: 0.1.0+deadbee\n")
    basis, _ = overlay_basis(fx, fx.base, fx.head)
    assert basis.commit is None and basis.check.startswith("unverified")


def test_missing_installed_package(fx, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(fx.root / "empty"))
    with pytest.raises(Refused, match="mypkg is not installed") as exc:
        sides(fx, "v0.1.0..main", strategy="overlay")
    assert "--strategy build" in str(exc.value)
    # auto: with nothing installed, a package with compiled sources is built ...
    messages = []
    base, head = sides(
        fx, "topic..cpp", strategy="auto", build_command=fx.build_command(), log=messages.append
    )
    assert head.description["strategy"] == "build" and "mypkg/csrc/op.cpp" in head.description["tier_reason"]
    # ... and one with nothing to build runs from its trees (path)
    base, head = sides(fx, "v0.1.0..main", strategy="auto", log=messages.append)
    assert head.description["strategy"] == "path"
    assert any(m.startswith("strategy path: the package has nothing to build") for m in messages), messages


def test_wrong_strategy_and_package(fx):
    with pytest.raises(TeperfError, match="unknown strategy"):
        sides(fx, "HEAD", strategy="magic")
    with pytest.raises(TeperfError, match="takes no git refs"):
        sides(fx, "HEAD", strategy="env")
    with pytest.raises(TeperfError, match="no nothere/__init__.py"):
        sides(fx, "HEAD", package="nothere")


# ------------------------------------------------------------------ the shadow trees


def test_overlay_sides(fx, tmp_path):
    base, head = sides(fx, "v0.1.0..main", strategy="overlay")
    assert (base.label, head.label) == ("base", "head")
    d = head.description
    assert d["sha"] == fx.head and d["short_sha"] == fx.head[: len(d["short_sha"])]
    assert d["subject"] == "head: make_mlp busy-waits 200 us"
    assert d["ref"] == "main" and d["strategy"] == "overlay" and d["dirty"] is False
    assert d["installed_version"] == "0.1.0" and d["installed_commit"] == fx.base
    assert Path(d["tree"]) == tmp_path / "cache" / "trees" / fx.head
    assert base.description["ref"] == "v0.1.0"
    assert json.dumps(head.to_meta())  # bundle metadata must be JSON

    root = Path(head.sys_path[0])
    shadow = root / "mypkg"
    assert root.parent == tmp_path / "cache" / "overlays"
    assert sorted(p.name for p in root.iterdir()) == [".teperf.json", "mypkg"]  # no dist-info/egg-info
    assert not (shadow / "blocks.py").is_symlink() and "SLOW = True" in (shadow / "blocks.py").read_text()
    assert (shadow / "_table.json").is_symlink()
    assert os.readlink(shadow / "_table.json") == str(fx.site / "mypkg" / "_table.json")
    assert (shadow / "_native.so").is_symlink()
    assert (shadow / "new.py").exists() and not (shadow / "old.py").exists()  # added / deleted
    assert (shadow / "_version_gen.py").is_symlink()  # generated at install, not in git: kept
    assert head.description["overlay_deleted_py"] == ["old.py"]
    base_shadow = Path(base.sys_path[0]) / "mypkg"
    assert (base_shadow / "old.py").exists() and not (base_shadow / "new.py").exists()
    assert "SLOW = False" in (base_shadow / "blocks.py").read_text()

    probe = (
        "import importlib.metadata as md, mypkg, mypkg.blocks as b\n"
        "print(mypkg.__file__, mypkg.DATA['origin'], b.SLOW, md.version('mypkg'))"
    )
    out = run_py(head, probe).split()
    assert out[0] == str(shadow / "__init__.py") and out[1:] == ["installed", "True", "0.1.0"]
    out = run_py(base, probe).split()
    assert out[1:] == ["installed", "False", "0.1.0"]

    # a second call reuses the shadow trees
    (shadow / "sentinel").write_text("x")
    _, head2 = sides(fx, "v0.1.0..main", strategy="overlay")
    assert head2.sys_path == head.sys_path and (shadow / "sentinel").exists()


def test_overlay_rebuilt_when_installation_changes(fx):
    _, head = sides(fx, "v0.1.0..main", strategy="overlay")
    (fx.site / "mypkg" / "_extra.dat").write_bytes(b"new")
    _, head2 = sides(fx, "v0.1.0..main", strategy="overlay")
    assert head2.sys_path != head.sys_path
    assert (Path(head2.sys_path[0]) / "mypkg" / "_extra.dat").is_symlink()


def test_overlay_in_place_layout_links_sibling_libraries(fx, tmp_path, monkeypatch):
    # an editable/in-place install: compiled parts next to the package directory, not in site-packages
    checkout = tmp_path / "checkout"
    (checkout / "mypkg").mkdir(parents=True)
    for name in ("__init__.py", "blocks.py", "_table.json"):
        (checkout / "mypkg" / name).write_bytes((fx.site / "mypkg" / name).read_bytes())
    (checkout / "libmypkg.so").write_bytes(b"\x7fELF core")
    (checkout / "mypkg_torch.cpython-311.so").write_bytes(b"\x7fELF ext")
    (checkout / "unrelated.so").write_bytes(b"x")
    monkeypatch.setenv("PYTHONPATH", str(checkout))
    _, head = sides(fx, "v0.1.0..main", strategy="overlay")
    root = Path(head.sys_path[0])
    assert sorted(p.name for p in root.iterdir() if p.name.endswith(".so")) == [
        "libmypkg.so",
        "mypkg_torch.cpython-311.so",
    ]
    assert os.readlink(root / "libmypkg.so") == str(checkout / "libmypkg.so")


def test_a_a_overlay_is_one_tree(fx):
    base, head = sides(fx, "main..main", strategy="overlay")
    assert base.sys_path == head.sys_path and base.description["sha"] == head.description["sha"]


# ------------------------------------------------------------------ builds


def test_build_once_per_compiled_hash_and_reused(fx):
    base, head = sides(fx, "v0.1.0..main", strategy="build", build_command=fx.build_command())
    assert fx.builds_run() == 1  # base and head differ only in .py: one build serves both
    assert base.description["build_hash"] == head.description["build_hash"]
    assert {base.description["build_reused"], head.description["build_reused"]} == {False, True}
    prefix = Path(head.description["build_prefix"])
    assert head.sys_path[1] == str(prefix) and (prefix / "mypkg" / "_built_marker.txt").exists()
    shadow = Path(head.sys_path[0]) / "mypkg"
    assert "SLOW = True" in (shadow / "blocks.py").read_text()
    assert (shadow / "_built_marker.txt").is_symlink() and not (shadow / "old.py").exists()
    assert "SLOW = False" in (Path(base.sys_path[0]) / "mypkg" / "blocks.py").read_text()
    out = run_py(
        head,
        "import importlib.metadata as md, mypkg.blocks as b; print(b.SLOW, md.version('mypkg'))",
        env={"PYTHONPATH": ""},
    )
    assert out.split() == ["True", "0.1.0"]
    log_text = Path(head.description["build_log"]).read_text()
    assert "building in" in log_text and "done" in log_text
    workdir = Path(head.description["build_workdir"])  # one persistent build directory for the repo
    assert (
        workdir.parent.parent == fx.root / "cache" / "buildtrees" and (workdir / "mypkg" / "old.py").exists()
    )

    # a second run reuses the cache; a non-.py change needs its own build
    base2, head2 = sides(fx, "v0.1.0..main", strategy="build", build_command=fx.build_command())
    assert fx.builds_run() == 1 and base2.description["build_reused"] and head2.description["build_reused"]
    base3, head3 = sides(fx, "main..cpp", strategy="build", build_command=fx.build_command())
    assert fx.builds_run() == 2
    assert base3.description["build_hash"] == head.description["build_hash"]
    assert head3.description["build_hash"] != head.description["build_hash"]
    entries = {e.key: e for e in cachedir.entries(kinds=("builds",))}
    assert len(entries) == 2 and all(e.complete for e in entries.values())
    # both builds ran in the same directory: the second one found the first one's outputs there
    assert set(fx.counter.read_text().splitlines()) == {str(workdir)}
    assert head3.description["build_workdir"] == str(workdir)
    assert (workdir / "mypkg" / "csrc" / "op.cpp").exists() and not (workdir / "mypkg" / "old.py").exists()


def test_auto_picks_build_for_non_python_change(fx):
    messages = []
    base, head = sides(fx, "main..cpp", build_command=fx.build_command(), log=messages.append)
    assert head.description["strategy"] == "build" and "mypkg/csrc/op.cpp" in head.description["tier_reason"]
    assert fx.builds_run() == 2
    base, head = sides(fx, "v0.1.0..main", build_command=fx.build_command())
    assert head.description["strategy"] == "overlay" and fx.builds_run() == 2


def test_build_failure_shows_log_tail_and_is_retried(fx, monkeypatch):
    monkeypatch.setenv("FIXTURE_BUILD_FAIL", "1")
    messages = []
    with pytest.raises(buildrun.BuildFailed) as exc:
        sides(fx, "v0.1.0..main", strategy="build", build_command=fx.build_command(), log=messages.append)
    assert "failed with exit 3" in str(exc.value) and "\n" not in exc.value.one_line()
    assert exc.value.log_path.exists() and "compiler exploded" in exc.value.tail
    assert any("compiler exploded" in m for m in messages)
    monkeypatch.delenv("FIXTURE_BUILD_FAIL")
    sides(fx, "v0.1.0..main", strategy="build", build_command=fx.build_command())
    assert fx.builds_run() == 2


def test_build_that_installs_nothing_fails(fx):
    with pytest.raises(buildrun.BuildFailed, match="produced no package"):
        sides(fx, "v0.1.0..main", strategy="build", build_command=[sys.executable, "-c", "pass"])


def test_compiled_hash_globs(fx):
    h1, n1 = compiled_hash(fx.repo, fx.head, package_dir="mypkg")
    h2, _ = compiled_hash(fx.repo, fx.base, package_dir="mypkg")
    h3, _ = compiled_hash(fx.repo, fx.cpp, package_dir="mypkg")
    assert h1 == h2 != h3 and n1 == 1  # only mypkg/_table.json is a build input in base/head
    g1, n = compiled_hash(fx.repo, fx.head, package_dir="mypkg", globs=["mypkg/*.py"])
    g2, _ = compiled_hash(fx.repo, fx.base, package_dir="mypkg", globs=["mypkg/*.py"])
    assert g1 != g2 and n == 3
    e1, _ = compiled_hash(fx.repo, fx.head, package_dir="mypkg", env={"NVTE_CUDA_ARCHS": "90"})
    assert e1 != h1
    v1, _ = compiled_hash(fx.repo, fx.head, package_dir="mypkg", skip=["mypkg/_table.json"])
    assert v1 != h1  # a version file is not a compiled source
    s1, _ = compiled_hash(fx.repo, fx.head, package_dir="mypkg", skip=["mypkg/csrc/"])
    s3, _ = compiled_hash(fx.repo, fx.cpp, package_dir="mypkg", skip=["mypkg/csrc/"])
    assert s1 == s3  # cpp differs from head only in a skipped path


def test_te_build_env(monkeypatch, tmp_path):
    monkeypatch.setattr(buildrun, "local_cuda_archs", lambda: "90")
    monkeypatch.setattr(
        buildrun.shutil, "which", lambda name: "/usr/bin/ccache" if name == "ccache" else None
    )
    env = buildrun.build_env(TE_LAYOUT, base={}, jobs=3, cache_dir=tmp_path)
    assert env["NVTE_FRAMEWORK"] == "pytorch" and env["NVTE_CUDA_ARCHS"] == "90"
    assert env["MAX_JOBS"] == env["CMAKE_BUILD_PARALLEL_LEVEL"] == "3"
    assert env["CMAKE_CXX_COMPILER_LAUNCHER"] == env["CMAKE_CUDA_COMPILER_LAUNCHER"] == "/usr/bin/ccache"
    assert env["CCACHE_DIR"] == str(tmp_path / "ccache" / "shared")  # one compiler cache for every build
    assert "CCACHE_DIR" not in buildrun.hashed_env(env)  # where the cache lives does not change a build
    env = buildrun.build_env(TE_LAYOUT, base={"NVTE_CUDA_ARCHS": "80"}, cache_dir=tmp_path)
    assert env["NVTE_CUDA_ARCHS"] == "80"
    env = buildrun.build_env(TE_LAYOUT, base={"NVTE_CUDA_ARCHS": "80"}, cache_dir=tmp_path, cuda_archs="90a")
    assert env["NVTE_CUDA_ARCHS"] == "90a"  # --cuda-archs wins
    env = buildrun.build_env(GENERIC, base={"NVTE_PROJECT_BUILDING": "1"}, cache_dir=tmp_path)
    assert "NVTE_FRAMEWORK" not in env and "NVTE_CUDA_ARCHS" not in env and "NVTE_PROJECT_BUILDING" not in env
    assert int(env["MAX_JOBS"]) >= 1


def test_masquerade_takes_a_compiler_named_by_path(monkeypatch, tmp_path):
    """setuptools and torch call CC/CXX by path when set (the H200 image: CXX=/opt/gcc/bin/g++): the
    build gets ccache under that name, first on PATH, with the real compiler's directory right after."""
    real = tmp_path / "opt" / "gcc" / "bin"
    real.mkdir(parents=True)
    for name in ("gcc", "g++"):
        (real / name).write_text("#!/bin/sh\n")
        (real / name).chmod(0o755)
    monkeypatch.setattr(
        buildrun.shutil, "which", lambda name, *a, **k: "/usr/bin/ccache" if name == "ccache" else None
    )
    base = {"PATH": "/usr/bin", "CC": str(real / "gcc"), "CXX": str(real / "g++")}
    env = buildrun.build_env(GENERIC, base=base, cache_dir=tmp_path / "cache", ccache="masquerade")
    masq = tmp_path / "cache" / "ccache" / "shared" / "bin"
    assert env["CXX"] == str(masq / "g++") and env["CC"] == str(masq / "gcc")
    assert env["PATH"].split(os.pathsep)[:3] == [str(masq), str(real), "/usr/bin"]
    for name in ("c++", "g++", "gcc", "cc"):
        assert os.readlink(masq / name) == "/usr/bin/ccache"
    assert "CMAKE_CXX_COMPILER_LAUNCHER" not in env  # launchers are for CMake builds only
    plain = buildrun.build_env(GENERIC, base=base, cache_dir=tmp_path / "cache", ccache="")
    assert plain["CXX"] == str(real / "g++") and "CCACHE_DIR" not in plain


# ------------------------------------------------------------------ describing and the cache command


def test_cache_command(fx, tmp_path):
    from click.testing import CliRunner

    from teperf.commands.cache import command

    cache = tmp_path / "cache"
    sides(fx, "v0.1.0..main", strategy="build", build_command=fx.build_command())
    runner = CliRunner()
    result = runner.invoke(command, ["list", "--cache-dir", str(cache), "--format", "json"])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.output)
    kinds = sorted(e["kind"] for e in listed["entries"])
    shared = ["ccache"] if buildrun.find_ccache() else []  # the build's compiler cache, when ccache is here
    assert kinds == sorted(["builds", "buildtrees", "overlays", "overlays", "trees", "trees", *shared])
    result = runner.invoke(command, ["list", "--cache-dir", str(cache)])
    assert result.exit_code == 0 and "builds" in result.output and "trees" in result.output
    result = runner.invoke(command, ["clear", "--cache-dir", str(cache), "overlays"])
    assert result.exit_code == 0 and "removed 2 entries" in result.output
    assert not any((cache / "overlays").iterdir())
    result = runner.invoke(command, ["clear", "--cache-dir", str(cache), "--older-than", "1"])
    assert "removed 0 entries" in result.output
    result = runner.invoke(command, ["clear", "--cache-dir", str(cache)])
    assert f"removed {4 + len(shared)} entries" in result.output
    result = runner.invoke(command, ["list", "--cache-dir", str(cache)])
    assert "empty" in result.output
    # after a clear, the next run makes everything again
    sides(fx, "v0.1.0..main", strategy="build", build_command=fx.build_command())
    assert fx.builds_run() == 2


def test_cache_root_env(monkeypatch, tmp_path):
    monkeypatch.setenv("TEPERF_CACHE", str(tmp_path / "x"))
    assert cachedir.cache_root() == tmp_path / "x"
    assert cachedir.cache_root(tmp_path / "y") == tmp_path / "y"
    monkeypatch.delenv("TEPERF_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cachedir.cache_root() == tmp_path / "xdg" / "teperf"


# ------------------------------------------------------------------ a change outside the package


def test_a_docs_only_change_passes_the_gate_saying_the_package_did_not_change(fx, tmp_path, capsys):
    # issue 59: it measured two identical packages, then exited 1 with "check what each side points at"
    from conftest import run_in_process

    git(fx.repo, "checkout", "-q", "-b", "docs", fx.head)
    (fx.repo / "README.md").write_text("# mypkg\n\nnow with docs\n")
    (fx.repo / "tests").mkdir(exist_ok=True)
    (fx.repo / "tests" / "test_more.py").write_text("def test_nothing():\n    pass\n")
    docs = commit(fx.repo, "docs only")
    config = tmp_path / "mine.toml"
    config.write_text('[modules.MLP]\nfactory = "mypkg.blocks:make_mlp"\n')
    argv = ["compare", f"{fx.head}..{docs}", "--repo", str(fx.repo), "--config", str(config)]
    code, out, err = run_in_process(
        [*argv, "--fail-on", "slower", "--results-dir", str(tmp_path / "r")], capsys
    )
    assert code == 0 and out == "", err
    assert "teperf: the package mypkg did not change between base" in err
    assert "2 files differ, none of them its code or a build input (README.md, tests/test_more.py)" in err
    assert not (tmp_path / "r").exists()  # nothing measured
    code, out, err = run_in_process([*argv, "--format", "json"], capsys)
    assert code == 0 and json.loads(out)["unchanged"].startswith("the package mypkg did not change"), err
    planned = plan_sides(f"{fx.head}..{docs}", repo=str(fx.repo), package="mypkg", log=quiet)
    assert planned.unchanged(["tests"]) is None  # a factory importing from tests/ sees the change
    assert (
        plan_sides(f"{fx.head}..{fx.head}", repo=str(fx.repo), package="mypkg", log=quiet).unchanged() is None
    )
    assert plan_sides(f"{fx.base}..{docs}", repo=str(fx.repo), package="mypkg", log=quiet).unchanged() is None


@pytest.mark.parametrize(
    "argv, key",
    [
        (["compare", "v0.1.0..main", "--plan"], "plan"),
        (["bisect", "v0.1.0..main", "--cell", "MLP/fp32", "--plan"], "plan"),
        (["nightly", "--ref", "main", "--dry-run"], "nightly"),
    ],
)
def test_a_plan_with_format_json_is_json_on_stdout(fx, tmp_path, capsys, monkeypatch, argv, key):
    # issue 59: --format json wrote nothing to stdout for compare --plan, bisect --plan, nightly --dry-run
    from conftest import run_in_process

    monkeypatch.chdir(tmp_path)
    config = tmp_path / "mine.toml"
    config.write_text('[modules.MLP]\nfactory = "mypkg.blocks:make_mlp"\n')
    extra = ["--history", str(tmp_path / "h")] if argv[0] == "nightly" else []
    argv = [*argv, "--repo", str(fx.repo), "--config", str(config), "--format", "json", *extra]
    code, out, err = run_in_process(argv, capsys)
    assert code == 0, err
    data = json.loads(out)
    if argv[0] == "compare":
        assert data["plan"]["strategy"] == "overlay" and data["plan"]["base"]["sha"] == fx.base
        assert data["plan"]["head"]["sha"] == fx.head and data["unchanged"] is None
        assert {"path": "mypkg/new.py", "kind": "python"} in data["plan"]["paths"]
    elif argv[0] == "bisect":
        assert (
            data["cell"] == "MLP/fp32/8x2x256/eager"
            and data["good"]["sha"] == fx.base
            and data["bad"]["sha"] == fx.head
        )
        assert "expected_probes" in data["plan"] and data["lines"]
    else:
        assert data["nightly"]["head_sha"] == fx.head and data["nightly"]["cases"] == [
            "MLP/fp32/8x2x256/eager"
        ]
        assert data["dry_run"] is True and data["nightly"]["skip"] is False
    assert key in data
