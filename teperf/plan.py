"""Cases (module, recipe, shape, dtype, mode) and the schedule: pairs -> rounds -> cases (shuffled)
-> trials, the sides alternating so that every base trial has a head trial beside it in time."""

from __future__ import annotations

import dataclasses
import random
from typing import Any, Iterator, Mapping

from teperf.config import Config, backend_module
from teperf.errors import TeperfError
from teperf.log import stderr_log
from teperf.records import cell_key

DTYPE_OF_RECIPE = {"fp32": "float32"}  # everything else runs with bf16 parameters


@dataclasses.dataclass(frozen=True)
class Case:
    id: int
    backend: str  # worker backend: torch | te | factory
    module: str
    recipe: str
    shape: tuple[int, ...]
    dtype: str
    mode: str
    factory: str | None = None
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    inputs: str | None = None  # factory modules: "pkg.mod:callable" making the forward's inputs
    skip: str | None = None  # why this case cannot run (a shape rule), decided before measuring

    @classmethod
    def from_meta(cls, case: Mapping[str, Any]) -> "Case":
        """A case as a bundle's meta.json recorded it (``cases``); fields it lacks take their defaults."""
        names = [f.name for f in dataclasses.fields(cls) if f.name != "skip"]
        return cls(**{**{k: case[k] for k in names if k in case}, "shape": tuple(case.get("shape") or ())})

    @property
    def key(self) -> str:
        return cell_key(self.module, self.recipe, self.shape, self.mode)

    def to_wire(self, device: str, warmup: int) -> dict:
        """The ``case`` of a worker's setup command (teperf.worker.protocol): every field but ``skip``."""
        wire = {k: v for k, v in self.to_meta().items() if k != "skip"}
        return {**wire, "device": device, "warmup": warmup}

    def to_meta(self) -> dict:
        return {**dataclasses.asdict(self), "shape": list(self.shape), "kwargs": dict(self.kwargs)}


def shape_problem(config: Config, module: str, factory, recipe: str, shape, kwargs) -> str | None:
    """The backend's alignment rule this (module, recipe, shape) breaks, or None."""
    check = None if factory else getattr(backend_module(config.backend), "check_shape", None)
    if check is None:
        return None
    from teperf.worker.runner import module_class

    problem = check(module_class(module), recipe, list(shape), dict(kwargs))
    return f"shape {list(shape)} cannot run under {recipe}: {problem}" if problem else None


def expand(config: Config) -> list[Case]:
    """The case matrix; cases a shape rule rules out stay, marked ``skip``, so the table shows why."""
    cases = []
    for spec in config.modules:
        for recipe in config.recipes:
            for shape in config.shapes:
                skip = shape_problem(config, spec.name, spec.factory, recipe, shape, spec.kwargs)
                for mode in config.modes:
                    cases.append(
                        Case(
                            id=len(cases),
                            backend="factory" if spec.factory else config.backend,
                            module=spec.name,
                            recipe=recipe,
                            shape=tuple(shape),
                            dtype=DTYPE_OF_RECIPE.get(recipe, "bfloat16"),
                            mode=mode,
                            factory=spec.factory,
                            kwargs=dict(spec.kwargs),
                            inputs=spec.inputs,
                            skip=skip,
                        )
                    )
    if cases and all(c.skip for c in cases):
        raise TeperfError(cases[0].skip, "pick a shape that meets the rule or drop that recipe")
    return cases


@dataclasses.dataclass(frozen=True)
class Slot:
    """One timed trial: which case, and which side (index into the side list) goes when."""

    round: int
    case_id: int
    trial: int
    side: int
    position: int  # 0 = first of its (base, head) couple, 1 = second


def hash_seed(seed: int, pair: int) -> int:
    # One PYTHONHASHSEED per pair, the same for both of its sides; a new one per pair.
    return (seed * 1_000_003 + pair * 7919 + 17) % (2**32 - 1)


def pairs_per_server(schedule) -> int:
    """How many pairs one fork-server generation forks (--server-pairs, at least 1)."""
    return max(1, int(schedule.server_pairs))


def server_generation(schedule, pair: int) -> int | None:
    """The fork-server generation that forks ``pair``; None when each pair's workers start fresh."""
    return pair // pairs_per_server(schedule) if schedule.spawn == "forkserver" else None


def start_order(pair: int, n_sides: int) -> list[int]:
    order = list(range(n_sides))
    return order if pair % 2 == 0 else order[::-1]


