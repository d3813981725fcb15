"""Configuration: TOML file + CLI overrides -> one typed, validated :class:`Config`.

Every validation error of user input is raised here, before any worker starts,
as a TeperfError that names the fix.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import os
import re
from pathlib import Path
from typing import Any, Mapping

import tomllib

from teperf.cpus import check_core, check_lanes
from teperf.errors import TeperfError

BACKENDS = ("torch", "te")
DEVICES = ("cpu", "cuda")
MODES = ("eager", "cuda-graph", "compile")
METRICS = ("process_cpu", "thread_cpu", "wall")
CONFIGS_PACKAGE = (
    "teperf.configs"  # shipped configs are package data: the same in editable and normal installs
)
COMPILE_CACHES = (
    "cold",
    "warm",
)  # inductor's on-disk cache at a compile case's first call (teperf/worker/compile_cache.py)


@dataclasses.dataclass(frozen=True)
class ModuleSpec:
    name: str
    factory: str | None = None  # "pkg.mod:callable" imported inside the side's worker
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    inputs: str | None = None  # "pkg.mod:callable" making the forward's inputs (factory modules only)


@dataclasses.dataclass(frozen=True)
class Schedule:
    # Many fresh pairs of many short couples: the H200 VM's speed swings in
    # multi-second spells, so short adjacent A/B couples and many of them buy
    # precision; long trials do not (README, "Choosing the schedule").
    processes: int = 8  # fresh worker pairs: the unit of replication
    rounds: int = 2
    trials: int = 6  # even, so each pair has as many A B couples as B A ones
    iters: int = 50  # steps per trial
    warmup: int = 50
    timeout_s: float = 600.0  # per worker request (start-up, set-up or one trial)
    # Run until the answer is known (teperf/engine/adaptive.py): with precision_pct, fresh pairs keep
    # coming until every cell's 95 % half-width is at most this many %, or the budget is spent;
    # `processes` is then not used. budget_s alone caps a fixed schedule's wall time.
    precision_pct: float | None = None
    budget_s: float | None = None  # seconds from the start of the first pair; None = no limit
    # No cell stops before this many pairs (the default schedule's count). Stopping on width picks moments when the
    # sd happens to look small; simulated A/A false changes (min_effect 0) went from 5 % to 8-10 % with 4, 6.5-7 % with 8
    # (tests/test_adaptive.py).
    min_pairs: int = 8
    # How each pair's workers start (teperf/engine/forkserver.py): "fresh" interpreters, or children
    # forked from a server per side that imported torch and the package once; a server serves
    # `server_pairs` pairs, then a new one with a new hash seed takes over.
    spawn: str = "fresh"
    server_pairs: int = 4


SPAWNS = ("fresh", "forkserver")
DEFAULT_PRECISION_BUDGET_S = 600.0  # --precision without --budget: stop after ten minutes


@dataclasses.dataclass(frozen=True)
class Stats:
    alpha: float = 0.05  # 1 - confidence of the interval
    min_effect_pct: float = (
        1.0  # "no change" needs the whole interval inside +-this; changes under it do not matter
    )
    metric: str = "process_cpu"
    # The same for one-time costs (first call, recompile), which vary by tens of % between processes.
    min_effect_once_pct: float = 10.0
    # A cell whose trial couples shared their core (even after re-measuring) more often than this many %
    # is "inconclusive" for load (README, "A loaded machine").
    max_contended_pct: float = 20.0


@dataclasses.dataclass(frozen=True)
class Config:
    backend: str = "torch"
    device: str = "cpu"
    modules: tuple[ModuleSpec, ...] = ()
    recipes: tuple[str, ...] = ()
    modes: tuple[str, ...] = ("eager",)
    shapes: tuple[tuple[int, ...], ...] = ((8, 2, 256),)
    schedule: Schedule = Schedule()
    stats: Stats = Stats()
    core: int | None = None
    seed: int = 0
    counters: bool = False
    prestart: int | None = None  # pairs started ahead on spare cores while one measures; None = auto
    compile_cache: str = (
        "cold"  # cold: every compile case starts from an empty cache; warm: from a filled one
    )
    lanes: int = (
        1  # pairs measuring at once, each on its own physical core (engine/lanes.py); "auto" resolved
    )
    source: str | None = None  # the TOML file it came from
    from_cli: tuple[str, ...] = ()  # keys whose value the user typed as a flag: errors name the flag

    def option(self, key: str) -> str:
        """How the user gave ``key``: its flag (``--timeout``) or the config key (``timeout_s``)."""
        return CLI_FLAGS.get(key, f"--{key}") if key in self.from_cli else key

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# Config key -> the CLI flag that overrides it, where the names differ.
CLI_FLAGS = {
    "timeout_s": "--timeout",
    "min_effect_pct": "--min-effect",
    "min_effect_once_pct": "--min-effect-once",
    "max_contended_pct": "--max-contended",
    "shapes": "--shape",
    "compile_cache": "--compile-cache",
    "server_pairs": "--server-pairs",
}


def _named(key: str, overrides: Mapping[str, Any]) -> str:
    return CLI_FLAGS.get(key, f"--{key}") if overrides.get(key) is not None else key


_TOP_KEYS = {
    "backend",
    "device",
    "modules",
    "recipes",
    "modes",
    "shapes",
    "core",
    "seed",
    "counters",
    "prestart",
    "compile_cache",
    "lanes",
    "schedule",
    "stats",
}
_SCHEDULE_KEYS = {f.name for f in dataclasses.fields(Schedule)}
_STATS_KEYS = {f.name for f in dataclasses.fields(Stats)}
_RETIRED = {
    "noise_limit_pct": "the 'noisy' verdict is gone: an interval that reaches past +-min_effect_pct is "
    "'inconclusive'; delete noise_limit_pct from [stats]"
}


def backend_module(name: str):
    """The worker backend's static facts (MODULES, RECIPES, check_shape). These modules
    import torch only inside functions, so the coordinator can read them."""
    if name == "torch":
        from teperf.worker.backends import torch_ref

        return torch_ref
    if name == "te":
        from teperf.worker.backends import te

        return te
    raise TeperfError(f"unknown backend {name!r}", f"use one of: {', '.join(BACKENDS)}")


def parse_shape(text: str) -> tuple[int, ...]:
    if not re.fullmatch(r"\s*\d+(\s*[,x]\s*\d+)*\s*", text or ""):
        raise TeperfError(
            f"malformed shape {text!r}", "write it as comma-separated positive integers, e.g. --shape 8,2,256"
        )
    dims = tuple(int(d) for d in re.split(r"[,x]", text.replace(" ", "")))
    if any(d <= 0 for d in dims):
        raise TeperfError(f"malformed shape {text!r}: dimensions must be positive", "e.g. --shape 8,2,256")
    return dims


DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value, name: str = "--budget") -> float:
    """'5m', '90s', '1h', '1h30m', '2.5m' or plain seconds (a number or its text) -> seconds > 0."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        text = str(value).strip().lower().replace(" ", "")
        parts = re.findall(r"(\d+(?:\.\d+)?)([hms]?)", text)
        if (
            not text
            or "".join(n + u for n, u in parts) != text
            or (len(parts) > 1 and not all(u for _, u in parts))
        ):
            raise TeperfError(
                f"malformed duration {value!r} for {name}",
                "write a duration like 5m, 90s, 1h, 1h30m or plain seconds",
            )
        seconds = sum(float(n) * DURATION_UNITS[u or "s"] for n, u in parts)
    if not seconds > 0 or seconds != seconds or seconds == float("inf"):
        raise TeperfError(
            f"{name} must be a positive duration, got {value!r}", "write a duration like 5m, 90s or 1h"
        )
    return seconds


