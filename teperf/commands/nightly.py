"""teperf nightly: measure a branch's head against the previous nightly's commit, append to the history.

Each night is a paired comparison (``teperf compare PREV..HEAD`` on git
sides), so the history holds both the absolute host time of every nightly
commit and a night-over-night delta with its own interval.  The first night
(no earlier nightly on this machine kind) pairs the head with its first parent.

``--shard I/N`` measures the I-th of N deterministic slices of the case
matrix, so N machines of one kind can split a night; every row records its
machine fingerprint (CPU model, GPU, driver) and machines never mix.

The decisions (which commit is the base, which cases a shard runs, which
machine this is) are plain functions below, testable without git or workers.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, Sequence

import click

from teperf.commands._common import (
    EXIT_STATUS_HELP,
    config_options,
    emit,
    fail_on_option,
    gate,
    grouped,
    output_options,
    side_options,
)
from teperf.commands._live import live_view
from teperf.commands.history import history_option, open_store
from teperf.commands.import_ import check_shard, parse_shard
from teperf.errors import EXIT_CELLS_FAILED, TeperfError, exit_status_for_signal
from teperf.options import MeasureOptions, SideOptions

DEFAULT_CONFIG = "nightly"


# ----------------------------------------------------------------------------- decisions (unit-tested)


def shard_cases(cases: Sequence[Any], index: int, count: int) -> list:
    """The ``index``-th (1-based) of ``count`` slices of ``cases``.

    Deterministic and independent of the order the matrix was written in:
    cases are sorted by (module, recipe, shape, dtype, mode) and dealt round-robin,
    so slices differ in size by at most one and every case is in exactly one slice.
    """
    check_shard(index, count)

    def key(c):
        shape = c.shape if isinstance(c.shape, str) else "x".join(map(str, c.shape))
        return (str(c.module), str(c.recipe), shape, str(c.dtype), str(c.mode))

    ordered = sorted(cases, key=key)
    return [c for k, c in enumerate(ordered) if k % count == index - 1]


@dataclasses.dataclass(frozen=True)
class BaseChoice:
    spec: str  # what git_sides gets: "PREV..HEAD", or "HEAD" (= HEAD^1..HEAD)
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
) -> BaseChoice:
    """Which commit tonight's head is paired with.

    The commit of the newest earlier nightly (by run date) of this machine kind and branch
    that measured another commit, whatever its shard.  There is nothing new (skip, unless
    ``force``) when this shard already has a complete run in this night (``night``, default: the
    head's), or when another night on this machine kind measured the head completely, every shard.
    A failed or interrupted shard is measured again, so its re-run completes the night.  When the
    previous commit is not an ancestor of the head (the branch was rewritten) or there is none,
    pair with the head's first parent.  ``is_ancestor(a, b)`` may be given to check ancestry
    (None: assume it is); ``has_parent(sha)`` whether the head has a parent (None: assume so);
    a root commit is measured against itself (A/A).
    """
    from teperf.history.store import default_night, latest_run

    have = history is not None and not history.empty
    if have and not force:
        skip = _already_measured(
            history,
            machine=machine,
            ref=ref,
            head_sha=head_sha,
            shard=shard,
            night=night or default_night(head_sha),
        )
        if skip:
            return BaseChoice(head_sha, None, skip, skip=True)
    prev = latest_run(history, machine=machine, ref=ref, exclude_sha=head_sha) if have else None

    def parent_choice(why: str) -> BaseChoice:
        if has_parent is not None and not has_parent(head_sha):
            return BaseChoice(
                f"{head_sha}..{head_sha}",
                None,
                f"{why}; the head is a root commit: measured against itself (A/A)",
            )
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


def _already_measured(
    history, *, machine: str, ref: str, head_sha: str, shard: str, night: str
) -> str | None:
    """Why this shard need not run (None: it must): see ``choose_base``."""
    from teperf.history.nights import nights

    sel = history[(history["machine"] == machine) & (history["ref"] == ref) & (history["sha"] == head_sha)]
    if sel.empty:
        return None
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
    """This machine's fingerprint as the nightly's rows will record it.

    On the CPU the worker reports no GPU, so neither does this; on CUDA the GPU name and driver
    come from nvidia-smi (the worker reads them from torch and /proc; they agree on NVIDIA's stack,
    and the run's rows use the worker's own report).
    """
    from teperf.api import cpu_model as _cpu
    from teperf.doctor import gpu_and_driver
    from teperf.history.store import machine_fingerprint

    cpu_model = cpu_model or _cpu()
    if device == "cuda" and gpu is None:
        gpu, driver = gpu_and_driver()
    if device != "cuda":
        gpu = driver = None
    return machine_fingerprint(cpu_model, gpu, driver)


def _check_night(night_id: str | None) -> str | None:
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


# ----------------------------------------------------------------------------- the command


@click.command("nightly", epilog=EXIT_STATUS_HELP)
@side_options("nightly", "repo")
@click.option("--ref", default="main", show_default=True, help="Branch (or any ref) whose head is measured.")
@history_option
@click.option(
    "--shard",
    metavar="I/N",
    help="Measure only the I-th of N slices of the case matrix (split a night over N machines).",
)
@click.option(
    "--night",
    "night_id",
    metavar="ID",
    help="Name of the night the shards belong to, the same for all N (e.g. the CI run id); "
    "default: the head commit.",
)
@side_options("nightly", "strategy", "jobs", "package", "build_command", "python")
@click.option(
    "--force", is_flag=True, help="Measure even if the head was already measured by the last nightly."
)
@click.option("--dry-run", is_flag=True, help="Say what would be measured, measure nothing.")
@click.option(
    "--counters/--no-counters",
    default=False,
    show_default=True,
    help="Count calls and ops per step (slower).",
)
@click.option(
    "--sweep",
    metavar="KEY=V1,V2,...",
    help="One cell per value of a module kwarg (num_gemms=1,2,4,8); the dashboard draws their slope.",
)
@fail_on_option
@config_options
@output_options
@grouped(default_config=DEFAULT_CONFIG)
def command(ref, history_url, shard, night_id, force, dry_run, sides: SideOptions, measure: MeasureOptions):
    """Measure REF's head against the previous nightly's commit and add it to the history.

    \b
    teperf nightly --repo ~/TransformerEngine --ref main
    teperf nightly --repo ~/TransformerEngine --shard 1/2 --night 2025-06-01    (machine A)
    teperf nightly --repo ~/TransformerEngine --shard 2/2 --night 2025-06-01    (machine B)
    """
    from teperf import api
    from teperf.plan import expand
    from teperf.sides.gitrepo import GitFailed, repo_root, resolve, run_git

    shard_i, shard_n = parse_shard(shard)
    config = measure.config
    cases = shard_cases(expand(config), shard_i, shard_n)
    if not cases:
        raise TeperfError(
            f"shard {shard_i}/{shard_n} has no cases: the matrix has only {len(expand(config))}",
            "use fewer shards (N at most the number of cases)",
        )
    root = repo_root(sides.repo)
    head_sha = resolve(root, ref, what="--ref")
    store = open_store(history_url)
    history = store.read()
    machine, label = local_machine(config.device)
    night_id = _check_night(night_id)

    def is_ancestor(a: str, b: str) -> bool:
        try:
            run_git(root, "merge-base", "--is-ancestor", a, b)
            return True
        except GitFailed:
            return False

    def has_parent(sha: str) -> bool:
        try:
            run_git(root, "rev-parse", "--verify", "--quiet", f"{sha}^1")
            return True
        except GitFailed:
            return False

    choice = choose_base(
        history,
        machine=machine,
        ref=ref,
        head_sha=head_sha,
        shard=f"{shard_i}/{shard_n}",
        night=night_id,
        force=force,
        is_ancestor=is_ancestor,
        has_parent=has_parent,
    )
    from teperf.history.store import default_night

    night = night_id or default_night(head_sha)
    click.echo(
        f"nightly: {ref} at {head_sha[:10]} on {label} (machine {machine}), night {night} shard {shard_i}/{shard_n}: "
        f"{len(cases)} case{'s' if len(cases) != 1 else ''}; {choice.reason}",
        err=True,
    )
    if choice.skip:
        click.echo("nightly: nothing new to measure (use --force to measure it again)", err=True)
        return
    if dry_run:
        for c in cases:
            click.echo(f"  would measure {c.key}", err=True)
        return

    base, head = dataclasses.replace(sides, repo=str(root)).plan(choice.spec).make()
    nightly_meta = {
        "nightly": {
            "ref": ref,
            "shard": f"{shard_i}/{shard_n}",
            "night": night,
            "machine": machine,
            "base_reason": choice.reason,
            "history": str(store.url),
        }
    }
    record = dict(run_kind="nightly", ref=ref, shard=f"{shard_i}/{shard_n}", night=night)
    try:
        with live_view() as (factory, listener):
            path = api.compare(
                config,
                base,
                head,
                results_dir=measure.results_dir,
                command=["teperf"] + sys.argv[1:],
                progress=factory,
                extra_meta=nightly_meta,
                cases=list(cases),
                live=listener,
            )
    except api.Interrupted as stop:
        # the shard is recorded as interrupted, so its night shows it (not as missing, never as complete)
        try:
            file, _ = store.add_summary(api.summarize(stop.path), bundle=str(stop.path), **record)
            where = f"added to the history as an interrupted shard ({file})"
        except TeperfError as exc:  # e.g. stopped before the first cell: nothing to record
            where = f"not added to the history ({exc.one_line()})"
        click.echo(f"teperf: interrupted; {where}. The bundle keeps what was measured: {stop.path}", err=True)
        sys.exit(exit_status_for_signal(stop.signum))
    summary = api.summarize(path)
    emit(summary, measure.fmt)
    file, _ = store.add_summary(summary, bundle=str(path), **record)
    recorded = summary.meta.get("host", {})
    from teperf.history.store import machine_from_meta

    actual = machine_from_meta(summary.meta)["machine"]
    if actual != machine:
        click.echo(
            f"teperf: warning: the workers reported machine {actual}, the probe said {machine} "
            f"(GPU/driver names differ: {recorded.get('gpu')!r}, {recorded.get('driver')!r}); "
            "the base was chosen from the probe's history",
            err=True,
        )
    click.echo(f"nightly: added to the history: {file}", err=True)
    if summary.meta.get("status") == "failed" or summary.incomplete_rows:
        sys.exit(EXIT_CELLS_FAILED)
    gate(summary, measure.fail_on)
