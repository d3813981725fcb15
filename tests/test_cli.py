"""The CLI's answers to bad input and to no subcommand (in-process): a refused option or value is one
`teperf: error:` line and exit 2, before any worker starts."""

from __future__ import annotations

import pytest
from conftest import ROOT, one_error, run_in_process


@pytest.mark.parametrize(
    "flag", ["--min-effect", "--precision", "--max-contended", "--min-effect-once", "--timeout"]
)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_every_float_option_refuses_nan_and_infinity(flag, value, capsys):
    one_error(*run_in_process(["run", flag, value], capsys), flag)


@pytest.mark.parametrize("argv", [["dashboard", "--min-effect", "nan"], ["dashboard", "--sig-level", "nan"]])
def test_other_commands_float_options_refuse_nan(argv, capsys):
    one_error(*run_in_process(argv, capsys), argv[1])


def test_git_side_options_with_paths_are_refused(tmp_path, capsys):
    argv = ["compare", "--base-path", str(tmp_path), "--head-path", str(tmp_path), "--strategy", "overlay"]
    one_error(*run_in_process(argv, capsys), "--strategy", "BASE..HEAD")


def test_server_pairs_without_forkserver_is_refused(capsys):
    one_error(*run_in_process(["run", "--server-pairs", "3"], capsys), "--spawn forkserver")
    from teperf.config import build_config

    assert build_config({}, {"server_pairs": 3, "spawn": "forkserver"}).schedule.server_pairs == 3
    assert build_config({"schedule": {"server_pairs": 3}}, {}).schedule.server_pairs == 3  # waits for --spawn


@pytest.mark.parametrize("argv", [[], ["counters"], ["cache"]])
def test_a_group_without_a_subcommand_prints_its_help(argv, capsys):
    code, out, err = run_in_process(argv, capsys)
    assert code == 0 and out.startswith("Usage: teperf") and "error" not in err


def test_a_tiny_timeout_names_the_timeout_not_the_iters(capsys):
    one_error(*run_in_process(["run", "--timeout", "1e-9"], capsys), "raise --timeout")
    one_error(
        *run_in_process(["run", "--iters", "1000000000", "--timeout", "1"], capsys),
        "5,000 s",
        "lower --iters",
    )


@pytest.mark.parametrize(
    "command", ["run", "compare", "counters check --expected x.toml", "nightly", "bisect a..b --cell X/fp32"]
)
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_config_is_refused_not_read_as_the_default(command, value, capsys):
    code, out, err = run_in_process([*command.split(), "--config", value], capsys)
    one_error(code, out, err, "--config is empty", "default, demo")


def test_an_empty_path_is_refused_and_a_relative_one_says_where_from(tmp_path, monkeypatch, capsys):
    one_error(*run_in_process(["run", "--config", "demo", "--path", ""], capsys), "--path is empty")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_in_process(["run", "--config", "demo", "--path", "examples/planted/base"], capsys)
    one_error(code, out, err, f"'examples/planted/base' (from {tmp_path}) is not a directory")
    code, out, err = run_in_process(["compare", "--base-path", "", "--head-path", "x"], capsys)
    one_error(code, out, err, "--base-path is empty")


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--min-effect", "1e9"],
        ["run", "--min-effect-once", "101"],
        ["dashboard", "--history", "x", "--out", "y", "--min-effect", "1e9"],
    ],
)
def test_a_min_effect_past_100_percent_is_refused(argv, capsys):
    one_error(*run_in_process(argv, capsys), "between 0 and 100")


def test_one_path_side_alone_is_refused_naming_the_other(capsys):
    base = str(ROOT / "examples" / "planted" / "base")
    one_error(
        *run_in_process(["compare", "--config", "demo", "--base-path", base], capsys), "without --head-path"
    )


def test_strategy_env_is_taken_with_two_interpreters(tmp_path, capsys):
    argv = ["compare", "--strategy", "env", "--base-python", str(tmp_path / "a" / "python")]
    code, out, err = run_in_process([*argv, "--head-python", str(tmp_path / "b" / "python")], capsys)
    one_error(code, out, err, "does not exist")  # it got as far as the interpreters
    assert "only applies" not in err
