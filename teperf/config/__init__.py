"""TOML file + CLI overrides -> one typed :class:`Config`: reading the TOML (a path or a shipped config),
refusing unknown keys, the matrix of what is measured, then each key's check from the table in keys.py.
The names the rest of teperf reads from the table and the recorded config are re-exported here."""

from __future__ import annotations

import dataclasses
import importlib.resources
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Mapping

from teperf.config.keys import (  # noqa: F401 (re-exported: teperf.config is where callers import them)
    _SECTION_TYPES,
    AUTO_PLANNED,
    BACKENDS,
    CLI_FLAGS,
    DEFAULT_PRECISION_BUDGET_S,
    DEVICES,
    KEYS,
    METRIC_FIELD,
    METRICS,
    MODES,
    OVERRIDE_KEYS,
    SECTIONS,
    Config,
    ModuleSpec,
    Option,
    Schedule,
    Stats,
    _choice,
    _named,
)
from teperf.config.recorded import RecordedConfig, accepts, read_config, type_hints  # noqa: F401
from teperf.cpus import check_lanes
from teperf.errors import TeperfError
from teperf.numbers import parse_duration  # noqa: F401 (re-exported)

CONFIGS_PACKAGE = "teperf.configs"  # package data: the same in editable and normal installs
_KNOWN = {s: {k.name for k in KEYS if k.section == s} | set(() if s else SECTIONS) for s in (None, *SECTIONS)}
_RETIRED = {
    "noise_limit_pct": "the 'noisy' verdict is gone: an interval that reaches past +-min_effect_pct is "
    "'inconclusive'; delete noise_limit_pct from [stats]"
}


def backend_module(name: str):
    """The worker backend's static facts (MODULES, RECIPES, check_shape): it imports torch only when used."""
    _choice(BACKENDS, "backend", "use one of")(name)
    from teperf.worker.backends import get_backend

    return get_backend(name)


def parse_shape(text: str) -> tuple[int, ...]:
    if not re.fullmatch(r"\s*\d+(\s*[,x]\s*\d+)*\s*", text or ""):
        raise TeperfError(
            f"malformed shape {text!r}", "write it as comma-separated positive integers, e.g. --shape 8,2,256"
        )
    dims = tuple(int(d) for d in re.split(r"[,x]", text.replace(" ", "")))
    if any(d <= 0 for d in dims):
        raise TeperfError(f"malformed shape {text!r}: dimensions must be positive", "e.g. --shape 8,2,256")
    return dims


def shipped_configs() -> dict[str, str]:
    root = importlib.resources.files(CONFIGS_PACKAGE)
    return {p.name[: -len(".toml")]: p.read_text() for p in root.iterdir() if p.name.endswith(".toml")}


def shipped_names() -> list[str]:
    return sorted(shipped_configs())


def resolve_config(name: str) -> tuple[str, str]:
    """(source, TOML text) of a path, or of a shipped config's name (with or without .toml)."""
    path = Path(name)
    if path.exists() and not path.is_dir():  # a file, or a pipe: --config <(...) is /dev/fd/63
        try:
            return str(path), path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise TeperfError(f"cannot read config file {name!r}: {exc}", "give a readable UTF-8 TOML file")
    shipped = shipped_configs()
    stem = name[: -len(".toml")] if name.endswith(".toml") else name
    if stem in shipped:
        return f"{CONFIGS_PACKAGE}:{stem}.toml", shipped[stem]
    if path.is_dir():
        fix = f"give the TOML file inside it, or one of: {', '.join(sorted(shipped))}"
        raise TeperfError(f"config {name!r} is a directory, not a TOML file", fix)
    raise TeperfError(
        f"config file {name!r} not found", f"give a path or one of: {', '.join(sorted(shipped))}"
    )


