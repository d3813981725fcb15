"""A bundle's recorded config read back typed: a key missing or not of its type reads as its default."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import typing
from typing import Any, Mapping, Union

from teperf.config.keys import Config


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

    @property
    def open_ended(self) -> bool:
        """--precision or --schedule auto left the number of pairs open."""
        return self.known("schedule.precision_pct") is not None or self.known("schedule.kind") == "auto"

    @property
    def planned_pairs(self) -> int | None:
        """The pairs the schedule asked for; None where it left them open, or where it is not recorded."""
        return None if self.open_ended else self.known("schedule.processes")


@functools.cache
def _parts(hint: Any) -> tuple[Any, tuple, bool]:
    """(origin, args, is a union) of a type hint: every record made checks its fields against these."""
    origin = typing.get_origin(hint)
    return origin, typing.get_args(hint), origin is Union or type(hint).__name__ == "UnionType"


def accepts(value: Any, hint: Any) -> bool:
    if hint is Any:
        return True
    origin, args, union = _parts(hint)
    if union:
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
