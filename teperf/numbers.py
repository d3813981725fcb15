"""How a number reads wherever teperf writes one (terminal and markdown tables, notes, the dashboard,
explain): one home, so that every place says 1,234.5 us, +2.3% and 4.5 min the same way."""

from __future__ import annotations

import math


def missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def us(v, none: str = "-") -> str:
    """1234.5 -> '1,234.5 us'."""
    return none if missing(v) else f"{v:,.1f} us"


def signed_us(v, none: str = "-") -> str:
    """12.25 -> '+12.2 us'."""
    return none if missing(v) else f"{v:+,.1f} us"


def ms(v, none: str = "-", sign: str = "") -> str:
    """One-time costs: 2 decimals below 10 ms ('3.25 ms'), none above ('1,234 ms')."""
    if missing(v):
        return none
    return f"{v:{sign},.2f} ms" if abs(v) < 10 else f"{v:{sign},.0f} ms"


def signed_ms(v, none: str = "-") -> str:
    return ms(v, none, sign="+")


def pct(v, signed: bool = True, none: str = "-") -> str:
    """2.345 -> '+2.3%' ('2.3%' unsigned)."""
    return none if missing(v) else f"{v:{'+' if signed else ''}.1f}%"


def duration(seconds) -> str:
    """'45 s', '4.5 min' or '2.1 h'."""
    seconds = float(seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"