def load_config(
    path: str | os.PathLike | None = None,
    overrides: Mapping[str, Any] | None = None,
    budget_plans: bool = True,
) -> Config:
    """Read the TOML at ``path`` (optional), apply ``overrides`` (CLI values; None = not given).
    ``budget_plans``: a budget alone plans the schedule (compare, run); False where --budget bounds a
    whole job of many compares (bisect, nightly), whose compares keep the config's fixed schedule."""
    raw: dict[str, Any] = {}
    source = None
    if path is not None:
        source, text = resolve_config(str(path))
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            fix = "fix the syntax of the config file"
            at = re.search(r"at line (\d+)", str(exc))
            lines = text.splitlines()
            if at and 0 < int(at.group(1)) <= len(lines) and not lines[int(at.group(1)) - 1].isascii():
                fix += ' (a name with other characters than A-Z a-z 0-9 _ - is quoted: [modules."Nämé"])'
            raise TeperfError(f"{source}: invalid TOML ({exc})", fix)
    return build_config(raw, overrides or {}, source, budget_plans)


def _unknown(keys, known, where: str):
    extra = sorted(set(keys) - set(known))
    if retired := [key for key in extra if key in _RETIRED]:
        raise TeperfError(f"config key {retired[0]!r} in {where} was retired", _RETIRED[retired[0]])
    if extra:
        raise TeperfError(
            f"unknown config key {extra[0]!r} in {where}", f"known keys: {', '.join(sorted(known))}"
        )


def _table(raw: Mapping[str, Any], key: str) -> dict:
    value = raw.get(key) or {}
    if not isinstance(value, dict):
        raise TeperfError(f"{key} must be a table, got {value!r}", f"write it as a [{key}] section")
    return dict(value)


def _string_list(value, key: str) -> list | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        fix = f'write e.g. {key} = ["{key[:-1]}"]' if key != "recipes" else 'write e.g. recipes = ["bf16"]'
        raise TeperfError(f"{key} must be a list of names, got {value!r}", fix)
    return list(value)


def build_config(
    raw: Mapping[str, Any], overrides: Mapping[str, Any], source: str | None = None, budget_plans: bool = True
) -> Config:
    _unknown(raw, _KNOWN[None], "the top level")
    given = {None: raw}
    for section in SECTIONS:
        given[section] = _table(raw, section)
        _unknown(given[section], _KNOWN[section], f"[{section}]")
    ov = {k: v for k, v in overrides.items() if v is not None}

    resolved = _matrix(raw, ov)
    # in the dataclasses' order: a check may read the keys before it (lanes reads core)
    for k in [k for k in KEYS if not k.matrix]:  # every one of them has a check
        value = ov[k.name] if k.name in ov else given[k.section].get(k.name, k.default)
        resolved[k.name] = k.check(value, _named(k.name, ov), resolved)
    tables = {
        s: _SECTION_TYPES[s](**{k.name: resolved.pop(k.name) for k in KEYS if k.section == s})
        for s in SECTIONS
    }
    sched = tables["schedule"]
    if sched.kind == "auto" and not budget_plans and "kind" not in ov and sched.precision_pct is None:
        sched = tables["schedule"] = dataclasses.replace(sched, kind="fixed")
    if sched.kind == "auto":  # a config's own numbers are its --schedule fixed
        pilot = {k: getattr(Schedule, k) for k in AUTO_PLANNED if k not in ov}
        tables["schedule"] = dataclasses.replace(sched, **pilot)
        if "lanes" not in ov and "lanes" not in raw:
            resolved["lanes"] = check_lanes("auto", resolved["core"])
    elif "kind" in ov:  # --schedule fixed: the config's pairs as written, not its target or budget
        targets = {k: None for k in ("precision_pct", "budget_s") if k not in ov}
        tables["schedule"] = dataclasses.replace(sched, **targets)
    return Config(**tables, **resolved, source=source, from_cli=tuple(sorted(ov)))


