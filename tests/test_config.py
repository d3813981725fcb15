import pytest
from conftest import ROOT, one_error, run_in_process

from teperf.config import (
    DEFAULT_PRECISION_BUDGET_S,
    Config,
    build_config,
    load_config,
    parse_duration,
    parse_shape,
)
from teperf.cpus import available_cores
from teperf.errors import TeperfError


def test_defaults_are_cpu_reference():
    cfg = load_config("default", {})
    assert cfg.backend == "torch" and cfg.device == "cpu"
    assert [m.name for m in cfg.modules] == ["Linear", "LayerNormLinear", "LayerNormMLP"]
    assert cfg.recipes == ("fp32",)
    assert cfg.core == available_cores()[-1]
    assert cfg.schedule.processes >= 3  # verdicts need several pairs


def test_cli_overrides_win():
    cfg = load_config(
        "default",
        {"modules": ["Linear"], "iters": 7, "shapes": [(4, 64)], "processes": 2, "min_effect_pct": 3.0},
    )
    assert [m.name for m in cfg.modules] == ["Linear"]
    assert cfg.schedule.iters == 7 and cfg.schedule.processes == 2
    assert cfg.shapes == ((4, 64),)
    assert cfg.stats.min_effect_pct == 3.0


def test_none_override_means_not_given():
    cfg = load_config("default", {"iters": None})
    assert cfg.schedule.iters == load_config("default", {}).schedule.iters


def test_factory_modules():
    raw = {"modules": {"Block": {"factory": "pkg.mod:make", "kwargs": {"hidden": 8}}}}
    cfg = build_config(raw, {})
    (spec,) = cfg.modules
    assert spec.factory == "pkg.mod:make" and spec.kwargs == {"hidden": 8}


@pytest.mark.parametrize(
    "raw, overrides, needle",
    [
        ({"bogus": 1}, {}, "unknown config key 'bogus'"),
        ({"schedule": {"iterz": 3}}, {}, "unknown config key 'iterz' in [schedule]"),
        ({}, {"modules": ["Nope"]}, "unknown module 'Nope'"),
        ({}, {"recipes": ["fp9"]}, "unknown recipe 'fp9'"),
        ({}, {"modes": ["turbo"]}, "unknown mode 'turbo'"),
        ({}, {"modes": ["cuda-graph"]}, "needs --device cuda"),
        ({}, {"iters": 0}, "iters must be an integer >= 1"),
        ({}, {"core": 9999}, "core 9999 is not available"),
        ({"shapes": [[8, 0]]}, {}, "malformed shape"),
        ({"modules": {"B": {"factory": "nocolon"}}}, {}, "is not of the form"),
        ({}, {"backend": "jax"}, "unknown backend"),
        ({"stats": {"alpha": 0.9}}, {}, "alpha must be between"),
        ({"stats": {"alpha": "x"}}, {}, "alpha must be between"),
        ({"stats": {"min_effect_pct": "1"}}, {}, "min_effect_pct must be a number"),
        ({"stats": {"noise_limit_pct": 10}}, {}, "'noise_limit_pct' in [stats] was retired"),
        ({}, {"precision_pct": 0}, "precision_pct (--precision) must be a number"),
        ({}, {"precision_pct": "x"}, "precision_pct (--precision) must be a number"),
        ({}, {"budget_s": "5 minutes"}, "malformed duration '5 minutes'"),
        ({}, {"budget_s": "0s"}, "must be a positive duration"),
        ({"schedule": {"min_pairs": 1}}, {}, "min_pairs must be an integer >= 2"),
        ({"schedule": 5}, {}, "schedule must be a table"),
        ({"stats": "x"}, {}, "stats must be a table"),
        ({"modules": 5}, {}, "modules must be a list"),
        ({"recipes": "fp32"}, {}, "recipes must be a list"),
        ({"modes": "eager"}, {}, "modes must be a list"),
        ({"shapes": [8, 2, 256]}, {}, "shapes must be a list of shapes"),
        ({}, {"prestart": "lots"}, "prestart must be a whole number"),
        ({"prestart": -1}, {}, "prestart must be a whole number"),
    ],
)
def test_bad_input_is_one_line_with_fix(raw, overrides, needle):
    with pytest.raises(TeperfError) as err:
        build_config(raw, overrides)
    msg = err.value.one_line()
    assert needle in msg
    assert "\n" not in msg and ";" in msg  # problem; fix


@pytest.mark.parametrize("text, dims", [("8,2,256", (8, 2, 256)), ("4x64", (4, 64)), (" 16 ", (16,))])
def test_parse_shape(text, dims):
    assert parse_shape(text) == dims


@pytest.mark.parametrize("text", ["", "8,,2", "a,b", "8,-1", "8,0"])
def test_parse_shape_rejects(text):
    with pytest.raises(TeperfError, match="shape"):
        parse_shape(text)


def test_missing_and_invalid_config_file(tmp_path):
    with pytest.raises(TeperfError, match="not found"):
        load_config(tmp_path / "nope.toml", {})
    bad = tmp_path / "bad.toml"
    bad.write_text("backend = ")
    with pytest.raises(TeperfError, match="invalid TOML"):
        load_config(bad, {})


