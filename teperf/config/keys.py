"""The table of config keys: each :func:`key` field of Config, Schedule and Stats is the one place of a
key's default, check and flag; the TOML tables, overrides and click options are made from them
(teperf.config reads the TOML and builds a Config from them)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping

from teperf.cpus import check_core, check_lanes
from teperf.errors import TeperfError
from teperf.numbers import parse_duration

BACKENDS = ("torch", "te")
DEVICES = ("cpu", "cuda")
MODES = ("eager", "cuda-graph", "compile")
METRICS = ("process_cpu", "thread_cpu", "wall")
METRIC_FIELD = {metric: f"{metric}_ns" for metric in METRICS}  # the trial record's clock of each --metric
COMPILE_CACHES = ("cold", "warm")  # inductor's on-disk cache at a compile case's first call
SPAWNS = ("fresh", "forkserver")
# --schedule: auto, teperf plans the pairs (engine/autoschedule.py); fixed, the config's numbers as written
SCHEDULE_KINDS = ("auto", "fixed")
DEFAULT_AUTO_BUDGET_S = 300.0  # --schedule auto with neither --precision nor --budget
# What --schedule auto plans (from Schedule's defaults, its pilot), unless typed as a flag
AUTO_PLANNED = ("processes", "rounds", "trials", "iters")
DEFAULT_PRECISION_BUDGET_S = 600.0  # --precision without --budget: stop after ten minutes


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
        _schedule_kind,
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


def _named(key: str, given) -> str:  # as Config.option, before there is a Config
    return CLI_FLAGS.get(key, f"--{key}") if key in given else key


def _positive_int(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        fix = f"set {name} to a whole number >= {minimum}"
        raise TeperfError(f"{name} must be an integer >= {minimum}, got {value!r}", fix)
    return value


def _number(value, name: str, low: float, high: float) -> float:
    # written as "not inside": nan compares false both ways, and so is refused
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        bound = f"between {low} and {high}"
        raise TeperfError(
            f"{name} must be a number {bound}, got {value!r}", f"set {name} to a number {bound}"
        )
    return float(value)
