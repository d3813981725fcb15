"""TOML file + CLI overrides -> one typed :class:`Config`. Each :func:`key` field is the one place of a
config key's default, check and flag: the TOML tables, overrides and click options are made from them."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.resources
import math
import os
import re
import tomllib
import typing
from pathlib import Path
from typing import Any, Callable, Mapping, Union

from teperf.cpus import check_core, check_lanes
from teperf.errors import TeperfError

BACKENDS = ("torch", "te")
DEVICES = ("cpu", "cuda")
MODES = ("eager", "cuda-graph", "compile")
METRICS = ("process_cpu", "thread_cpu", "wall")
METRIC_FIELD = {metric: f"{metric}_ns" for metric in METRICS}  # the trial record's clock of each --metric
CONFIGS_PACKAGE = "teperf.configs"  # package data: the same in editable and normal installs
COMPILE_CACHES = ("cold", "warm")  # inductor's on-disk cache at a compile case's first call
SPAWNS = ("fresh", "forkserver")
# --schedule: auto, teperf plans the pairs (engine/autoschedule.py); fixed, the config's numbers as written
SCHEDULE_KINDS = ("auto", "fixed")
DEFAULT_AUTO_BUDGET_S = 300.0  # --schedule auto with neither --precision nor --budget
# What --schedule auto plans (from Schedule's defaults, its pilot), unless typed as a flag
AUTO_PLANNED = ("processes", "rounds", "trials", "iters")
DEFAULT_PRECISION_BUDGET_S = 600.0  # --precision without --budget: stop after ten minutes
DEFAULT_BISECT_BUDGET_S = 1800.0  # a bisect (each one of a backfill) without --budget


@dataclasses.dataclass(frozen=True)
class ModuleSpec:
    name: str
    factory: str | None = None  # "pkg.mod:callable" imported inside the side's worker
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    inputs: str | None = None  # "pkg.mod:callable" making the forward's inputs (factory modules only)


@dataclasses.dataclass(frozen=True)
class Option:
    """A config key's command-line flag; commands/_common.py makes the click option from it."""

    help: str  # "{default}" in it is replaced with the key's default
    flag: str | None = None  # None: --the-key-name
    type: Any = None  # int, float, a tuple of the choices, or None for text
    metavar: str | None = None
    show_default: bool | str | None = None  # True: the key's default ("8, or the config's"); text: that text
    # "names": comma-separated names; "shapes": a repeatable --shape; git-side options (teperf.options):
    # "flag", "python" (an interpreter, made absolute), "strategy" (one of teperf.sides.strategies)
    parse: str | None = None


Check = Callable[[Any, str, dict], Any]  # (value, how the user named the key, keys resolved so far) -> value


def key(default: Any, check: Check | None = None, help: str | None = None, *, matrix: bool = False, **option):
    """A config key: a dataclass field with its check and, given ``help``, its flag (``option``: the rest
    of its :class:`Option`). ``check`` gets the given value (or the default) and returns the value kept;
    ``matrix`` keys (backend ... shapes) say what is measured and are resolved together by ``_matrix``."""
    flag = None if help is None else Option(help, **option)
    return dataclasses.field(default=default, metadata={"check": check, "option": flag, "matrix": matrix})


def _whole(minimum: int = 1) -> Check:
    return lambda value, name, resolved: _positive_int(value, name, minimum)


def _count(default: int, help: str, minimum: int = 1):
    return key(default, _whole(minimum), help, type=int, show_default=True)


def _seconds(value, name: str, resolved: dict):
    if isinstance(value, bool) or not (isinstance(value, (int, float)) and 0 < value < math.inf):
        fix = f"e.g. {name} 600" if name.startswith("--") else f"e.g. {name} = 600"
        raise TeperfError(f"{name} must be a positive number of seconds, got {value!r}", fix)
    return value


def _precision(value, name: str, resolved: dict):
    return None if value is None else _number(value, "precision_pct (--precision)", 0.01, 100)


def _budget(value, name: str, resolved: dict):
    if value is not None:
        return parse_duration(value, "budget_s (--budget)")
    return DEFAULT_PRECISION_BUDGET_S if resolved.get("precision_pct") is not None else None


def _schedule_kind(value, name: str, resolved: dict):
    if value is None:
        targeted = resolved.get("precision_pct") is not None or resolved.get("budget_s") is not None
        return "auto" if targeted else "fixed"
    value = _choice(SCHEDULE_KINDS, "schedule")(value, name)
    if value == "auto" and resolved.get("budget_s") is None and resolved.get("precision_pct") is None:
        resolved["budget_s"] = DEFAULT_AUTO_BUDGET_S  # an auto schedule runs until its budget
    return value


