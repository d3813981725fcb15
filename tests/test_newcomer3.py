"""A newcomer's third list (issue 33): each case is one command's one-line answer and exit status.
Fast: config, CLI parsing and stored bundles; no worker starts."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, one_error, run_in_process

from teperf.errors import TeperfError

BUNDLES = ROOT / "tests" / "fixtures" / "bundles"


# --- interpreters given as relative paths -------------------------------------------------------------


def test_a_relative_interpreter_path_works_from_the_temporary_directory_of_the_pre_check(
    tmp_path, monkeypatch
):
    from teperf.commands._common import interpreter
    from teperf.config import load_config
    from teperf.engine.probe import preflight
    from teperf.sides import Side

    (tmp_path / "venvA").symlink_to(sys.prefix)  # this environment, named as the README does
    monkeypatch.chdir(tmp_path)
    python = interpreter(None, None, "venvA/bin/python")
    assert python == str(tmp_path / "venvA" / "bin" / "python")
    assert interpreter(None, None, ("venvA/bin/python", "python3")) == (python, "python3")  # PATH names stay
    found = preflight(load_config("default"), [Side("run", python)])
    assert found["run"]["found"]["torch"]


# --- NaN and infinity ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flag", ["--min-effect", "--precision", "--max-contended", "--min-effect-once", "--timeout"]
)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_every_float_option_refuses_nan_and_infinity(flag, value, capsys):
    one_error(*run_in_process(["run", flag, value], capsys), flag)


@pytest.mark.parametrize("argv", [["dashboard", "--min-effect", "nan"], ["dashboard", "--sig-level", "nan"]])
def test_other_commands_float_options_refuse_nan(argv, capsys):
    one_error(*run_in_process(argv, capsys), argv[1])


@pytest.mark.parametrize(
    "section, key",
    [("stats", "min_effect_pct"), ("stats", "max_contended_pct"), ("stats", "min_effect_once_pct")]
    + [
        ("stats", "alpha"),
        ("schedule", "timeout_s"),
        ("schedule", "precision_pct"),
        ("schedule", "budget_s"),
    ],
)
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_toml_nan_or_inf_is_refused_too(section, key, value):
    from teperf.config import build_config

    with pytest.raises(TeperfError, match=key):
        build_config({section: {key: value}}, {})


def test_cache_clear_refuses_a_negative_age(tmp_path, capsys):
    one_error(*run_in_process(["cache", "clear", "--older-than", "-1", "--cache-dir", str(tmp_path)], capsys))


# --- bundles whose records cannot be read ---------------------------------------------------------------


def _copy(tmp_path, name="v1-compare-counters") -> Path:
    path = tmp_path / name
    shutil.copytree(BUNDLES / name, path)
    return path


@pytest.mark.parametrize(
    "damage, words",
    [
        (lambda p: p.unlink(), "is missing"),
        (lambda p: (p.unlink(), p.mkdir()), "is a directory"),
        (lambda p: p.write_bytes(b""), "holds no records"),
    ],
)
def test_report_says_when_the_records_are_gone(tmp_path, damage, words, capsys):
    path = _copy(tmp_path)
    damage(path / "records.jsonl")
    one_error(*run_in_process(["report", str(path)], capsys), words, "re-run the measurement")


def test_a_permission_problem_says_permission_not_damage(tmp_path, monkeypatch, capsys):
    path = _copy(tmp_path)
    real = Path.read_bytes

    def read_bytes(self):
        if self.name == "meta.json":
            raise PermissionError(13, "Permission denied")
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)  # the tests run as root, for whom chmod 000 reads
    code, out, err = run_in_process(["report", str(path)], capsys)
    one_error(code, out, err, "permission denied", "chmod")
    assert "damaged" not in err


# --- run's wording -------------------------------------------------------------------------------------


def test_run_help_promises_no_fail_on(capsys):
    code, out, _ = run_in_process(["run", "--help"], capsys)
    assert code == 0 and "--fail-on" not in out


def test_a_missing_package_names_the_options_of_that_side():
    from teperf.engine.probe import _where_else
    from teperf.sides import Side

    assert "--python/--path" in _where_else(Side("run", "python"))
    assert "--base-python/--base-path" in _where_else(Side("base", "python"))
    assert "PYTHONPATH" in _where_else(Side("head", "python", description={"ref": "main", "kind": "git"}))


# --- options that another option would silently ignore -----------------------------------------------


def test_git_side_options_with_paths_are_refused(tmp_path, capsys):
    argv = ["compare", "--base-path", str(tmp_path), "--head-path", str(tmp_path), "--strategy", "overlay"]
    one_error(*run_in_process(argv, capsys), "--strategy", "BASE..HEAD")


def test_server_pairs_without_forkserver_is_refused(capsys):
    one_error(*run_in_process(["run", "--server-pairs", "3"], capsys), "--spawn forkserver")
    from teperf.config import build_config

    assert build_config({}, {"server_pairs": 3, "spawn": "forkserver"}).schedule.server_pairs == 3
    assert build_config({"schedule": {"server_pairs": 3}}, {}).schedule.server_pairs == 3  # waits for --spawn


def test_history_changes_and_nights_together_are_refused(tmp_path, capsys):
    one_error(
        *run_in_process(["history", "--history", str(tmp_path), "--changes", "--nights"], capsys), "--nights"
    )


# --- the history ---------------------------------------------------------------------------------------


def _import(path, hist, capsys, *extra):
    return run_in_process(["import", str(path), "--history", str(hist), *extra], capsys)


def test_an_unreadable_history_file_is_one_teperf_line(tmp_path, capsys):
    hist = tmp_path / "h"
    code, out, err = _import(_copy(tmp_path), hist, capsys, "--sha", "a" * 40)
    assert code == 0, err
    (hist / "20990101T000000Z_x_nosha_s1of1_deadbeef.parquet").write_bytes(b"PAR1 cut short")
    code, out, err = run_in_process(["history", "--history", str(hist)], capsys)
    assert code == 0 and "Warning" not in err and "store.py" not in err
    assert err.count("\n") == 1 and err.startswith("teperf: warning: skipped an unreadable history file")


def test_the_same_bundle_imported_twice_is_added_once_and_sha_names_a_commitless_one(tmp_path, capsys):
    from teperf.history.store import HistoryStore

    hist, path = tmp_path / "h", _copy(tmp_path)
    meta = json.loads((path / "meta.json").read_text())
    for side in meta["sides"].values():
        side.pop("sha", None)  # as a --base-path compare's
    (path / "meta.json").write_text(json.dumps(meta))
    code, out, err = _import(path, hist, capsys)
    assert code == 0 and "1 bundle added" in out and "no commit recorded" in out and "--sha" in out
    code, out, err = _import(Path(os.path.relpath(path)), hist, capsys, "--sha", "b" * 40)
    assert code == 0 and "1 bundle added" in out and "no commit recorded" not in out
    assert list(HistoryStore(hist).read()["sha"].unique()) == ["b" * 40]  # replaced, not added beside it
    code, out, err = _import(path, hist, capsys, "--sha", "b" * 40)
    assert code == 0 and "already in the history" in out and len(HistoryStore(hist).files()) == 1


def test_history_keeps_the_load_cause():
    from test_history_store import make_meta, make_row, summary

    from teperf.history.store import rows_from_summary

    rows = rows_from_summary(summary(make_meta(), [make_row(verdict="inconclusive", verdict_cause="load")]))
    assert rows[0].verdict_cause == "load"


def test_the_history_table_shows_the_load_cause(tmp_path, capsys):
    from test_history_store import make_meta, make_row, summary

    from teperf.history.store import HistoryStore

    HistoryStore(tmp_path / "h").add_summary(
        summary(make_meta(), [make_row(verdict="inconclusive", verdict_cause="load")]), bundle="x"
    )
    code, out, err = run_in_process(["history", "--history", str(tmp_path / "h")], capsys)
    assert code == 0 and "inconclusive (load)" in out, (out, err)


# --- cut short by a signal -----------------------------------------------------------------------------


def test_an_interrupted_run_marks_cells_short_of_their_pairs_partial(tmp_path, capsys):
    path = _copy(tmp_path)
    meta = json.loads((path / "meta.json").read_text())
    meta["status"] = "interrupted"
    meta["config"]["schedule"]["processes"] = 6  # the bundle holds 3 pairs of each cell
    (path / "meta.json").write_text(json.dumps(meta))
    code, out, err = run_in_process(["report", str(path), "--format", "json"], capsys)
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert rows and all(
        r["status"] == "partial" and r["n_pairs"] == 3 and "interrupted" in r["error"] for r in rows
    )
    notes = json.loads(out)["notes"]
    assert any("3 of 6 pairs; the run was interrupted" in n for n in notes), notes


def test_base_only_counters_in_a_compare_are_labelled_as_counts():
    from teperf.render import counters_text

    counts = {"py_calls": 120, "aten_ops": 30}
    assert counters_text({"base": counts, "head": None}, compare=True).startswith(
        "base only (counts, not changes)"
    )
    assert (
        counters_text({"base": counts, "head": None}) == "py_calls 120, aten_ops 30"
    )  # a run: its own counts


# --- help ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [[], ["counters"], ["cache"]])
def test_a_group_without_a_subcommand_prints_its_help(argv, capsys):
    code, out, err = run_in_process(argv, capsys)
    assert code == 0 and out.startswith("Usage: teperf") and "error" not in err


# --- module factories ----------------------------------------------------------------------------------


def test_a_malformed_factory_says_malformed_not_missing():
    from teperf.config import build_config

    with pytest.raises(TeperfError) as err:
        build_config({"modules": {"B": {"factory": "nocolon"}}}, {})
    assert "not of the form" in err.value.one_line() and "add the factory key" not in err.value.one_line()


def test_a_failed_run_cell_says_why_in_its_own_column(capsys):
    code, out, err = run_in_process(
        ["report", str(BUNDLES / "v1-run-failures"), "--format", "markdown"], capsys
    )
    assert code == 0, err
    header = next(line for line in out.splitlines() if line.startswith("| module"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert "why" in columns
    skipped = next(line for line in out.splitlines() if "skipped" in line)
    cells = [c.strip() for c in skipped.strip("|").split("|")]
    assert cells[columns.index("between pairs")] == "" and "compute capability" in cells[columns.index("why")]


# --- documents -----------------------------------------------------------------------------------------


def test_gpu_scripts_cite_no_files_a_user_does_not_have():
    for script in (ROOT / "scripts").glob("gpu_*.sh"):
        assert "../shared" not in script.read_text(), script


# --- schedules and shapes that cannot finish -------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--processes", "99999999999999999999"], "cannot finish in a day"),
        (["--iters", "1000000000000"], "one trial takes at least"),
        (["--warmup", "1000000000000"], "one warm-up takes at least"),
    ],
)
def test_a_schedule_that_cannot_finish_is_refused_before_any_worker(argv, words, tmp_path, capsys):
    code, out, err = run_in_process(["run", *argv, "--results-dir", str(tmp_path)], capsys)
    one_error(code, out, err, words)
    assert not any(tmp_path.iterdir())  # no bundle: refused before measuring


def test_a_long_schedule_with_a_budget_is_left_to_the_budget():
    from teperf.config import build_config
    from teperf.plan import check_duration

    check_duration(build_config({}, {"processes": 10**12, "budget_s": "5m"}), 3, 1)
    with pytest.raises(TeperfError, match="cannot finish in a day"):
        check_duration(build_config({}, {"processes": 10**12}), 3, 1)


def test_a_factory_module_whose_input_cannot_fit_is_refused():
    from teperf.memory import check_memory
    from teperf.plan import Case

    case = Case(0, "factory", "Block", "fp32", (100000, 100000, 1000), "float32", "eager", factory="m:make")
    with pytest.raises(TeperfError, match="needs at least .* GiB"):
        check_memory([case], "cpu", available=2**34)
    check_memory([dataclasses.replace(case, shape=(8, 2, 256))], "cpu", available=2**34)


# --- git trees of partial mirrors ----------------------------------------------------------------------


def _git(repo, *args):
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    )


def test_a_blob_missing_outside_the_package_does_not_stop_a_package_only_tree(tmp_path):
    from teperf.sides import gitrepo

    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("X = 1\n")
    (repo / "data").mkdir()
    (repo / "data" / "enwik8.gz").write_bytes(b"not in this mirror")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "c")
    sha = _git(repo, "rev-parse", "HEAD").stdout.strip()
    blob = _git(repo, "rev-parse", "HEAD:data/enwik8.gz").stdout.strip()
    (repo / ".git" / "objects" / blob[:2] / blob[2:]).unlink()  # as in a partial mirror
    with pytest.raises(TeperfError, match="git archive"):
        gitrepo.materialize(repo, sha, cache_dir=tmp_path / "c")
    tree = gitrepo.materialize(repo, sha, cache_dir=tmp_path / "c", needs="pkg")
    assert (tree / "pkg" / "__init__.py").read_text() == "X = 1\n" and not (tree / "data").exists()
    assert gitrepo.materialize(repo, sha, cache_dir=tmp_path / "c", needs="pkg") == tree  # cached
    with pytest.raises(
        TeperfError, match="git archive"
    ):  # a strategy that needs the whole tree still says so
        gitrepo.materialize(repo, sha, cache_dir=tmp_path / "c")


def test_the_package_of_a_root_of_several_modules_comes_from_the_config_factories(tmp_path):
    from teperf.config import build_config
    from teperf.sides import gitrepo

    repo = tmp_path / "nano"
    repo.mkdir()
    for name in ("bench", "configurator", "model", "sample", "train"):
        (repo / f"{name}.py").write_text("X = 1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "c")
    sha = _git(repo, "rev-parse", "HEAD").stdout.strip()
    with pytest.raises(TeperfError, match="cannot tell which package"):
        gitrepo.detect_package(repo, sha)
    config = build_config({"modules": {"Block": {"factory": "model:make"}}}, {})
    assert config.factory_package == "model"
    assert gitrepo.detect_package(repo, sha, config.factory_package)[0] == "model"
    with pytest.raises(TeperfError, match="cannot tell which package"):  # a hint that is no candidate
        gitrepo.detect_package(repo, sha, "elsewhere")
    assert build_config({}, {}).factory_package is None  # built-in modules import no package of the repo


def test_a_factory_function_its_module_lacks_is_named_not_the_paths():
    from teperf.engine.hints import FACTORY_HINT, failure_hint

    hint = failure_hint("AttributeError: module 'demo_blocks' has no attribute 'nope'")
    assert hint.startswith("demo_blocks has no nope") and "factory" in hint
    assert failure_hint("ModuleNotFoundError: No module named 'x'") == FACTORY_HINT


def test_a_tiny_timeout_names_the_timeout_not_the_iters(capsys):
    one_error(*run_in_process(["run", "--timeout", "1e-9"], capsys), "raise --timeout")
    one_error(
        *run_in_process(["run", "--iters", "1000000000", "--timeout", "1"], capsys),
        "5,000 s",
        "lower --iters",
    )


def test_by_lane_of_a_bundle_that_measured_nothing_says_so(tmp_path, capsys):
    path = _copy(tmp_path)
    (path / "records.jsonl").write_bytes(b"")
    meta = json.loads((path / "meta.json").read_text())
    meta["status"] = "failed"
    (path / "meta.json").write_text(json.dumps(meta))
    code, out, err = run_in_process(["report", str(path), "--by-lane", "--format", "markdown"], capsys)
    assert code == 0 and "no cell was measured" in out and "0 lanes" not in out, (out, err)


# --- the second newcomer pass (tests/newcomer_pass.py) -------------------------------------------------


@pytest.mark.parametrize(
    "command", ["run", "compare", "counters check --expected x.toml", "nightly", "bisect a..b --cell X/fp32"]
)
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_config_is_refused_not_read_as_the_default(command, value, capsys):
    code, out, err = run_in_process([*command.split(), "--config", value], capsys)
    one_error(code, out, err, "--config is empty", "default, demo")


def test_a_results_dir_that_is_a_file_says_so(tmp_path):
    from teperf.bundle import Bundle

    (tmp_path / "results").write_text("x")
    with pytest.raises(TeperfError) as exc:
        Bundle.create(tmp_path / "results", "run", {})
    assert "a file is in the way" in str(exc.value) and "File exists" not in str(exc.value)


@pytest.mark.parametrize("where", ["file", "below a file"])
def test_a_cache_dir_that_is_a_file_is_one_line_not_a_traceback(tmp_path, where):
    from teperf.sides import cachedir

    (tmp_path / "file").write_text("x")
    root = tmp_path / "file" if where == "file" else tmp_path / "file" / "sub"
    with pytest.raises(TeperfError) as exc:
        cachedir.kind_dir("trees", root)
    assert "a file is in the way" in str(exc.value) and "--cache-dir" in str(exc.value)


def _planted_repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    env = dict(os.environ, GIT_AUTHOR_NAME="n", GIT_AUTHOR_EMAIL="n@x", GIT_COMMITTER_NAME="n")
    env["GIT_COMMITTER_EMAIL"] = "n@x"
    for side in ("base", "head"):
        shutil.rmtree(repo / "demo_blocks", ignore_errors=True)
        shutil.copytree(ROOT / "examples" / "planted" / side / "demo_blocks", repo / "demo_blocks")
        for args in (["init", "-q"] if side == "base" else [], ["add", "-A"], ["commit", "-qm", side]):
            if args:
                subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)
    return repo


def test_a_package_dir_in_neither_commit_is_named_as_missing(tmp_path, capsys):
    repo = _planted_repo(tmp_path)
    argv = ["compare", "HEAD~1..HEAD", "--repo", str(repo), "--config", "demo", "--plan", "--package-dir"]
    code, out, err = run_in_process([*argv, "nope/dir"], capsys)
    assert code == 2 and "Traceback" not in err
    assert err.splitlines()[-1].startswith("teperf: error: --package-dir nope/dir is in neither"), err
    assert "is not named" not in err
    code, out, err = run_in_process([*argv, "demo_blocks"], capsys)
    assert code == 0, err


def test_backfill_dry_run_lists_the_commits_and_measures_nothing(tmp_path, capsys):
    repo = _planted_repo(tmp_path)
    history = tmp_path / "history"
    argv = ["nightly", "--repo", str(repo), "--config", "demo", "--dry-run", "--history", str(history)]
    code, out, err = run_in_process([*argv, "--backfill", "HEAD~1..HEAD"], capsys)
    assert code == 0, err
    assert "would measure 2 commit(s)" in out and "base" in out and "head" in out, out
    assert not history.exists()  # nothing measured, nothing stored
    code, out, err = run_in_process([*argv, "--backfill", "HEAD..HEAD"], capsys)
    assert code == 0 and "would measure 1 commit(s)" in out, (out, err)


def test_a_reversed_backfill_range_is_refused(tmp_path, capsys):
    repo = _planted_repo(tmp_path)
    argv = ["nightly", "--repo", str(repo), "--config", "demo", "--dry-run", "--history", str(tmp_path / "h")]
    one_error(
        *run_in_process([*argv, "--backfill", "HEAD..HEAD~1"], capsys), "adds no commit", "HEAD~1..HEAD"
    )


@pytest.mark.parametrize(
    "flag, value", [("--budget", "5m"), ("--config", "demo"), ("--results-dir", "somewhere")]
)
def test_history_refuses_the_explain_options_without_explain(flag, value, tmp_path, capsys):
    argv = ["history", "--history", str(ROOT / "tests" / "fixtures" / "history-v1"), flag, value]
    one_error(*run_in_process(argv, capsys), f"{flag} is for --explain", "--changes --explain")


@pytest.mark.parametrize("sha", ["not a sha!", "", "abc", "v1.0", "a" * 65])
def test_import_refuses_a_sha_that_is_no_commit_hash(sha, tmp_path, capsys):
    bundle = str(BUNDLES / "v1-compare-counters")
    argv = ["import", bundle, "--history", str(tmp_path / "h"), "--sha", sha]
    one_error(*run_in_process(argv, capsys), "is not a commit hash", "git rev-parse")
    assert not (tmp_path / "h").exists()


@pytest.mark.parametrize("exe", ["/bin/true", "/bin/false"])
def test_doctor_fails_an_interpreter_that_is_no_python(exe):
    from teperf import doctor

    (check,) = doctor.check_versions(exe)
    assert check.status == "fail" and "does not answer like a Python 3" in check.detail, check


def test_a_path_unused_because_modules_picked_built_ins_names_them(capsys):
    argv = ["run", "--config", "demo", "--path", str(ROOT / "examples" / "planted" / "base")]
    code, out, err = run_in_process([*argv, "--modules", "LayerNormMLP"], capsys)
    one_error(code, out, err, "the modules measured (LayerNormMLP) are torch's built-in", "check --modules")


@pytest.mark.parametrize("spec, end", [("..HEAD", "A"), ("HEAD~1..", "B")])
def test_a_backfill_range_without_an_end_says_which(spec, end, tmp_path, capsys):
    repo = _planted_repo(tmp_path)
    argv = ["nightly", "--repo", str(repo), "--config", "demo", "--dry-run", "--history", str(tmp_path / "h")]
    one_error(*run_in_process([*argv, "--backfill", spec], capsys), f"leaves out {end}", "name both ends")


def test_an_empty_path_is_refused_and_a_relative_one_says_where_from(tmp_path, monkeypatch, capsys):
    one_error(*run_in_process(["run", "--config", "demo", "--path", ""], capsys), "--path is empty")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_in_process(["run", "--config", "demo", "--path", "examples/planted/base"], capsys)
    one_error(code, out, err, f"'examples/planted/base' (from {tmp_path}) is not a directory")
    code, out, err = run_in_process(["compare", "--base-path", "", "--head-path", "x"], capsys)
    one_error(code, out, err, "--base-path is empty")


@pytest.mark.parametrize("command", ["nightly --dry-run", "import x"])
def test_a_shard_count_of_zero_is_named(command, capsys):
    one_error(*run_in_process([*command.split(), "--shard", "1/0"], capsys), "N, the number of shards")


def test_a_non_ascii_table_name_says_to_quote_it(tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text('backend = "torch"\n[modules.Lïnear]\nfactory = "x:y"\n', encoding="utf-8")
    one_error(*run_in_process(["run", "--config", str(path)], capsys), "invalid TOML", "is quoted")
    path.write_text("backend = \n", encoding="utf-8")
    code, out, err = run_in_process(["run", "--config", str(path)], capsys)
    one_error(code, out, err, "fix the syntax of the config file")
    assert "quoted" not in err


def test_a_second_ctrl_c_during_the_exit_clean_up_prints_no_traceback(tmp_path, monkeypatch):
    import atexit

    from teperf.engine import spawn

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    registered = []
    monkeypatch.setattr(atexit, "register", lambda fn, *args: registered.append((fn, args)))
    monkeypatch.setattr(spawn, "_worker_code", {})
    root = spawn.worker_code_dir()
    ((fn, args),) = registered
    monkeypatch.setattr(shutil, "rmtree", interrupted)
    fn(*args)  # no KeyboardInterrupt out of the atexit callback
    monkeypatch.undo()
    shutil.rmtree(root)
