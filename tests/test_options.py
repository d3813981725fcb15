"""The option groups: what the click options become (SideOptions, MeasureOptions), and that every field
reaches the library call that takes it."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from teperf.commands._common import SIDE_FIELDS, take_measure, take_sides
from teperf.errors import TeperfError
from teperf.options import SideOptions


def test_side_options_are_taken_whole_and_held_by_the_bisect_factory():
    given = {
        "repo": "/r",
        "strategy": "build",
        "package": "pkg",
        "package_dir": "src/pkg",
        "layout": "layout.toml",
        "build_command": "make  -j 2 'a b'",
        "jobs": 3,
        "cache_dir": "/c",
        "allow_dirty": True,
        "python": "/py",
        "cuda_archs": "80;90",
        "package_hint": "model",  # not a flag: from the config's factories (grouped)
    }
    assert set(given) == set(SIDE_FIELDS)
    kwargs = dict(given, other=1)
    sides = take_sides(kwargs)
    assert kwargs == {"other": 1} and sides.build_command == ("make", "-j", "2", "a b")
    assert sides.cuda_archs == "80;90" and sides.package_hint == "model" and sides.python == "/py"
    from teperf.bisect.sides import GitSideFactory

    factory = GitSideFactory(sides)
    assert factory.opts is sides and (factory.package, factory.package_dir) == ("pkg", "src/pkg")
    assert SideOptions().interpreter == sys.executable
    with pytest.raises(TeperfError, match="--jobs 0: must be at least 1"):
        SideOptions(jobs=0)
    with pytest.raises(TeperfError, match="is not a list of CUDA archs"):
        SideOptions(cuda_archs="9.0")


def test_measure_options_take_config_counters_sweep_and_fail_on():
    kwargs = {
        "config_path": None,
        "processes": 4,
        "counters": True,
        "sweep": "dim0=4,8",
        "fail_on": ("slower,faster",),
        "fmt": "json",
        "results_dir": "out",
        "label": "kept",
    }
    measure = take_measure(kwargs, default_config="demo")
    assert kwargs == {"label": "kept"}
    assert measure.config.source.endswith("demo.toml") and measure.config.schedule.processes == 4
    assert measure.config.counters and "counters" in measure.config.from_cli
    assert measure.sweep.key == "dim0" and len(measure.config.shapes) == 2 * len(
        take_measure({}).config.shapes
    )
    assert measure.fail_on == {"slower", "faster"} and (measure.fmt, measure.results_dir) == ("json", "out")
    with pytest.raises(TeperfError, match="--fail-on"):
        take_measure({"fail_on": ("worse",)})
    assert dataclasses.replace(measure, fmt="csv").config is measure.config


def test_processes_under_precision_is_said_to_be_unused(capsys):
    # issue 59: --processes with --precision was dropped without a word
    take_measure({"processes": 4, "precision_pct": 2.0})
    err = capsys.readouterr().err
    assert err.startswith("teperf: --processes 4 is not used: with --precision 2 the pairs run until every")
    assert "leave --processes out" in err and err.count("\n") == 1
    take_measure({"processes": 4})  # a fixed schedule uses it
    take_measure({"precision_pct": 2.0})  # the config's processes: not typed, not said
    assert capsys.readouterr().err == ""


def test_a_repeated_list_flag_adds_up_as_shape_does():
    # issue 59: --modules A --modules B kept only B, while --shape X --shape Y measures both
    from teperf.cli import cli

    argv = ["--modules", "Linear", "--modules", "LayerNormLinear,LayerNormMLP", "--modes", "eager"]
    argv += ["--modes", "compile", "--shape", "8,2,64", "--shape", "4,64"]
    params = cli.commands["compare"].make_context("compare", argv).params
    assert params["modules"] == ["Linear", "LayerNormLinear", "LayerNormMLP"]
    assert params["modes"] == ["eager", "compile"] and params["shapes"] == [(8, 2, 64), (4, 64)]
    assert cli.commands["compare"].make_context("compare", []).params["modules"] is None  # not given


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