def _choice(choices: tuple[str, ...], what: str, fix: str = "{name} takes one of") -> Check:
    def check(value, name: str = "", resolved: dict | None = None):
        if value not in choices:
            raise TeperfError(f"unknown {what} {value!r}", f"{fix.format(name=name)}: {', '.join(choices)}")
        return value

    return check


def _alpha(value, name: str, resolved: dict):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 0.5:
        raise TeperfError(
            f"{name} must be between 0 and 0.5, got {value!r}", f"e.g. {name} = 0.05 for a 95% interval"
        )
    return value


def _percent(default: float, flag: str, help: str, **option):
    """A key of 0 to 100 % (above 100 % a typo such as 1e9 would read every change as 'no change')."""

    def check(value, name: str, resolved: dict):
        _number(value, name, 0, 100)
        return value  # as given: an int stays an int in the bundle's config

    return key(default, check, help, flag=flag, type=float, show_default=True, **option)


def _server_pairs(value, name: str, resolved: dict):
    _positive_int(value, name)
    # typed as a flag without forkserver it would be ignored; a config file's value may wait for --spawn
    if name.startswith("--") and resolved.get("spawn") != "forkserver":
        fix = f"add --spawn forkserver, or drop {name}"
        raise TeperfError(f"{name} is for --spawn forkserver, but spawn is {resolved.get('spawn')}", fix)
    return value


def _prestart(value, name: str, resolved: dict):
    if value in (None, "auto"):
        return None
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        fix = 'e.g. prestart = "auto" or --prestart 0 to start every pair cold'
        raise TeperfError(f'prestart must be a whole number >= 0 or "auto", got {value!r}', fix)
    return value


@dataclasses.dataclass(frozen=True)
class Schedule:
    # Many fresh pairs of short couples: the H200 VM's speed swings in multi-second spells, so many short
    # adjacent A/B couples buy precision and long trials do not (docs/measuring.md, "Choosing the schedule").
    processes: int = _count(8, "Fresh worker pairs (the unit of replication).")
    rounds: int = _count(2, "Rounds per pair; each round runs every case in a new shuffled order.")
    trials: int = _count(
        6, "Trials per case per round (compare: rounds x trials even, so A B and B A couples balance)."
    )
    iters: int = _count(50, "fwd+bwd steps per trial.")
    warmup: int = _count(50, "Untimed steps after building each case.", minimum=0)
    timeout_s: float = key(
        600.0,
        _seconds,
        "Seconds a worker may take for one request (start-up, set-up or one trial); then it is killed.",
        flag="--timeout",
        type=float,
        show_default=True,
    )
    precision_pct: float | None = key(
        None,
        _precision,
        "Keep adding fresh pairs until every cell's 95% interval is at most +-P % (or the budget is "
        "spent); --processes is then not used.",
        flag="--precision",
        type=float,
        metavar="P",
    )
    budget_s: float | None = key(  # seconds from the start of the first pair; None = no limit
        None,
        _budget,
        "Wall-clock limit of the measuring: 5m, 90s, 1h or seconds (default with --precision: 10m).",
        flag="--budget",
        metavar="DURATION",
    )
    kind: str | None = key(  # None: auto where precision_pct or budget_s is set, else fixed
        None,
        lambda value, name, resolved: _schedule_kind(value, name, resolved),
        "auto: teperf plans the pairs (lanes, trials per pair) for the narrowest interval per minute, "
        "from a pilot of the first pairs; fixed: the config's processes x rounds x trials x iters as written "
        "(default: auto with --precision or --budget, else fixed).",
        flag="--schedule",
        type=SCHEDULE_KINDS,
        show_default="auto with --precision/--budget",
    )
    # No cell stops before this many pairs: stopping on width picks moments when the sd looks small
    # (simulated A/A false changes: 5 % fixed, 8-10 % with 4, 6.5-7 % with 8; tests/test_adaptive.py).
    min_pairs: int = key(8, _whole(2))
    spawn: str = key(
        "fresh",
        _choice(SPAWNS, "spawn"),
        "How each pair's workers start: fresh interpreters (default), or forked from a server per "
        "side that imported torch and the package once (starts in about a second; a new server with a "
        "new hash seed every --server-pairs pairs).",
        type=SPAWNS,
    )
    server_pairs: int = key(
        4,
        _server_pairs,
        "With --spawn forkserver: pairs each server serves before a fresh one takes over "
        "(default {default}).",
        type=int,
        metavar="N",
    )


