"""Tiered git sides: which strategy each kind of diff needs, said up front; pure-Python and bare
repositories."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from gitfixture import TE_EDITS, git, make_ext_fixture, make_fixture, make_pure_python, make_te_shaped

from teperf.errors import TeperfError
from teperf.sides import changes
from teperf.sides.git import plan_sides
from teperf.sides.layout import GENERIC, TE_LAYOUT, load_layout
from teperf.sides.target import Refused


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TEPERF_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("TEPERF_ALLOW_DIRTY", raising=False)
    monkeypatch.delenv("TEPERF_BUILD_GLOBS", raising=False)
    return tmp_path / "cache"


@pytest.fixture
def te(tmp_path, monkeypatch, cache):
    repo, site = make_te_shaped(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(site))
    return repo


def plan(repo, spec, messages=None, **kw):
    kw.setdefault("package", "transformer_engine")
    return plan_sides(
        spec, repo=str(repo), log=(messages.append if messages is not None else lambda m: None), **kw
    )


def run_py(side, code):
    prelude = f"import sys; sys.path[0:0] = {list(side.sys_path)!r}\n"
    proc = subprocess.run(
        [side.python, "-c", prelude + code],
        capture_output=True,
        text=True,
        cwd="/",
        env={**os.environ, **side.env},
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


# ------------------------------------------------------------------ classifying paths (TE's layout)


@pytest.mark.parametrize(
    "path, kind",
    [
        ("transformer_engine/pytorch/module/base.py", changes.PYTHON),
        ("transformer_engine/common/__init__.py", changes.PYTHON),  # Python that loads the core: runtime code
        ("transformer_engine/common/recipe/__init__.py", changes.PYTHON),
        ("build_tools/VERSION.txt", changes.VERSION),
        ("transformer_engine/pytorch/csrc/quantizer.cpp", changes.EXTENSION),
        ("transformer_engine/pytorch/csrc/extensions/pybind.cpp", changes.EXTENSION),
        ("transformer_engine/pytorch/setup.py", changes.EXTENSION),
        ("build_tools/pytorch.py", changes.EXTENSION),
        ("transformer_engine/common/gemm/cublaslt_gemm.cu", changes.CORE),
        ("transformer_engine/common/include/transformer_engine/gemm.h", changes.CORE),
        ("transformer_engine/common/CMakeLists.txt", changes.CORE),
        ("transformer_engine/common/README.md", changes.OTHER),
        ("setup.py", changes.BUILD),
        ("pyproject.toml", changes.BUILD),
        ("build_tools/utils.py", changes.BUILD),
        ("3rdparty/cudnn-frontend", changes.BUILD),
        ("transformer_engine/jax/csrc/extensions.cpp", changes.OTHER),  # another framework's extension
        ("build_tools/jax.py", changes.OTHER),
        ("docs/api/pytorch.rst", changes.OTHER),
        ("tests/pytorch/test_numerics.py", changes.OTHER),
        ("tests/cpp/operator/test_cast.cu", changes.OTHER),
        ("examples/pytorch/fsdp.py", changes.OTHER),
    ],
)
def test_classify_te_paths(path, kind):
    submodule = path == "3rdparty/cudnn-frontend"
    expected = changes.CORE if submodule else kind  # a submodule bump is a core change under TE's layout
    assert changes.classify(path, TE_LAYOUT, "transformer_engine", submodule=submodule) == expected


def test_classify_generic_layout():
    assert changes.classify("mypkg/csrc/op.cpp", GENERIC, "mypkg") == changes.BUILD
    assert changes.classify("mypkg/blocks.py", GENERIC, "mypkg") == changes.PYTHON
    assert changes.classify("VERSION.txt", GENERIC, "mypkg") == changes.OTHER
    assert changes.classify("3rdparty/x", GENERIC, "mypkg", submodule=True) == changes.BUILD


# ------------------------------------------------------------------ the tier of every kind of diff


TIERS = {
    "py": ("overlay", ["transformer_engine/pytorch/module/base.py"]),
    "version": ("overlay", []),
    "py-version": ("overlay", ["transformer_engine/pytorch/module/base.py"]),
    "common-py": ("overlay", ["transformer_engine/common/__init__.py"]),
    "csrc": (
        "extension",
        [
            "transformer_engine/pytorch/csrc/quantizer.cpp",
            "transformer_engine/pytorch/csrc/extensions/gemm.cpp",
        ],
    ),
    "ext-setup": ("extension", ["transformer_engine/pytorch/setup.py"]),
    "ext-build-tools": ("extension", ["build_tools/pytorch.py"]),
    # a core change over an installed TE: its core library and extension rebuilt (core)
    "common": ("core", ["transformer_engine/common/gemm/gemm.cu"]),
    "common-header": ("core", ["transformer_engine/common/include/transformer_engine/gemm.h"]),
    "build-file": ("build", ["setup.py"]),  # the package's own build: only a whole build covers it
    "build-tools": ("core", ["build_tools/utils.py"]),
    "jax": ("overlay", []),
    "docs-tests": ("overlay", []),
}


def test_every_edit_has_an_expected_tier():
    assert set(TIERS) == set(TE_EDITS)


@pytest.mark.parametrize("branch", sorted(TIERS))
def test_auto_tier_for_each_kind_of_diff(te, branch):
    strategy, deciding = TIERS[branch]
    messages = []
    planned = plan(te, f"v2.16..{branch}", messages)
    assert planned.strategy.name == strategy, messages
    assert planned.pair.changes.tier == ("build" if strategy == "core" else strategy)
    for path in deciding:  # the files that decide it are named up front
        assert path in planned.plan.reason, planned.plan.reason
    said = [m for m in messages if m.startswith("strategy ")]
    assert said == [f"strategy {strategy}: {planned.plan.reason}"]
    at = messages.index(said[0])
    assert [m.split(":")[0] for m in messages[at + 1 : at + 3]] == ["  base", "  head"]  # a cost per side
    if branch == "build-file":  # core was tried first and said why not
        assert any("core does not apply (build inputs outside the core library" in m for m in messages)
    has_version = "VERSION.txt" in " ".join(TE_EDITS[branch])
    version_notes = [n for n in planned.plan.notes if "VERSION.txt" in n]
    assert bool(version_notes) == has_version
    if has_version:
        assert "build_tools/VERSION.txt: 2.16.0 -> 2.16.1" in version_notes[0]
    if strategy == "core" and "header" in branch:  # said before any build starts
        assert any("a core header differs" in n and "full core build" in n for n in planned.plan.notes)


def test_version_only_is_an_overlay_with_a_note_in_the_side_metadata(te):
    base, head = plan_sides(
        "v2.16..version", repo=str(te), package="transformer_engine", log=lambda m: None
    ).make()
    assert head.description["strategy"] == "overlay"
    assert "2.16.0 -> 2.16.1" in head.description["notes"][0]
    assert base.description["notes"] == head.description["notes"]
    assert head.description["changes"] == {"version": 1}
    shadow = Path(head.sys_path[0]) / "transformer_engine"
    assert (shadow / "wheel_lib" / "libtransformer_engine.so").is_symlink()


def test_plan_names_a_few_files_then_how_many_more(te, tmp_path):
    for i in range(5):
        (te / f"transformer_engine/pytorch/csrc/extra{i}.cpp").write_text("// more\n")
    git(te, "checkout", "-q", "csrc")
    git(te, "add", "-A")
    git(te, "commit", "-q", "-m", "five more sources")
    git(te, "checkout", "-q", "main")
    planned = plan(te, "v2.16..csrc")
    assert planned.plan.reason.count(".cpp") == 3 and "+4 more" in planned.plan.reason
    lines = planned.lines()
    assert lines[0].startswith("base ") and "8 files differ (1 python, 7 extension)" in lines[0]
    assert "builds the extension from its tree with" in lines[2]
    assert "over the installed transformer_engine 2.16.0" in lines[2]


def test_extension_without_an_install_falls_back_to_build(te, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "")
    messages = []
    planned = plan(te, "v2.16..csrc", messages)
    assert planned.strategy.name == "build"
    assert "not installed" in planned.refused["extension"]
    assert any(m.startswith("extension does not apply") and m.endswith("trying build") for m in messages)
    with pytest.raises(Refused, match="built over the installed core") as exc:
        plan(te, "v2.16..csrc", strategy="extension")
    assert "--strategy build" in str(exc.value)


def test_extension_refuses_a_core_change_and_unknown_layouts(te):
    with pytest.raises(Refused, match="compiled core .* differs") as exc:
        plan(te, "v2.16..common", strategy="extension")
    assert "--strategy build" in str(exc.value) and "gemm.cu" in str(exc.value)
    with pytest.raises(Refused, match="no extension build is known") as exc:
        plan(te, "v2.16..csrc", strategy="extension", layout=GENERIC)
    assert "--layout" in str(exc.value)
    with pytest.raises(Refused, match="overlay cannot run") as exc:
        plan(te, "v2.16..csrc", strategy="overlay")
    assert "--strategy extension" in str(exc.value)


def test_installed_build_of_other_core_sources_is_caught(te, tmp_path):
    # the installed version names a commit whose core differs from base: overlay and extension both refuse
    common = git(te, "rev-parse", "common")
    meta = Path(os.environ["PYTHONPATH"]) / "transformer_engine-2.16.0.dist-info" / "METADATA"
    meta.write_text(f"Metadata-Version: 2.1\nName: transformer_engine\nVersion: 2.16.0+{common[:7]}\n")
    with pytest.raises(Refused, match="was built from"):
        plan(te, "v2.16..csrc", strategy="extension")
    messages = []
    assert plan(te, "v2.16..py", messages).strategy.name == "build"
    assert any("overlay does not apply" in m for m in messages)


# ------------------------------------------------------------------ layouts


def test_layout_file(tmp_path):
    fx = make_ext_fixture(tmp_path)
    layout = load_layout(fx.layout)
    assert layout.extension.setup_dir == "extpkg/ext" and layout.extension.is_artifact(
        "extpkg_ext.cpython-311.so"
    )
    bad = tmp_path / "bad.toml"
    bad.write_text('cores = ["x/"]\n')
    with pytest.raises(TeperfError, match="unknown key"):
        load_layout(bad)
    bad.write_text('[extension]\nsources = ["x/"]\n')
    with pytest.raises(TeperfError, match="lacks setup_dir, artifacts, import_check"):
        load_layout(bad)
    with pytest.raises(TeperfError, match="cannot read"):
        load_layout(tmp_path / "missing.toml")


def test_ext_fixture_plans(tmp_path, monkeypatch, cache):
    fx = make_ext_fixture(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(fx.site))
    expected = {
        "main": "extension",
        "pyonly": "overlay",
        "version": "overlay",
        "core": "core",
        "corespin": "core",
        "badsym": "extension",
    }
    for branch, strategy in expected.items():
        planned = plan(fx.repo, f"v0.1.0..{branch}", package="extpkg", layout=fx.layout)
        assert planned.strategy.name == strategy, branch


# ------------------------------------------------------------------ pure-Python packages and bare
# repositories


def test_pure_python_package_runs_from_its_trees(tmp_path, monkeypatch, cache):
    repo = make_pure_python(tmp_path)
    monkeypatch.setenv("PYTHONPATH", "")
    messages = []
    base, head = plan_sides("v1..main", repo=str(repo), package="research", log=messages.append).make()
    assert head.description["strategy"] == "path" and head.description["package_dir"] == "src/research"
    assert any(m.startswith("strategy path: the package has nothing to build") for m in messages)
    assert head.sys_path == (str(cache / "trees" / head.description["sha"] / "src"),)
    assert run_py(base, "import research; print(research.work(1))") == "2"
    assert run_py(head, "import research; print(research.work(1))") == "3"


def test_pure_python_with_native_packaging_is_not_path(tmp_path, monkeypatch, cache):
    repo = make_pure_python(tmp_path)
    (repo / "setup.py").write_text(
        "from setuptools import Extension, setup\nsetup(ext_modules=[Extension('x', ['x.c'])])\n"
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "an extension module")
    monkeypatch.setenv("PYTHONPATH", "")
    assert plan(repo, "v1..main", package="research").strategy.name == "build"


def test_bare_repository(tmp_path, monkeypatch, cache):
    fx = make_fixture(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(fx.site))
    bare = tmp_path / "bare.git"
    git(tmp_path, "clone", "-q", "--bare", str(fx.repo), str(bare))
    base, head = plan_sides(
        "v0.1.0..main", repo=str(bare), package="mypkg", strategy="overlay", log=lambda m: None
    ).make()
    assert head.description["repo"] == str(bare) and head.description["dirty"] is False
    assert run_py(head, "import mypkg.blocks as b; print(b.SLOW)") == "True"
    assert run_py(base, "import mypkg.blocks as b; print(b.SLOW)") == "False"
    planned = plan(bare, "main..cpp", package="mypkg")  # auto works there too
    assert planned.strategy.name == "build" and "mypkg/csrc/op.cpp" in planned.plan.reason


def test_table_header_names_the_extension_build_and_the_note():
    from teperf.render import side_text

    desc = {
        "label": "head",
        "sha": "a" * 40,
        "subject": "s",
        "strategy": "extension",
        "ext_key": "0123456789abc",
        "ext_reused": True,
    }
    assert "strategy extension (extension from the cache 01234567)" in side_text(desc)
    assert "strategy extension (extension built 01234567)" in side_text({**desc, "ext_reused": False})


def test_core_builds_for_the_archs_asked(te, monkeypatch):
    """--cuda-archs reaches CMake (CMAKE_CUDA_ARCHITECTURES) and the extension's NVTE_CUDA_ARCHS; without it
    and without a GPU the plan says how to name them."""
    from teperf.sides import buildrun

    monkeypatch.delenv("NVTE_CUDA_ARCHS", raising=False)
    monkeypatch.setattr(buildrun, "local_cuda_archs", lambda: None)
    asked = plan(te, "v2.16..common", cuda_archs="80;90")
    assert asked.strategy.name == "core"
    assert "-DCMAKE_CUDA_ARCHITECTURES=80;90" in asked.strategy._cmake_args()
    assert asked.strategy._env["NVTE_CUDA_ARCHS"] == "80;90"
    assert not any("CUDA archs" in n for n in asked.plan.notes)
    unasked = plan(te, "v2.16..common")
    assert not any(a.startswith("-DCMAKE_CUDA_ARCHITECTURES") for a in unasked.strategy._cmake_args())
    assert any("no GPU found to take CUDA archs from" in n for n in unasked.plan.notes)
    assert asked.strategy.core_key(asked.pair.head) != unasked.strategy.core_key(unasked.pair.head)
