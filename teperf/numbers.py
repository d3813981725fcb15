"""How a number reads wherever teperf writes one (terminal and markdown tables, notes, the dashboard,
explain): one home, so that every place says 1,234.5 us, +2.3% and 4.5 min the same way."""

from __future__ import annotations

import math
import re

from teperf.errors import TeperfError


def missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def us(v, none: str = "-") -> str:
    """1234.5 -> '1,234.5 us'."""
    return none if missing(v) else f"{v:,.1f} us"


def signed_us(v) -> str:
    """12.25 -> '+12.2 us'."""
    return "-" if missing(v) else f"{v:+,.1f} us"


def ms(v, none: str = "-", sign: str = "") -> str:
    """One-time costs: 2 decimals below 10 ms ('3.25 ms'), none above ('1,234 ms')."""
    if missing(v):
        return none
    return f"{v:{sign},.2f} ms" if abs(v) < 10 else f"{v:{sign},.0f} ms"


def signed_ms(v) -> str:
    return ms(v, sign="+")


def pct(v, signed: bool = True, none: str = "-") -> str:
    """2.345 -> '+2.3%' ('2.3%' unsigned)."""
    return none if missing(v) else f"{v:{'+' if signed else ''}.1f}%"


def duration(seconds) -> str:
    """'45 s', '4.5 min' or '2.1 h'."""
    seconds = float(seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


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