@dataclasses.dataclass(frozen=True)
class Stats:
    alpha: float = key(0.05, _alpha)  # 1 - confidence of the interval
    min_effect_pct: float = _percent(
        1.0,
        "--min-effect",
        "Changes under this many % do not matter: 'no change' needs the whole interval inside +-this.",
    )
    metric: str = key(
        "process_cpu",
        _choice(METRICS, "metric", fix="use one of"),
        "Headline clock.",
        type=METRICS,
        show_default=True,
    )
    min_effect_once_pct: float = _percent(
        10.0,
        "--min-effect-once",
        "The same for one-time costs (first call, recompile), at least: a cell's own spread between "
        "pairs raises it.",
    )
    max_contended_pct: float = _percent(
        20.0,
        "--max-contended",
        "A cell with more than this many % of its trial couples sharing the measuring core (even after "
        "re-measuring) counts them and widens its interval by the bias load could add: 'inconclusive "
        "(load)' when the change is within it; 100 accepts any load: every couple counts, no widening.",
        metavar="PCT",
    )


@dataclasses.dataclass(frozen=True)
class Config:
    backend: str = key(
        "torch",
        help="torch: plain-PyTorch reference modules (CPU or GPU); te: TransformerEngine (needs CUDA).",
        type=BACKENDS,
        matrix=True,
    )
    device: str = key(
        "cpu", help="Where the modules run (default: cpu for torch, cuda for te).", type=DEVICES, matrix=True
    )
    modules: tuple[ModuleSpec, ...] = key(
        (), help="Modules to measure (comma-separated, or repeat).", metavar="A,B", parse="names", matrix=True
    )
    recipes: tuple[str, ...] = key(
        (), help="Recipes, e.g. bf16,fp8_delayed (or repeat).", metavar="A,B", parse="names", matrix=True
    )
    modes: tuple[str, ...] = key(
        ("eager",),
        help=f"Modes: {', '.join(MODES)} (comma-separated, or repeat).",
        metavar="A,B",
        parse="names",
        matrix=True,
    )
    shapes: tuple[tuple[int, ...], ...] = key(
        ((8, 2, 256),),
        help="Input shape; repeat for several.",
        flag="--shape",
        metavar="8,2,256",
        parse="shapes",
        matrix=True,
    )
    schedule: Schedule = Schedule()
    stats: Stats = Stats()
    core: int | None = key(
        None,
        lambda value, name, resolved: check_core(value),
        "CPU core to pin the workers to (default: the last one).",
        type=int,
    )
    seed: int = _count(0, "Seed of the case order and the hash seeds.", minimum=0)
    counters: bool = key(False, lambda value, name, resolved: bool(value))  # each command has its own flag
    prestart: int | None = key(  # None: auto
        None,
        _prestart,
        "Pairs to start ahead on spare cores while one measures (auto: lanes x (start / measure time + "
        "1), at most one spare core per worker; 0 = off).",
        metavar="N|auto",
        show_default="auto",
    )
    compile_cache: str = key(
        "cold",
        _choice(COMPILE_CACHES, "compile cache state"),
        "Inductor's on-disk cache at a compile case's first call: cold (default, empty per case "
        "and process) or warm (filled by a throwaway worker per side before the first pair).",
        type=COMPILE_CACHES,
    )
    lanes: int = key(  # "auto" resolved to a number (cpus.check_lanes); --schedule auto: auto unless given
        1,
        lambda value, name, resolved: check_lanes(value, resolved["core"], name),
        "Pairs measuring at once, each on its own physical core (auto: "
        "one lane per 4 idle physical cores, at most 4; see docs/measuring.md, 'Parallel lanes').",
        metavar="N|auto",
        show_default="auto with --schedule auto, else 1",
    )
    source: str | None = None  # the TOML file it came from
    from_cli: tuple[str, ...] = ()  # keys whose value the user typed as a flag: errors name the flag

    def option(self, key: str) -> str:
        """How the user gave ``key``: its flag (``--timeout``) or the config key (``timeout_s``)."""
        return _named(key, self.from_cli)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def factory_package(self) -> str | None:
        """The one top-level module every factory module imports (nanoGPT's "model"), or None."""
        tops = {m.factory.partition(":")[0].partition(".")[0] for m in self.modules if m.factory}
        return tops.pop() if len(tops) == 1 and all(m.factory for m in self.modules) else None


@dataclasses.dataclass(frozen=True)
class Key:
    """One row of the table, as read from the dataclasses' fields."""

    name: str
    section: str | None  # None: the top level; else its TOML table ([schedule], [stats])
    default: Any
    check: Check | None
    option: Option | None
    matrix: bool

    @property
    def flag(self) -> str | None:
        return None if self.option is None else self.option.flag or "--" + self.name.replace("_", "-")


@dataclasses.dataclass(frozen=True)
class RecordedConfig(Config):
    """A bundle's Config as read back from meta.json: a key that is missing or not of its type reads as
    the default, and ``recorded`` says which were there (a report never ends in a traceback)."""

    recorded: frozenset = frozenset()  # "core", "schedule.processes", ...: the keys meta.json held

    def known(self, name: str, missing: Any = None) -> Any:
        """``missing`` where the bundle did not record ``name``; a name that is no key: AttributeError."""
        section, _, field = name.rpartition(".")
        value = getattr(getattr(self, section) if section else self, field)
        return value if name in self.recorded else missing