def test_every_shipped_config_loads():
    from teperf.config import shipped_names

    names = shipped_names()
    assert {"default", "demo", "nightly", "pr-thread"} <= set(names)
    for name in names:
        cfg = load_config(name, {})
        assert isinstance(cfg, Config) and cfg.modules, name
        assert cfg.source == f"teperf.configs:{name}.toml"


def test_unknown_config_lists_the_shipped_names():
    with pytest.raises(TeperfError, match="one of: default, demo, dsv3, nightly, pr-thread"):
        load_config("nope", {})


@pytest.mark.parametrize(
    "raw, overrides, want",
    [
        ({}, {}, None),
        ({"prestart": "auto"}, {}, None),
        ({}, {"prestart": "2"}, 2),
        ({"prestart": 5}, {"prestart": "auto"}, None),
        ({"prestart": 0}, {}, 0),
    ],
)
def test_prestart_auto_or_count(raw, overrides, want):
    assert build_config(raw, overrides).prestart == want


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("5m", 300),
        ("90s", 90),
        ("1h", 3600),
        ("1h30m", 5400),
        ("2.5m", 150),
        ("300", 300),
        (" 45 ", 45),
        (120, 120),
        (1.5, 1.5),
        ("1M", 60),
    ],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5 minutes", "m", "5x", "5m3", "-5m", "1h-2m", "0", True, "inf", "nan"])
def test_parse_duration_rejects_with_one_line(text):
    with pytest.raises(TeperfError) as err:
        parse_duration(text)
    msg = err.value.one_line()
    assert "--budget" in msg and "\n" not in msg and ";" in msg


def test_precision_and_budget_from_toml_and_cli():
    cfg = build_config({"schedule": {"precision_pct": 2, "budget_s": "3m", "min_pairs": 5}}, {})
    assert (cfg.schedule.precision_pct, cfg.schedule.budget_s, cfg.schedule.min_pairs) == (2.0, 180.0, 5)
    cfg = build_config({"schedule": {"precision_pct": 2}}, {"precision_pct": 1.0, "budget_s": "90s"})
    assert (cfg.schedule.precision_pct, cfg.schedule.budget_s) == (1.0, 90.0)
    # --precision alone gets the default budget; neither given: the fixed schedule, no limit
    assert build_config({}, {"precision_pct": 1.0}).schedule.budget_s == DEFAULT_PRECISION_BUDGET_S
    plain = build_config({}, {})
    assert plain.schedule.precision_pct is None and plain.schedule.budget_s is None


def test_the_table_makes_the_toml_keys_the_overrides_and_the_flags():
    from teperf import config
    from teperf.cli import cli

    flagged = {k.name: k.flag for k in config.KEYS if k.option}
    assert set(config.OVERRIDE_KEYS) == set(flagged) and config.CLI_FLAGS == flagged
    # every key is a TOML key of its table; one that is not in the table is refused there
    for k in config.KEYS:
        where = {k.section: {k.name: k.default}} if k.section else {k.name: k.default}
        if not k.matrix and k.default is not None:
            build_config(where, {})
        with pytest.raises(TeperfError, match="unknown config key 'nope'"):
            build_config({k.section: {"nope": 1}} if k.section else {"nope": 1}, {})
    # every measuring command has every flag, and it lands on its key
    for name in ("run", "compare", "nightly", "bisect"):
        params = {p.name: p.opts for p in cli.commands[name].params}
        assert {n: params[n][0] for n in flagged} == flagged, name


def test_a_key_check_sees_the_keys_before_it_and_how_the_user_named_it():
    with pytest.raises(TeperfError, match="--server-pairs must be an integer >= 1"):
        build_config({}, {"server_pairs": 0})
    with pytest.raises(TeperfError, match="^server_pairs must be an integer >= 1"):
        build_config({"schedule": {"server_pairs": 0}}, {})
    assert build_config({"lanes": 1, "core": 0}, {}).lanes == 1
    assert build_config({"stats": {"min_effect_pct": 2}}, {}).stats.min_effect_pct == 2  # kept as given
    assert build_config({}, {"prestart": "3"}).prestart == 3


def test_backend_from_the_command_line_brings_its_own_device_as_help_says():
    # issue 59: --backend te over the default config (device cpu) was refused as "device is cpu"
    torch_cpu = {"backend": "torch", "device": "cpu", "recipes": ["fp32"]}
    assert build_config(torch_cpu, {"backend": "te", "recipes": ["bf16"]}).device == "cuda"
    assert (
        build_config({"backend": "te", "device": "cuda"}, {"backend": "torch", "recipes": ["fp32"]}).device
        == "cpu"
    )
    assert build_config({"backend": "torch", "device": "cuda"}, {"backend": "torch"}).device == "cuda"  # same
    with pytest.raises(TeperfError, match="--backend te needs a CUDA device, but --device is cpu"):
        build_config(torch_cpu, {"backend": "te", "device": "cpu", "recipes": ["bf16"]})