def shipped_configs() -> dict[str, str]:
    """Name -> TOML text of every config shipped inside the package."""
    root = importlib.resources.files(CONFIGS_PACKAGE)
    return {p.name[: -len(".toml")]: p.read_text() for p in root.iterdir() if p.name.endswith(".toml")}


def shipped_names() -> list[str]:
    return sorted(shipped_configs())


def resolve_config(name: str) -> tuple[str, str]:
    """(source, TOML text) of a path, or of a shipped config's name (with or without .toml)."""
    path = Path(name)
    if path.is_file():
        try:
            return str(path), path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise TeperfError(f"cannot read config file {name!r}: {exc}", "give a readable UTF-8 TOML file")
    shipped = shipped_configs()
    stem = name[: -len(".toml")] if name.endswith(".toml") else name
    if stem in shipped:
        return f"{CONFIGS_PACKAGE}:{stem}.toml", shipped[stem]
    if path.is_dir():
        raise TeperfError(
            f"config {name!r} is a directory, not a TOML file",
            f"give the TOML file inside it, or one of: {', '.join(sorted(shipped))}",
        )
    raise TeperfError(
        f"config file {name!r} not found", f"give a path or one of: {', '.join(sorted(shipped))}"
    )


def load_config(path: str | os.PathLike | None = None, overrides: Mapping[str, Any] | None = None) -> Config:
    """Read the TOML at ``path`` (optional), apply ``overrides`` (CLI values; None = not given)."""
    raw: dict[str, Any] = {}
    source = None
    if path is not None:
        source, text = resolve_config(str(path))
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise TeperfError(f"{source}: invalid TOML ({exc})", "fix the syntax of the config file")
    return build_config(raw, overrides or {}, source)


