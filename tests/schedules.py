"""The tests' measuring schedules, in one place: what a test that starts real workers passes to run/compare.

A compare of N pairs starts 2N workers (a torch import each, about 3.5 s of CPU) with --spawn fresh, or one
server per side every --server-pairs pairs with --spawn forkserver (FORKED). Pick the smallest schedule that
still tests the behaviour; a test that asserts a verdict on timing needs pairs (SMALL's 4 or more).
"""

from __future__ import annotations


def schedule(
    trials: int, iters: int, warmup: int, *, processes: int | None = None, rounds: int = 1
) -> list[str]:
    """The schedule flags: --processes (if given), --rounds, --trials, --iters, --warmup."""
    head = [] if processes is None else ["--processes", str(processes)]
    return [
        *head,
        "--rounds",
        str(rounds),
        "--trials",
        str(trials),
        "--iters",
        str(iters),
        "--warmup",
        str(warmup),
    ]


# 4 pairs of 4 trials: enough pairs for an interval over pairs (t over 3 degrees of freedom)
SMALL = schedule(4, 30, 10, processes=4)
# 3 pairs of 4 trials: an A/A's verdicts over pairs
AA = schedule(4, 30, 10, processes=3)
# one pair of two short trials: that it runs and what it records, not its timing
ONE_PAIR = schedule(2, 10, 2, processes=1)
# 1 pair, 5 iterations and no prestart: the cheapest compare that measures at all
TINY = [*schedule(2, 5, 2, processes=1), "--prestart", "0"]
# 2 pairs of 2 trials of 5 iterations
TWO_PAIRS = schedule(2, 5, 2, processes=2)

# Where fresh interpreters are not the subject: one torch import per side (a fork server), not one per worker.
FORKED = ["--spawn", "forkserver"]