def _builtin(name: str, facts) -> bool:
    """Whether the backend builds ``name`` itself: one of its modules or models (te: DSv3Layer), also as a
    variant table ``[modules."DSv3Layer[splits=gpu]"]`` whose kwargs make the variant."""
    from teperf.worker.runner import module_class

    return module_class(name) in (*facts.MODULES, *getattr(facts, "MODELS", ()))


def _module_table(name: str, spec, facts, backend: str) -> ModuleSpec:
    """One [modules.NAME] table: a factory module, or a built-in one with constructor kwargs."""
    if not isinstance(spec, dict):
        fix = 'write [modules.NAME] with factory = "pkg.mod:callable"'
        raise TeperfError(f"[modules.{name}] must be a table", fix)
    _unknown(spec, {"factory", "kwargs", "inputs"}, f"[modules.{name}]")
    factory = spec.get("factory")
    kwargs = spec.get("kwargs") or {}
    inputs = spec.get("inputs")
    if inputs is not None and (not isinstance(inputs, str) or ":" not in inputs):
        raise TeperfError(
            f'[modules.{name}] inputs must be "pkg.mod:callable"',
            "name a function make_inputs(shape, dtype, device) in the side's code (docs/measuring.md, "
            "'Your own modules')",
        )
    if inputs is not None and factory is None:
        raise TeperfError(
            f"[modules.{name}] inputs needs a factory: built-in modules make their own input",
            f'add factory = "pkg.mod:callable" to [modules.{name}], or drop inputs',
        )
    if not isinstance(kwargs, dict):
        raise TeperfError(f"[modules.{name}] kwargs must be a table", "write kwargs = { name = value }")
    if factory is None and _builtin(name, facts):
        if kwargs and not getattr(facts, "TAKES_KWARGS", True):
            raise TeperfError(
                f"[modules.{name}] kwargs: the {backend} backend's built-in {name} takes no kwargs",
                f"drop kwargs, or give [modules.{name}] a factory that uses them",
            )
        return ModuleSpec(name, None, dict(kwargs))  # a built-in module with constructor kwargs
    if factory is None:
        fix = "add the factory key, or use a built-in module name"
        raise TeperfError(f'[modules.{name}] needs factory = "pkg.mod:callable"', fix)
    if not isinstance(factory, str) or not re.fullmatch(r"[\w.]+:[\w.]+", factory):
        fix = 'write the module, a colon and the function, e.g. factory = "mypkg.models:make_block"'
        raise TeperfError(f'[modules.{name}] factory {factory!r} is not of the form "pkg.mod:callable"', fix)
    return ModuleSpec(name, factory, dict(kwargs), inputs)


def _empty(key: str, ov: Mapping[str, Any], fix: str) -> TeperfError:
    return TeperfError(f"{_named(key, ov)} is empty: nothing to measure", fix)


def _shapes(shapes_raw, ov: Mapping[str, Any]) -> tuple[tuple[int, ...], ...]:
    """The shapes key (lists of ints, or --shape texts) as tuples of positive ints."""
    if isinstance(shapes_raw, (list, tuple)) and not shapes_raw:
        raise _empty("shapes", ov, "give at least one shape, e.g. shapes = [[8, 2, 256]]")
    if not isinstance(shapes_raw, (list, tuple)) or not all(
        isinstance(s, (list, tuple, str)) for s in shapes_raw
    ):
        fix = "write shapes = [[8, 2, 256]] (a list of lists)"
        raise TeperfError(f"shapes must be a list of shapes, got {shapes_raw!r}", fix)
    shapes = []
    for shape in shapes_raw:
        dims = parse_shape(shape) if isinstance(shape, str) else tuple(shape)
        if not dims or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims):
            raise TeperfError(
                f"malformed shape {shape!r}", "write shapes as lists of positive integers, e.g. [8, 2, 256]"
            )
        shapes.append(dims)
    return tuple(shapes)


