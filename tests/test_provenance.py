"""Which code each side runs: the checks before measuring and the judgement after (issue 20)."""

from __future__ import annotations

import importlib
import json
import shutil
import sys
from types import SimpleNamespace

import pytest
from conftest import ROOT, one_error, run_in_process

from teperf.config import build_config
from teperf.errors import TeperfError
from teperf.plan import packages_under_test
from teperf.provenance import (
    check_path_sides,
    code_identity,
    identical_code,
    meant_to_differ,
    mixed_code,
    side_line,
)
from teperf.records import BundleMeta
from teperf.sides import Side
from teperf.worker.provenance import package_facts

FACTORY_CFG = {"modules": {"Spin": {"factory": "spinpkg.blocks:make"}}}


def test_packages_under_test_follow_the_config():
    assert packages_under_test(build_config({}, {})) == ["torch"]
    assert packages_under_test(build_config(FACTORY_CFG, {})) == ["spinpkg"]


def _path_side(label, path):
    return Side(label=label, python=sys.executable, sys_path=(str(path),), description={"kind": "path"})


def test_path_sides_with_the_default_config_are_refused(tmp_path):
    with pytest.raises(TeperfError) as info:
        check_path_sides(build_config({}, {}), [_path_side("base", tmp_path)])
    assert "--base-path" in str(info.value) and "built-in reference modules" in str(info.value)
    assert "factor" in info.value.fix


def test_git_sides_with_the_default_config_are_refused_like_path_sides():
    # issue 59: one rule for both; a git side's own package does not make torch's modules import it
    git_side = Side(
        label="base", python=sys.executable, description={"source": "git", "spec": "v1..v2", "package": "x"}
    )
    with pytest.raises(TeperfError) as info:
        check_path_sides(build_config({}, {}), [git_side])
    assert "git sides (v1..v2)" in str(info.value) and "built-in reference modules" in str(info.value)
    assert "--config" in info.value.fix
    check_path_sides(build_config(FACTORY_CFG, {}), [git_side])  # factories that import code: fine


@pytest.mark.parametrize(
    "argv",
    [
        ["compare", "v2.16..py"],
        ["compare", "v2.16..csrc", "--modules", "Linear"],  # a C++ change: two builds would be planned
        ["compare", "v2.16..csrc", "--plan"],
        ["bisect", "v2.16..csrc", "--cell", "Linear/fp32"],
        ["nightly", "--ref", "csrc", "--config", "default", "--dry-run"],
    ],
)
def test_a_te_like_repo_without_a_config_is_refused_before_anything_is_planned(
    tmp_path, capsys, monkeypatch, argv
):
    from conftest import one_error, run_in_process
    from gitfixture import make_te_shaped

    monkeypatch.setenv("TEPERF_CACHE", str(tmp_path / "cache"))  # today's code would build here
    monkeypatch.chdir(tmp_path)  # ... and write a bisect bundle under ./results

    repo, _site = make_te_shaped(tmp_path)
    argv = [*argv, "--repo", str(repo)] + (["--history", str(tmp_path / "h")] if argv[0] == "nightly" else [])
    code, out, err = run_in_process(argv, capsys)
    one_error(code, out, err, "git sides", "torch's built-in reference modules", "--config pr-thread")
    assert "build" not in err.replace("built-in", "")  # nothing planned, no strategy said


def test_path_sides_must_hold_the_package_under_test(tmp_path):
    (tmp_path / "old" / "spinpkg").mkdir(parents=True)
    (tmp_path / "new").mkdir()
    config = build_config(FACTORY_CFG, {})
    check_path_sides(config, [_path_side("base", tmp_path / "old")])  # holds it: fine
    with pytest.raises(TeperfError) as info:
        check_path_sides(config, [_path_side("head", tmp_path / "new")])
    assert "--head-path" in str(info.value) and "no spinpkg" in str(info.value)
    (tmp_path / "new" / "spinpkg.py").write_text("")
    check_path_sides(config, [_path_side("head", tmp_path / "new")])  # a single module is a package too


def _package(root, body):
    pkg = root / "hashme_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import sub\n")
    (pkg / "sub.py").write_text(body)
    return root


def _facts(root, versions=None):
    for name in [m for m in sys.modules if m == "hashme_pkg" or m.startswith("hashme_pkg.")]:
        del sys.modules[name]
    sys.path.insert(0, str(root))
    try:
        importlib.invalidate_caches()
        importlib.import_module("hashme_pkg")
        return package_facts("hashme_pkg", set(), versions=versions)
    finally:
        sys.path.remove(str(root))
        for name in [m for m in sys.modules if m == "hashme_pkg" or m.startswith("hashme_pkg.")]:
            del sys.modules[name]


