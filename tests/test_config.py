import pytest

from teperf.config import Config, available_cores, build_config, load_config, parse_cpu_list, parse_shape
from teperf.errors import TeperfError


def test_defaults_are_cpu_reference():
    cfg = load_config("default", {})
    assert cfg.backend == "torch" and cfg.device == "cpu"
    assert [m.name for m in cfg.modules] == ["Linear", "LayerNormLinear", "LayerNormMLP"]
    assert cfg.recipes == ("fp32",)
    assert cfg.core == available_cores()[-1]
    assert cfg.schedule.processes >= 3  # verdicts need several pairs


def test_cli_overrides_win():
    cfg = load_config("default", {"modules": ["Linear"], "iters": 7, "shapes": [(4, 64)], "processes": 2, "min_effect_pct": 3.0})
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
        ({"modules": {"B": {"factory": "nocolon"}}}, {}, "needs factory"),
        ({}, {"backend": "jax"}, "unknown backend"),
        ({"stats": {"alpha": 0.9}}, {}, "alpha must be between"),
        ({"stats": {"alpha": "x"}}, {}, "alpha must be between"),
        ({"stats": {"min_effect_pct": "1"}}, {}, "min_effect_pct must be a number"),
        ({"stats": {"noise_limit_pct": -2}}, {}, "noise_limit_pct must be a number"),
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
    with pytest.raises(TeperfError, match="one of: default, demo, nightly, pr-thread"):
        load_config("nope", {})


@pytest.mark.parametrize("raw, overrides, want", [({}, {}, None), ({"prestart": "auto"}, {}, None), ({}, {"prestart": "2"}, 2), ({"prestart": 5}, {"prestart": "auto"}, None), ({"prestart": 0}, {}, 0)])
def test_prestart_auto_or_count(raw, overrides, want):
    assert build_config(raw, overrides).prestart == want


@pytest.mark.parametrize("text, cores", [("7\n", {7}), ("3,11", {3, 11}), ("6-7", {6, 7}), ("0-1,8-9", {0, 1, 8, 9})])
def test_parse_cpu_list(text, cores):
    assert parse_cpu_list(text) == cores