def _listed(key: str, raw: Mapping[str, Any], ov: Mapping[str, Any], known) -> list | None:
    """The names of a list key (recipes, modes) as given (None: not given); given empty is refused."""
    names = ov[key] if key in ov else _string_list(raw.get(key), key)
    if names is not None and not names:
        raise _empty(key, ov, f"name at least one {key[:-1]}: {', '.join(known)}")
    return names


def _matrix(raw: Mapping[str, Any], ov: Mapping[str, Any]) -> dict:
    """What is measured: backend, device, modules, recipes, modes and shapes, which depend on each other."""
    backend = ov.get("backend", raw.get("backend", Config.backend))
    facts = backend_module(backend)
    default_device = "cpu" if backend == "torch" else "cuda"
    # --backend over a config of the other backend: its device follows, as --help says, unless given
    other = "backend" in ov and ov["backend"] != raw.get("backend", Config.backend)
    device = ov.get("device", default_device if other else raw.get("device", default_device))
    _choice(DEVICES, "device", "use one of")(device)
    if backend == "te" and device == "cpu":  # else every cell is skipped and nothing is measured
        raise TeperfError(
            f"{_named('backend', ov)} te needs a CUDA device, but {_named('device', ov)} is cpu",
            "use --device cuda on a GPU machine, or --backend torch for the CPU reference modules",
        )

    # modules: a list of names, or a table of custom modules, or both (list names + [modules.X] tables)
    mod_raw = raw.get("modules")
    custom: dict[str, ModuleSpec] = {}
    if isinstance(mod_raw, dict):
        custom = {name: _module_table(name, spec, facts, backend) for name, spec in mod_raw.items()}
    names = list(custom) if isinstance(mod_raw, dict) else _string_list(mod_raw, "modules")  # None: not given
    if "modules" in ov:
        names = list(ov["modules"])
    elif names is None:
        names = list(facts.MODULES)
    if not names:
        raise _empty("modules", ov, f"name at least one module, e.g. {', '.join(facts.MODULES[:2])}")
    for name in names:
        if name not in custom and not _builtin(name, facts):
            known = list(dict.fromkeys([*facts.MODULES, *getattr(facts, "MODELS", ()), *custom]))
            fix = f"use one of: {', '.join(known)} (or add [modules.{name}] with a factory)"
            raise TeperfError(f"unknown module {name!r} for backend {backend}", fix)
    modules = tuple(custom.get(name, ModuleSpec(name)) for name in names)

    recipes = tuple(_listed("recipes", raw, ov, facts.RECIPES) or ())
    if not recipes:  # te: every recipe; torch: the device's usual dtype
        recipes = tuple(facts.RECIPES) if backend == "te" else ("fp32",) if device == "cpu" else ("bf16",)
    for recipe in recipes:
        if recipe not in facts.RECIPES:
            raise TeperfError(
                f"unknown recipe {recipe!r} for backend {backend}", f"use one of: {', '.join(facts.RECIPES)}"
            )

    modes = tuple(_listed("modes", raw, ov, MODES) or Config.modes)
    for mode in modes:
        _choice(MODES, "mode", "use one of")(mode)
        if mode == "cuda-graph" and device != "cuda":
            raise TeperfError("mode cuda-graph needs --device cuda", "drop cuda-graph from modes on the CPU")

    shapes = _shapes(ov["shapes"] if "shapes" in ov else raw.get("shapes", Config.shapes), ov)

    for key, values in (("modules", names), ("recipes", recipes), ("modes", modes), ("shapes", shapes)):
        twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
        if twice is not None:  # else the same cell is measured twice: two rows, maybe two verdicts
            shown = ",".join(map(str, twice)) if isinstance(twice, (tuple, list)) else twice
            raise TeperfError(f"{_named(key, ov)} names {shown} twice", "name each one once")
    return dict(backend=backend, device=device, modules=modules, recipes=recipes, modes=modes, shapes=shapes)