def test_a_te_config_on_a_machine_without_a_gpu_says_so(monkeypatch):
    # issue 59: it said only "install transformer_engine"
    import importlib.util
    import sys

    from teperf.engine import probe
    from teperf.sides import Side

    if importlib.util.find_spec("transformer_engine"):
        pytest.skip("transformer_engine is installed here: nothing lacks")
    monkeypatch.setattr(probe, "has_nvidia_gpu", lambda: False, raising=False)
    config = load_config("pr-thread")
    side = Side(label="run", python=sys.executable, sys_path=(), description={})
    with pytest.raises(TeperfError) as info:
        probe.preflight(config, [side])
    assert "on a CUDA GPU, and this machine has none" in str(info.value) and "--config demo" in info.value.fix


def test_an_old_python_is_named_by_its_version_not_its_symptom(tmp_path):
    # issue 59: Python 2.7 read "No module named util", 3.6 "install torch"
    import sys

    from teperf.engine import probe
    from teperf.sides import Side

    old = tmp_path / "python3.6"  # this Python, saying it is 3.6 (the preflight's first test)
    fake = "import sys; code = sys.argv[1]; sys.argv = ['-c'] + sys.argv[2:]; sys.version_info = (3, 6, 15)"
    fake += "; sys.version = '3.6.15 (fake)'; exec(code)"
    old.write_text(f'#!/bin/sh\nshift\nexec {sys.executable} -c "{fake}" "$@"\n')
    old.chmod(0o755)
    side = Side(label="base", python=str(old), sys_path=(), description={})
    with pytest.raises(TeperfError) as info:
        probe.preflight(load_config("demo"), [side])
    assert "is Python 3.6.15; teperf's workers need Python 3.9 or newer" in str(info.value)
    assert info.value.fix == "point --base-python at a Python >= 3.9 that has torch"


def test_an_interpreter_that_does_not_start_is_named_by_its_cause(tmp_path):
    # issue 59: a failing pyenv shim was named by its last line ("python2 and python3 to be found.")
    from teperf.engine import probe
    from teperf.sides import Side

    shim = tmp_path / "python3.8"
    shim.write_text(
        "#!/bin/sh\necho 'pyenv: python3.8: command not found' >&2\necho >&2\n"
        "echo 'The `python3.8` command exists in these Python versions:' >&2\necho '  3.8.10' >&2\n"
        "echo 'Note: See pyenv help global for tips on allowing both' >&2\n"
        "echo '      python2 and python3 to be found.' >&2\nexit 127\n"
    )
    shim.chmod(0o755)
    with pytest.raises(TeperfError) as info:
        probe.preflight(load_config("demo"), [Side(label="head", python=str(shim), description={})])
    assert "fails to start (exit 127): pyenv: python3.8: command not found" in str(info.value)


def test_config_directory_says_directory(tmp_path, capsys):
    from conftest import run_in_process

    code, _, err = run_in_process(["run", "--config", str(tmp_path), "--path", "."], capsys)
    assert code == 2 and "is a directory, not a TOML file" in err and "not found" not in err


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


def test_a_malformed_factory_says_malformed_not_missing():
    from teperf.config import build_config

    with pytest.raises(TeperfError) as err:
        build_config({"modules": {"B": {"factory": "nocolon"}}}, {})
    assert "not of the form" in err.value.one_line() and "add the factory key" not in err.value.one_line()


def test_a_non_ascii_table_name_says_to_quote_it(tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text('backend = "torch"\n[modules.Lïnear]\nfactory = "x:y"\n', encoding="utf-8")
    one_error(*run_in_process(["run", "--config", str(path)], capsys), "invalid TOML", "is quoted")
    path.write_text("backend = \n", encoding="utf-8")
    code, out, err = run_in_process(["run", "--config", str(path)], capsys)
    one_error(code, out, err, "fix the syntax of the config file")
    assert "quoted" not in err


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"modules": ["Linear", "Linear"]}, "--modules names Linear twice"),
        ({"recipes": ["fp32", "fp32"]}, "--recipes names fp32 twice"),
        ({"modes": ["eager", "eager"]}, "--modes names eager twice"),
        ({"shapes": [[8, 2, 64], [8, 2, 64]]}, "--shape names 8,2,64 twice"),
    ],
)
def test_a_cell_named_twice_is_refused(overrides, words):
    from teperf.config import build_config
    from teperf.errors import TeperfError

    with pytest.raises(TeperfError, match=words):
        build_config({}, overrides)


def test_the_shipped_configs_name_each_cell_once():
    from teperf.config import load_config

    for name in ["default", "demo", "dsv3", "nightly", "pr-thread", "te-model"]:
        load_config(name)


def test_a_config_given_as_a_pipe_is_read_not_called_missing(tmp_path):
    import os

    from teperf.config import resolve_config

    text = (ROOT / "teperf" / "configs" / "demo.toml").read_text()
    read, write = os.pipe()  # what a shell's --config <(...) passes: /dev/fd/N, a pipe
    os.write(write, text.encode()), os.close(write)
    try:
        assert resolve_config(f"/dev/fd/{read}")[1] == text
    finally:
        os.close(read)