def accepts(value: Any, hint: Any) -> bool:
    if hint is Any:
        return True
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Union or type(hint).__name__ == "UnionType":
        return any(accepts(value, arg) for arg in args)
    if origin is tuple and args[-1:] == (Ellipsis,):
        return isinstance(value, tuple) and all(accepts(v, args[0]) for v in value)
    if origin is not None:
        hint = origin
    if hint is float:  # JSON writes 3.0 as 3
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


type_hints = functools.cache(typing.get_type_hints)


def _from_json(value, hint):
    """JSON's lists as the tuples of ``hint``, its objects as the dataclass (a ModuleSpec)."""
    if typing.get_origin(hint) is tuple and isinstance(value, list):
        return tuple(_from_json(v, typing.get_args(hint)[0]) for v in value)
    if dataclasses.is_dataclass(hint) and isinstance(value, dict):
        with contextlib.suppress(TypeError):  # keys it does not have: left as is, then refused
            return hint(**value)
    return value


def _read(cls, raw, prefix: str = "") -> tuple[dict, set]:
    """The values of ``cls``'s fields that ``raw`` holds with their type, and their names."""
    raw, hints = raw if isinstance(raw, Mapping) else {}, type_hints(cls)
    values, recorded = {}, set()
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(f.default):  # a section: [schedule], [stats]
            inner, names = _read(type(f.default), raw.get(f.name), f"{f.name}.")
            values[f.name], recorded = type(f.default)(**inner), recorded | names
        elif f.name in raw and accepts(value := _from_json(raw[f.name], hints[f.name]), hints[f.name]):
            values[f.name] = value
            recorded.add(prefix + f.name)
    return values, recorded


def read_config(raw: Any) -> RecordedConfig:
    """The config object of a bundle's meta.json as a RecordedConfig (an unknown key is ignored)."""
    values, recorded = _read(Config, raw)
    return RecordedConfig(**values, recorded=frozenset(recorded))


def _keys(cls, section: str | None = None):
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(f.default):
            yield from _keys(type(f.default), f.name)
        elif f.metadata:  # a key() field
            yield Key(f.name, section, f.default, **f.metadata)


KEYS: tuple[Key, ...] = tuple(_keys(Config))
_SECTION_TYPES = {
    f.name: type(f.default) for f in dataclasses.fields(Config) if dataclasses.is_dataclass(f.default)
}
SECTIONS = tuple(_SECTION_TYPES)  # ("schedule", "stats"): the TOML tables
# Every key with a flag (test_config checks), in --help's order.
OVERRIDE_KEYS = tuple(
    """backend device modules recipes modes shapes processes rounds trials iters warmup timeout_s core seed
    metric prestart lanes min_effect_pct min_effect_once_pct max_contended_pct precision_pct budget_s
    kind compile_cache spawn server_pairs""".split()
)
CLI_FLAGS = {k.name: k.flag for k in KEYS if k.flag}  # config key -> the CLI flag that overrides it
_KNOWN = {s: {k.name for k in KEYS if k.section == s} | set(() if s else SECTIONS) for s in (None, *SECTIONS)}
_RETIRED = {
    "noise_limit_pct": "the 'noisy' verdict is gone: an interval that reaches past +-min_effect_pct is "
    "'inconclusive'; delete noise_limit_pct from [stats]"
}


def _named(key: str, given) -> str:  # as Config.option, before there is a Config
    return CLI_FLAGS.get(key, f"--{key}") if key in given else key


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
            fix = "write a duration like 5m, 90s, 1h, 1h30m or plain seconds"
            raise TeperfError(f"malformed duration {value!r} for {name}", fix)
        seconds = sum(float(n) * {"h": 3600.0, "m": 60.0}.get(u, 1.0) for n, u in parts)
    if not 0 < seconds < math.inf:
        raise TeperfError(
            f"{name} must be a positive duration, got {value!r}", "write a duration like 5m, 90s or 1h"
        )
    return seconds


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


def _positive_int(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        fix = f"set {name} to a whole number >= {minimum}"
        raise TeperfError(f"{name} must be an integer >= {minimum}, got {value!r}", fix)
    return value


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


def _number(value, name: str, low: float, high: float | None = None) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)  # nan compares false both ways and would pass the bounds
        or value < low
        or (high is not None and value > high)
    ):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise TeperfError(
            f"{name} must be a number {bound}, got {value!r}", f"set {name} to a number {bound}"
        )
    return float(value)


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