def _unknown(keys, known, where: str):
    extra = sorted(set(keys) - set(known))
    for key in extra:
        if key in _RETIRED:
            raise TeperfError(f"config key {key!r} in {where} was retired", _RETIRED[key])
    if extra:
        raise TeperfError(
            f"unknown config key {extra[0]!r} in {where}", f"known keys: {', '.join(sorted(known))}"
        )


def _positive_int(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise TeperfError(
            f"{name} must be an integer >= {minimum}, got {value!r}",
            f"set {name} to a whole number >= {minimum}",
        )
    return value


def _table(raw: Mapping[str, Any], key: str) -> dict:
    value = raw.get(key) or {}
    if not isinstance(value, dict):
        raise TeperfError(f"{key} must be a table, got {value!r}", f"write it as a [{key}] section")
    return dict(value)


def _string_list(value, key: str) -> list | None:
    if value is None:
        return None
    if (
        isinstance(value, str)
        or not isinstance(value, (list, tuple))
        or not all(isinstance(v, str) for v in value)
    ):
        raise TeperfError(
            f"{key} must be a list of names, got {value!r}",
            f'write e.g. {key} = ["{key[:-1]}"]' if key != "recipes" else 'write e.g. recipes = ["bf16"]',
        )
    return list(value)


def _number(value, name: str, low: float, high: float | None = None) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or value < low
        or (high is not None and value > high)
    ):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise TeperfError(
            f"{name} must be a number {bound}, got {value!r}", f"set {name} to a number {bound}"
        )
    return float(value)