def pair_slots(config: Config, case_ids: list[int], pair: int, n_sides: int, sched=None) -> Iterator[Slot]:
    """``sched``: this pair's rounds and trials where --schedule auto planned them (default: the config's)."""
    sched = sched or config.schedule
    for rnd in range(sched.rounds):
        order = list(case_ids)
        random.Random(f"{config.seed}/{pair}/{rnd}").shuffle(order)
        for case_id in order:
            for trial in range(sched.trials):
                # A B, then B A: flips every trial, every round and every pair
                for position, side in enumerate(start_order(pair + rnd + trial, n_sides)):
                    yield Slot(rnd, case_id, trial, side, position)


def check_balance(config: Config, n_sides: int) -> None:
    """Refuse a compare schedule whose couples per pair are odd: the order flips every trial
    and every round (pair_slots), so an odd count leaves A B or B A one ahead."""
    sched = config.schedule
    if n_sides == 2 and (sched.rounds * sched.trials) % 2:
        name = config.option("trials")
        even = f"{name} {sched.trials + 1}" if name.startswith("--") else f"trials = {sched.trials + 1}"
        raise TeperfError(
            f"{name} {sched.trials} x {config.option('rounds')} {sched.rounds}: an odd number of couples per "
            "pair leaves the A B and B A orders unbalanced",
            f"use an even number, e.g. {even}",
        )


def total_steps(config: Config, n_cases: int, n_sides: int) -> int:
    s = config.schedule
    return s.processes * s.rounds * s.trials * s.iters * n_cases * n_sides


# Floors no machine beats (a step's host time, a pair's start), to refuse a schedule that cannot end.
MIN_STEP_S = 5e-6
MIN_PAIR_START_S = 0.05
DAY_S = 86400.0
# What a pair and a step typically take on a CPU host (a fresh worker imports torch in ~3 s, overlapped)
TYPICAL_PAIR_S = {"fresh": 2.5, "forkserver": 0.5}
TYPICAL_STEP_S = 50e-6


def _span(seconds: float) -> str:
    if seconds >= 3 * 3600:
        return f"{seconds / DAY_S:.3g} days"
    return f"{seconds:.3g} s" if seconds < 10 else f"{seconds:,.0f} s"


def check_duration(config: Config, n_cases: int, n_sides: int) -> None:
    """Refuse a trial that cannot finish in --timeout, and a fixed schedule that cannot in a day."""
    s, name = config.schedule, config.option
    request = max(s.iters, s.warmup) * MIN_STEP_S
    if request > s.timeout_s:
        long = "iters" if s.iters >= s.warmup else "warmup"
        typed = long in config.from_cli or "timeout_s" not in config.from_cli  # what the user changed
        raise TeperfError(
            f"{name(long)} {getattr(s, long)}: one {'trial' if long == 'iters' else 'warm-up'} takes at "
            f"least {_span(request)}, more than the {s.timeout_s:g} s a worker gets for it "
            f"({name('timeout_s')})",
            f"lower --{long} (e.g. --{long} 50)" if typed else f"raise {name('timeout_s')}",
        )
    if s.precision_pct is not None or s.budget_s is not None:
        return  # the budget ends it
    floor = s.processes * MIN_PAIR_START_S + total_steps(config, n_cases, n_sides) * MIN_STEP_S
    if floor > DAY_S:
        raise TeperfError(
            f"the schedule cannot finish in a day: {s.processes} pairs x {s.rounds} rounds x {s.trials} "
            f"trials x {s.iters} iters x {n_cases} cells x {n_sides} sides takes at least {_span(floor)}",
            "lower --processes, --iters or the cells, or cap the time with --budget",
        )
    typical = (
        s.processes * TYPICAL_PAIR_S.get(s.spawn, TYPICAL_PAIR_S["fresh"])
        + total_steps(config, n_cases, n_sides) * TYPICAL_STEP_S
    )
    if typical > 3 * 3600:  # it may finish, but say so before hours go by
        stderr_log(f"this schedule takes about {_span(typical)} at typical speeds; --budget plans one to fit")


def packages_under_test(config, sides=()) -> list[str]:
    """Top-level import names whose code the cells measure: a git side's ``--package``, TE for the te
    backend, each factory's package, torch for torch's built-in modules."""
    names = [s.description["package"] for s in sides if isinstance(s.description.get("package"), str)]
    if config.backend == "te":
        names.append("transformer_engine")
    for spec in config.modules:
        factory = getattr(spec, "factory", None)
        if factory:
            names.append(factory.split(":", 1)[0].split(".", 1)[0])
        elif config.backend == "torch":
            names.append("torch")
    return list(dict.fromkeys(names))


def measured_packages(config, sides=()) -> list[str]:
    """The packages under test whose code lives outside torch (what a side must be able to import)."""
    return [n for n in packages_under_test(config, sides) if n != "torch"]
