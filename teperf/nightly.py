"""teperf nightly's decisions and plan, without git or workers: which commit tonight's head is paired
with (each night is ``compare PREV..HEAD``), which cases a shard runs, which machine this is."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from teperf.cpus import cpu_model as _cpu
from teperf.doctor import gpu_and_driver
from teperf.errors import TeperfError
from teperf.history.nights import nights
from teperf.history.store import default_night, latest_run, machine_fingerprint
from teperf.records import shape_text

DEFAULT_CONFIG = "nightly"


def parse_shard(text: str | None) -> tuple[int, int]:
    """'I/N' -> (I, N) with 1 <= I <= N."""
    if text is None:
        return 1, 1
    try:
        i, n = map(int, text.split("/"))
    except ValueError:
        raise TeperfError(f"malformed shard {text!r}", "write it as I/N, e.g. --shard 2/4") from None
    return check_shard(i, n)


def check_shard(i: int, n: int) -> tuple[int, int]:
    """(I, N) back if 1 <= I <= N, else a TeperfError (for --shard and nightly's shard_cases)."""
    if n < 1:
        raise TeperfError(f"shard {i}/{n}: N, the number of shards, must be at least 1", "e.g. --shard 1/2")
    if not 1 <= i <= n:
        raise TeperfError(
            f"shard {i}/{n} out of range", "I must be between 1 and N, e.g. --shard 1/2 and --shard 2/2"
        )
    return i, n


def shard_cases(cases: Sequence[Any], index: int, count: int) -> list:
    """The ``index``-th (1-based) of ``count`` slices of ``cases``: sorted, so independent of the matrix's
    order, and dealt round-robin."""
    check_shard(index, count)

    def key(c):
        return (str(c.module), str(c.recipe), shape_text(c.shape), str(c.dtype), str(c.mode))

    return sorted(cases, key=key)[index - 1 :: count]


@dataclasses.dataclass(frozen=True)
class BaseChoice:
    spec: str  # what plan_sides gets: "PREV..HEAD", or "HEAD" (= HEAD^1..HEAD)
    base_sha: str | None  # the previous nightly's commit, when it is the base
    reason: str
    skip: bool = False


def choose_base(
    history,
    *,
    machine: str,
    ref: str,
    head_sha: str,
    shard: str = "1/1",
    night: str | None = None,
    force: bool = False,
    is_ancestor=None,
    has_parent=None,
    base_among: set | None = None,
) -> BaseChoice:
    """Tonight's base: the newest earlier nightly's commit of this machine kind and branch (any shard; only
    ``base_among`` in a backfill), else or when no ancestor the head's first parent (a root commit: itself,
    A/A). Skip unless ``force`` when this shard of ``night`` completed, or another night did the head."""
    have = history is not None and not history.empty
    if have and not force:
        if skip := already_measured(history, machine, ref, head_sha, shard, night or default_night(head_sha)):
            return BaseChoice(head_sha, None, skip, skip=True)
    if have and base_among is not None:
        history = history[history["sha"].isin(base_among)]
    have = have and not history.empty
    prev = latest_run(history, machine=machine, ref=ref, exclude_sha=head_sha) if have else None

    def parent_choice(why: str) -> BaseChoice:
        if has_parent is not None and not has_parent(head_sha):
            why += "; the head is a root commit: measured against itself (A/A)"
            return BaseChoice(f"{head_sha}..{head_sha}", None, why)
        return BaseChoice(head_sha, None, f"{why}: paired with the head's first parent")

    if prev is None:
        return parent_choice("no earlier nightly of another commit on this machine")
    if is_ancestor is not None and not is_ancestor(prev["sha"], head_sha):
        return parent_choice(
            f"the previous nightly's {prev['sha'][:10]} is not an ancestor of the head (rewritten branch?)"
        )
    return BaseChoice(
        f"{prev['sha']}..{head_sha}", prev["sha"], f"paired with the previous nightly's {prev['sha'][:10]}"
    )


def already_measured(history, machine: str, ref: str, head_sha: str, shard: str, night: str) -> str | None:
    """Why this shard need not run (None: it must): see ``choose_base``."""
    sel = history[(history["machine"] == machine) & (history["ref"] == ref) & (history["sha"] == head_sha)]
    mine = sel[(sel["night"] == night) & (sel["shard"] == shard) & (sel["run_status"] == "complete")]
    if not mine.empty:
        return (
            f"{head_sha[:10]} was already measured (shard {shard}) by the nightly of {mine['run_date'].max()}"
        )
    whole = [n for n in nights(sel) if n.night != night and n.complete]
    if whole:
        last = whole[-1]
        return f"{head_sha[:10]} was already measured, every shard, by night {last.night} of {last.started}"
    return None


def local_machine(
    device: str, *, cpu_model: str | None = None, gpu: str | None = None, driver: str | None = None
) -> tuple[str, str]:
    """This machine's fingerprint as the nightly's rows will record it (on CUDA the GPU from nvidia-smi,
    which agrees with what the worker reports)."""
    cpu_model = cpu_model or _cpu()
    if device == "cuda" and gpu is None:
        gpu, driver = gpu_and_driver()
    if device != "cuda":
        gpu = driver = None
    return machine_fingerprint(cpu_model, gpu, driver)


def check_night(night_id: str | None) -> str | None:
    """A night id is text that every shard repeats; it must be short and printable (it is shown as is)."""
    if night_id is None:
        return None
    night_id = night_id.strip()
    if not night_id or len(night_id) > 100 or not night_id.isprintable():
        raise TeperfError(
            f"--night {night_id!r} is not a usable night id",
            "give a short printable name that all shards of the night share, e.g. --night gh-$GITHUB_RUN_ID",
        )
    return night_id


@dataclasses.dataclass(frozen=True)
class NightlyPlan:
    """What tonight's run of this shard measures, against what, on which machine (api.plan_nightly)."""

    ref: str
    head_sha: str
    repo: str  # the checkout's root
    shard: tuple[int, int]
    night: str
    machine: str
    label: str  # the machine's CPU / GPU in words
    cases: tuple
    choice: BaseChoice
    store: Any  # teperf.history.store.HistoryStore

    @property
    def shard_text(self) -> str:
        return f"{self.shard[0]}/{self.shard[1]}"

    def describe(self) -> str:
        n = len(self.cases)
        return (
            f"nightly: {self.ref} at {self.head_sha[:10]} on {self.label} (machine {self.machine}), night "
            f"{self.night} shard {self.shard_text}: {n} case{'s' if n != 1 else ''}; {self.choice.reason}"
        )

    def to_dict(self) -> dict:
        """The plan as data (``nightly --dry-run --format json``, and a night with nothing new)."""
        return {
            "ref": self.ref,
            "head_sha": self.head_sha,
            "repo": self.repo,
            "shard": self.shard_text,
            "night": self.night,
            "machine": self.machine,
            "label": self.label,
            "spec": self.choice.spec,
            "base_sha": self.choice.base_sha,
            "reason": self.choice.reason,
            "skip": self.choice.skip,
            "cases": [c.key for c in self.cases],
        }

    def record(self) -> dict:
        """What the history rows of this shard say about the run."""
        return dict(run_kind="nightly", ref=self.ref, shard=self.shard_text, night=self.night)

    def meta(self) -> dict:
        """What the bundle's meta says about the run."""
        return {
            "nightly": {
                "ref": self.ref,
                "shard": self.shard_text,
                "night": self.night,
                "machine": self.machine,
                "base_reason": self.choice.reason,
                "history": str(self.store.url),
            }
        }


@dataclasses.dataclass(frozen=True)
class NightlyResult:
    path: Any  # the bundle
    summary: Any  # teperf.summary.Summary
    history_file: str  # where its rows went
    machine_warning: str | None = None  # the workers reported another machine than the probe
    # the package did not change between the two commits: nothing measured or recorded (path etc. None)
    unchanged: str | None = None


class NightlyInterrupted(Exception):
    """Ctrl-C or SIGTERM during a nightly; the shard was recorded as interrupted where it could be."""

    def __init__(self, stop, recorded: str):
        super().__init__(str(stop.path))
        self.path, self.signum, self.recorded = stop.path, stop.signum, recorded