def build_config(raw: Mapping[str, Any], overrides: Mapping[str, Any], source: str | None = None) -> Config:
    _unknown(raw, _TOP_KEYS, "the top level")
    sched_raw = _table(raw, "schedule")
    _unknown(sched_raw, _SCHEDULE_KEYS, "[schedule]")
    stats_raw = _table(raw, "stats")
    _unknown(stats_raw, _STATS_KEYS, "[stats]")
    ov = {k: v for k, v in overrides.items() if v is not None}

    backend = ov.get("backend", raw.get("backend", "torch"))
    if backend not in BACKENDS:
        raise TeperfError(f"unknown backend {backend!r}", f"use one of: {', '.join(BACKENDS)}")
    device = ov.get("device", raw.get("device", "cpu" if backend == "torch" else "cuda"))
    if device not in DEVICES:
        raise TeperfError(f"unknown device {device!r}", f"use one of: {', '.join(DEVICES)}")
    if backend == "te" and device == "cpu":  # else every cell is skipped and nothing is measured
        raise TeperfError(
            f"{_named('backend', ov)} te needs a CUDA device, but {_named('device', ov)} is cpu",
            "use --device cuda on a GPU machine, or --backend torch for the CPU reference modules",
        )
    facts = backend_module(backend)

    # modules: a list of names, or a table of custom modules, or both (list names + [modules.X] tables)
    mod_raw = raw.get("modules", None)
    custom: dict[str, ModuleSpec] = {}
    names: list[str] | None = None
    if isinstance(mod_raw, dict):
        for name, spec in mod_raw.items():
            if not isinstance(spec, dict):
                raise TeperfError(
                    f"[modules.{name}] must be a table",
                    'write [modules.NAME] with factory = "pkg.mod:callable"',
                )
            _unknown(spec, {"factory", "kwargs", "inputs"}, f"[modules.{name}]")
            factory = spec.get("factory")
            kwargs = spec.get("kwargs") or {}
            inputs = spec.get("inputs")
            if inputs is not None and (not isinstance(inputs, str) or ":" not in inputs):
                raise TeperfError(
                    f'[modules.{name}] inputs must be "pkg.mod:callable"',
                    "name a function make_inputs(shape, dtype, device) in the side's code (README, "
                    "'Your own modules')",
                )
            if inputs is not None and factory is None:
                raise TeperfError(
                    f"[modules.{name}] inputs needs a factory: built-in modules make their own input",
                    f'add factory = "pkg.mod:callable" to [modules.{name}], or drop inputs',
                )
            if not isinstance(kwargs, dict):
                raise TeperfError(
                    f"[modules.{name}] kwargs must be a table", "write kwargs = { name = value }"
                )
            if factory is None and name in facts.MODULES:
                if kwargs and not getattr(facts, "TAKES_KWARGS", True):
                    raise TeperfError(
                        f"[modules.{name}] kwargs: the {backend} backend's built-in {name} takes no kwargs",
                        f"drop kwargs, or give [modules.{name}] a factory that uses them",
                    )
                custom[name] = ModuleSpec(
                    name, None, dict(kwargs)
                )  # a built-in module with constructor kwargs
                continue
            if not isinstance(factory, str) or ":" not in factory:
                raise TeperfError(
                    f'[modules.{name}] needs factory = "pkg.mod:callable"',
                    "add the factory key, or use a built-in module name",
                )
            custom[name] = ModuleSpec(name, factory, dict(kwargs), inputs)
        names = list(custom)
    elif mod_raw is not None:
        names = _string_list(mod_raw, "modules")
    if "modules" in ov:
        names = list(ov["modules"])
    if names is None:
        names = list(facts.MODULES)
    if not names:
        raise TeperfError(
            f"{_named('modules', ov)} is empty: nothing to measure",
            f"name at least one module, e.g. {', '.join(facts.MODULES[:2])}",
        )
    modules = []
    for name in names:
        if name in custom:
            modules.append(custom[name])
        elif name in facts.MODULES:
            modules.append(ModuleSpec(name))
        else:
            known = list(dict.fromkeys(list(facts.MODULES) + list(custom)))
            raise TeperfError(
                f"unknown module {name!r} for backend {backend}",
                f"use one of: {', '.join(known)} (or add [modules.{name}] with a factory)",
            )

    recipes = ov["recipes"] if "recipes" in ov else _string_list(raw.get("recipes"), "recipes")
    if recipes is not None and not recipes:
        raise TeperfError(
            f"{_named('recipes', ov)} is empty: nothing to measure",
            f"name at least one recipe: {', '.join(facts.RECIPES)}",
        )
    if not recipes:
        recipes = (
            ("fp32",)
            if (backend == "torch" and device == "cpu")
            else (("bf16",) if backend == "torch" else tuple(facts.RECIPES))
        )
    for recipe in recipes:
        if recipe not in facts.RECIPES:
            raise TeperfError(
                f"unknown recipe {recipe!r} for backend {backend}", f"use one of: {', '.join(facts.RECIPES)}"
            )

    modes = ov["modes"] if "modes" in ov else _string_list(raw.get("modes"), "modes")
    if modes is not None and not modes:
        raise TeperfError(
            f"{_named('modes', ov)} is empty: nothing to measure",
            f"name at least one mode: {', '.join(MODES)}",
        )
    modes = tuple(modes or ("eager",))
    for mode in modes:
        if mode not in MODES:
            raise TeperfError(f"unknown mode {mode!r}", f"use one of: {', '.join(MODES)}")
        if mode == "cuda-graph" and device != "cuda":
            raise TeperfError("mode cuda-graph needs --device cuda", "drop cuda-graph from modes on the CPU")

    shapes_raw = ov["shapes"] if "shapes" in ov else raw.get("shapes", [[8, 2, 256]])
    if isinstance(shapes_raw, (list, tuple)) and not shapes_raw:
        raise TeperfError(
            f"{_named('shapes', ov)} is empty: nothing to measure",
            "give at least one shape, e.g. shapes = [[8, 2, 256]]",
        )
    if not isinstance(shapes_raw, (list, tuple)) or not all(
        isinstance(s, (list, tuple, str)) for s in shapes_raw
    ):
        raise TeperfError(
            f"shapes must be a list of shapes, got {shapes_raw!r}",
            "write shapes = [[8, 2, 256]] (a list of lists)",
        )
    shapes = []
    for shape in shapes_raw:
        dims = parse_shape(shape) if isinstance(shape, str) else tuple(shape)
        if not dims or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims):
            raise TeperfError(
                f"malformed shape {shape!r}", "write shapes as lists of positive integers, e.g. [8, 2, 256]"
            )
        shapes.append(dims)

    sched_vals = {**sched_raw, **{k: ov[k] for k in _SCHEDULE_KEYS if k in ov}}
    for key in ("processes", "rounds", "trials", "iters"):
        if key in sched_vals:
            _positive_int(sched_vals[key], _named(key, ov))
    if "warmup" in sched_vals:
        _positive_int(sched_vals["warmup"], _named("warmup", ov), minimum=0)
    if sched_vals.get("precision_pct") is not None:
        sched_vals["precision_pct"] = _number(
            sched_vals["precision_pct"], "precision_pct (--precision)", 0.01, 100
        )
    if sched_vals.get("budget_s") is not None:
        sched_vals["budget_s"] = parse_duration(sched_vals["budget_s"], "budget_s (--budget)")
    elif sched_vals.get("precision_pct") is not None:
        sched_vals["budget_s"] = DEFAULT_PRECISION_BUDGET_S
    if "min_pairs" in sched_vals:
        _positive_int(sched_vals["min_pairs"], "min_pairs", minimum=2)
    if sched_vals.get("spawn", "fresh") not in SPAWNS:
        raise TeperfError(
            f"unknown spawn {sched_vals['spawn']!r}",
            f"{_named('spawn', ov)} takes one of: {', '.join(SPAWNS)}",
        )
    if "server_pairs" in sched_vals:
        _positive_int(sched_vals["server_pairs"], _named("server_pairs", ov))
    timeout = sched_vals.get("timeout_s", 1)
    if isinstance(timeout, bool) or not (isinstance(timeout, (int, float)) and timeout > 0):
        name = _named("timeout_s", ov)
        raise TeperfError(
            f"{name} must be a positive number of seconds, got {timeout!r}",
            f"e.g. {name} 600" if name.startswith("--") else "e.g. timeout_s = 600",
        )
    schedule = Schedule(**sched_vals)

    stats_vals = {**stats_raw, **{k: ov[k] for k in _STATS_KEYS if k in ov}}
    stats = Stats(**stats_vals)
    if (
        isinstance(stats.alpha, bool)
        or not isinstance(stats.alpha, (int, float))
        or not 0 < stats.alpha < 0.5
    ):
        raise TeperfError(
            f"alpha must be between 0 and 0.5, got {stats.alpha!r}", "e.g. alpha = 0.05 for a 95% interval"
        )
    _number(stats.min_effect_pct, _named("min_effect_pct", ov), 0)
    _number(stats.min_effect_once_pct, _named("min_effect_once_pct", ov), 0)
    _number(stats.max_contended_pct, _named("max_contended_pct", ov), 0, 100)
    if stats.metric not in METRICS:
        raise TeperfError(f"unknown metric {stats.metric!r}", f"use one of: {', '.join(METRICS)}")

    config_core = ov.get("core", raw.get("core"))
    core = check_core(config_core)
    seed = ov.get("seed", raw.get("seed", 0))
    _positive_int(seed, _named("seed", ov), minimum=0)
    counters = bool(ov.get("counters", raw.get("counters", False)))
    prestart = ov.get("prestart", raw.get("prestart", "auto"))
    if prestart in (None, "auto"):
        prestart = None
    elif isinstance(prestart, str) and prestart.isdigit():
        prestart = int(prestart)
    elif isinstance(prestart, bool) or not isinstance(prestart, int) or prestart < 0:
        raise TeperfError(
            f'prestart must be a whole number >= 0 or "auto", got {prestart!r}',
            'e.g. prestart = "auto" or --prestart 0 to start every pair cold',
        )
    compile_cache = ov.get("compile_cache", raw.get("compile_cache", "cold"))
    if compile_cache not in COMPILE_CACHES:
        raise TeperfError(
            f"unknown compile cache state {compile_cache!r}",
            f"{_named('compile_cache', ov)} takes one of: {', '.join(COMPILE_CACHES)}",
        )
    lanes = check_lanes(ov.get("lanes", raw.get("lanes", 1)), core, _named("lanes", ov))
    return Config(
        compile_cache=compile_cache,
        backend=backend,
        device=device,
        modules=tuple(modules),
        recipes=tuple(recipes),
        modes=modes,
        shapes=tuple(shapes),
        schedule=schedule,
        stats=stats,
        core=core,
        seed=seed,
        counters=counters,
        prestart=prestart,
        lanes=lanes,
        source=source,
        from_cli=tuple(sorted(ov)),
    )