def test_the_content_hash_ignores_where_the_code_lies_and_sees_one_changed_byte(tmp_path):
    a = _facts(_package(tmp_path / "a", "X = 1\n"))
    b = _facts(_package(tmp_path / "b", "X = 1\n"))
    c = _facts(_package(tmp_path / "c", "X = 2\n"))
    assert a["imported"] and a["files"] == 2 and a["path"].startswith(str(tmp_path / "a"))
    assert a["hash"] == b["hash"] != c["hash"]


def test_a_version_an_earlier_worker_looked_up_is_not_looked_up_again(tmp_path, monkeypatch):
    from importlib import metadata

    from teperf.worker.provenance import version_key

    root = _package(tmp_path / "a", "X = 1\n")
    assert _facts(root)["version"] is None  # no __version__, no distribution: every distribution was scanned
    monkeypatch.setattr(metadata, "packages_distributions", lambda: pytest.fail("scanned again"))
    key = version_key(sys.prefix, str(root / "hashme_pkg"))
    assert _facts(root, {key: "1.2"})["version"] == "1.2"
    assert _facts(root, {key: None})["version"] is None
    with pytest.raises(pytest.fail.Exception):  # another environment's version is not this one's
        _facts(root, {version_key("/other/venv", str(root / "hashme_pkg")): "1.2"})


def _imported(prefix, spin_hash, torch_version="2.13.0"):
    return {
        "python": "3.11.7",
        "prefix": prefix,
        "torch": {"version": torch_version, "path": f"{prefix}/torch"},
        "packages": {
            "spinpkg": {
                "imported": True,
                "version": None,
                "path": f"{prefix}/spinpkg",
                "files": 1,
                "hash": spin_hash,
            }
        },
    }


def _records(base, head):
    return [
        SimpleNamespace(side="base", hello={"imported": base}),
        SimpleNamespace(side="head", hello={"imported": head}),
    ]


ENV_SIDES = {"base": {"python": "/venv-a/bin/python"}, "head": {"python": "/venv-b/bin/python"}}


def test_two_named_sides_with_identical_code_are_no_comparison():
    meta = BundleMeta(kind="compare", sides=ENV_SIDES)
    same = _records(_imported("/venv-a", "abc"), _imported("/venv-b", "abc"))
    problem = identical_code(meta, same)
    assert problem and "both sides ran identical code" in problem and "spinpkg hash abc" in problem
    assert identical_code(meta, _records(_imported("/venv-a", "abc"), _imported("/venv-b", "abd"))) is None
    # the same package over two torch releases is a comparison of torch
    assert identical_code(meta, _records(_imported("/a", "abc"), _imported("/b", "abc", "2.14.1"))) is None


def test_a_deliberate_a_a_is_not_flagged():
    same_python = {"base": {"python": "/venv-a/bin/python"}, "head": {"python": "/venv-a/bin/python"}}
    records = _records(_imported("/venv-a", "abc"), _imported("/venv-a", "abc"))
    assert not meant_to_differ(same_python)
    assert identical_code(BundleMeta(kind="compare", sides=same_python), records) is None
    git_same = {"base": {"sha": "1" * 40}, "head": {"sha": "1" * 40, "sys_path": ["/other"]}}
    assert not meant_to_differ(git_same)
    assert meant_to_differ({"base": {"sha": "1" * 40}, "head": {"sha": "2" * 40}})


def test_unknown_provenance_never_claims_identity():
    assert code_identity({}) is None
    assert code_identity({"packages": {"spinpkg": {"imported": True, "hash": None}}}) is None
    meta = BundleMeta(kind="compare", sides=ENV_SIDES)
    assert identical_code(meta, [SimpleNamespace(side="base", hello={})]) is None


def test_torch_built_ins_are_identical_only_from_the_same_install():
    def torch_only(prefix):
        return {
            "python": "3.11.7",
            "torch": {"version": "2.13.0", "path": f"{prefix}/torch"},
            "packages": {
                "torch": {"imported": True, "version": "2.13.0", "path": f"{prefix}/torch", "hash": None}
            },
        }

    meta = BundleMeta(kind="compare", sides=ENV_SIDES)
    assert identical_code(
        meta, _records(torch_only("/d"), torch_only("/d"))
    )  # both imported the driver's torch
    assert identical_code(meta, _records(torch_only("/a"), torch_only("/b"))) is None


def test_a_side_whose_code_changed_during_the_run_is_named():
    records = _records(_imported("/a", "abc"), _imported("/b", "x")) + [
        SimpleNamespace(side="head", hello={"imported": _imported("/b", "y")})
    ]
    assert mixed_code(records) == ["head"]


