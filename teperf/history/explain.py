"""Each change point of the history bisected between the two nights around it, once (again only when its
bisect failed) and only on its own machine kind, stored as an ExplanationRecord keyed by machine, cell
and the two nights' commits."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import re
from typing import Iterable, Optional

from teperf import __version__
from teperf.errors import TeperfError
from teperf.records import CELL_KEY, CULPRIT_FIELDS, ExplanationRecord
from teperf.sides.gitrepo import GitFailed, run_git

_GITHUB = re.compile(r"^(?:https?://|ssh://git@|git@)github\.com[:/]([^/]+)/(.+?)(?:\.git)?/?$")


def commit_url(remote: Optional[str], sha: str) -> Optional[str]:
    """The web page of ``sha`` when the remote is GitHub's (https or ssh form); else None."""
    m = _GITHUB.match((remote or "").strip())
    return f"https://github.com/{m.group(1)}/{m.group(2)}/commit/{sha}" if m else None


def remote_url(repo: str) -> Optional[str]:
    """The repository's origin URL (None: no remote, or not a git repository)."""
    try:
        return run_git(repo, "config", "--get", "remote.origin.url").strip() or None
    except (GitFailed, TeperfError, OSError):
        return None


@dataclasses.dataclass(frozen=True)
class ChangePoint:
    """One detected change, as what a bisect needs: the cell and the commits of the nights around it."""

    cell: object  # teperf.history.analysis.Cell
    found: object  # teperf.history.analysis.Found
    good_sha: str
    bad_sha: str

    @property
    def key(self) -> str:
        text = "\0".join((*map(str, self.cell.key), self.good_sha, self.bad_sha))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def spec(self) -> str:
        """The cell as bisect's --cell names it: MODULE/RECIPE/SHAPE/MODE."""
        return "/".join((self.cell.module, self.cell.recipe, self.cell.shape, self.cell.mode))


def change_point(cell, ch) -> Optional[ChangePoint]:
    """A change with a night before it and commits on both sides (a drift: its whole span); else None."""
    bad = cell.points[ch.end_index] if ch.kind == "drift" else ch.first_bad
    if ch.last_good is None or not ch.last_good.sha or not bad.sha or ch.last_good.sha == bad.sha:
        return None
    return ChangePoint(cell, ch, ch.last_good.sha, bad.sha)


def change_points(cells: Iterable) -> list[ChangePoint]:
    return [p for cell in cells for ch in cell.changes if (p := change_point(cell, ch)) is not None]


def explanation_of(cell, ch, known: dict) -> Optional[ExplanationRecord]:
    """The stored record of a change (``known``: store.explanations()), or None."""
    point = change_point(cell, ch)
    return None if point is None else known.get(point.key)


def record(
    point: ChangePoint, result: dict, bundle: Optional[str], remote: Optional[str]
) -> ExplanationRecord:
    """A bisect's meta.json "result" -> the change point's record (pure)."""
    endpoint = result.get("endpoint") or {}
    answer = str(result.get("answer") or "")
    if result.get("status") == "no change":
        status = "noise"
    elif endpoint.get("verdict") in ("slower", "faster") and endpoint["verdict"] != point.found.direction:
        # the bisect found what moved GOOD..BAD, but GOOD..BAD measured again moved the other way: its
        # culprits are not this change's, which the paired measurement did not reproduce
        status = "noise"
        answer = (
            f"not reproduced: the history's step is {point.found.direction} {point.found.delta_us:+.1f} us, "
            f"GOOD..BAD measured again {endpoint['verdict']} {endpoint.get('delta_us', 0.0):+.1f} us "
            f"(the bisect: {answer})"
        )
    else:
        status = "explained" if result.get("explained") else "unexplained"
    found = [] if status == "noise" else result.get("culprits") or []
    culprits = [dict({k: c.get(k) for k in CULPRIT_FIELDS}, url=commit_url(remote, c["sha"])) for c in found]
    return ExplanationRecord(
        key=point.key,
        **{name: getattr(point.cell, name) for name in ("machine", *CELL_KEY)},
        good_sha=point.good_sha,
        bad_sha=point.bad_sha,
        status=status,
        answer=answer or status,
        culprits=culprits,
        rest_us=(result.get("rest") or {}).get("delta_us"),
        delta_us=endpoint.get("delta_us"),
        bundle=bundle,
        explained_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        teperf_version=__version__,
    )


def failed(point: ChangePoint, why: str) -> ExplanationRecord:
    """A bisect that could not run: recorded (so the history says so), bisected again next time."""
    return dataclasses.replace(record(point, {"answer": f"failed: {why}"}, None, None), status="failed")


def pending(points: list[ChangePoint], known: dict, machine: str) -> list[ChangePoint]:
    """The change points of ``machine`` not yet explained (a failed bisect is tried again)."""
    mine = [p for p in points if p.cell.machine == machine]
    return [p for p in mine if p.key not in known or known[p.key].status == "failed"]


def as_dict(rec: Optional[ExplanationRecord]) -> Optional[dict]:
    """What ``history --changes --format json`` and the dashboard carry of a record."""
    keep = ("status", "answer", "culprits", "delta_us", "rest_us", "bundle", "explained_at", "schema")
    return None if rec is None else {k: getattr(rec, k) for k in keep}