def test_the_header_line_names_interpreter_torch_and_package():
    line = side_line("base", _imported("/venv-a", "abc"))
    assert line.startswith("base imported: python 3.11.7 (/venv-a), torch 2.13.0 (/venv-a/torch)")
    assert "spinpkg (/venv-a/spinpkg; 1 files, hash abc)" in line


def test_compiled_files_are_hashed_once_per_run_while_their_stat_holds(tmp_path):
    root = _package(tmp_path / "a", "X = 1\n")
    lib = root / "hashme_pkg" / "libhashme.so"
    lib.write_bytes(b"\x7fELF one")
    mapped = {str(lib.resolve())}

    def facts(known=None):
        sys.path.insert(0, str(root))
        try:
            importlib.invalidate_caches()
            importlib.import_module("hashme_pkg")
            return package_facts("hashme_pkg", mapped, known)
        finally:
            sys.path.remove(str(root))
            for name in [m for m in sys.modules if m == "hashme_pkg" or m.startswith("hashme_pkg.")]:
                del sys.modules[name]

    first = facts()
    assert first["compiled_files"] == 1 and first["files"] == 3
    ((real, entry),) = first["compiled"].items()
    reused = facts({real: entry[:3] + ["0" * 64]})  # a stat that matches: the digest is taken as known
    assert reused["hash"] != first["hash"]
    lib.write_bytes(b"\x7fELF two!")  # changed: hashed anew whatever was known
    changed = facts({real: entry[:3] + ["0" * 64]})
    assert changed["compiled"][real][3] not in ("0" * 64, entry[3])


def test_a_git_sides_package_is_under_test_even_behind_an_outside_factory():
    # nanoGPT: the factory lives outside the repo and imports `model` from the side's tree
    config = build_config({"modules": {"GPT": {"factory": "nanofactory:make"}}}, {})
    git_side = Side(label="base", python=sys.executable, description={"package": "model", "sha": "1" * 40})
    assert packages_under_test(config, [git_side]) == ["model", "nanofactory"]


BUNDLES = ROOT / "tests" / "fixtures" / "bundles"


def test_a_missing_package_names_the_options_of_that_side():
    from teperf.engine.probe import _where_else
    from teperf.sides import Side

    assert "--python/--path" in _where_else(Side("run", "python"))
    assert "--base-python/--base-path" in _where_else(Side("base", "python"))
    assert "PYTHONPATH" in _where_else(Side("head", "python", description={"ref": "main", "kind": "git"}))


def test_a_path_unused_because_modules_picked_built_ins_names_them(capsys):
    argv = ["run", "--config", "demo", "--path", str(ROOT / "examples" / "planted" / "base")]
    code, out, err = run_in_process([*argv, "--modules", "LayerNormMLP"], capsys)
    one_error(code, out, err, "the modules measured (LayerNormMLP) are torch's built-in", "check --modules")


def _imported_files(files: int, digest: str) -> dict:
    pkg = {"imported": True, "version": None, "path": "/x/demo_blocks", "files": files, "hash": digest}
    torch = {"imported": True, "version": "2.13.0", "path": "/t", "files": None, "hash": None}
    return {"python": "3.11.7", "torch": torch, "packages": {"demo_blocks": pkg, "torch": torch}}


def _failed_cell_bundle(tmp_path):
    """v2-compare's workers with what they imported; pair 2's base failed its last set-up (a factory
    raised), so it loaded one file of its package instead of two."""
    dst = tmp_path / "failed"
    shutil.copytree(BUNDLES / "v2-compare-compile-cpu", dst)
    out = []
    for line in (dst / "records.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["kind"] == "worker":
            broken = (rec["pair"], rec["side"]) == (2, "base")
            digest = "aaaa" if broken else {"base": "bbbb", "head": "cccc"}[rec["side"]]
            rec["hello"]["imported"] = _imported_files(1 if broken else 2, digest)
        if rec["kind"] == "setup" and (rec["pair"], rec["side"], rec["case_id"]) == (2, "base", 0):
            rec.update(status="error", info=None, error="ValueError: the factory raised")
        out.append(json.dumps(rec))
    (dst / "records.jsonl").write_text("\n".join(out) + "\n")
    return dst


def test_a_failed_set_up_is_not_read_as_a_tree_that_changed(tmp_path):
    from teperf.summary import summarize

    summary = summarize(_failed_cell_bundle(tmp_path))
    assert summary.code_problems == []
    assert any("the factory raised" in (r.error or "") for r in summary.incomplete_rows)
