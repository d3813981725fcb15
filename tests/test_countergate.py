"""The counters gate (teperf/counters/, ``teperf counters check``, ``compare --expected``).

Unit tests work on files and counter dicts only; the integration tests start real CPU
workers on a fixture package whose forward calls ``helper`` K extra times (2K Python calls).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from conftest import run_in_process
from schedules import TINY

from teperf.counters import file as cf
from teperf.counters import gate as cg
from teperf.counters.render import render
from teperf.errors import TeperfError

MADE_WITH = {"python": "3.11", "torch": "2.13.0+cpu", "device": "cpu", "teperf": "0.2.0"}
COUNTS = {"python_calls": 24, "aten_ops": 20, "autograd_nodes": 8, "allocations": 8}


def write_expected(path: Path, rows: dict, tolerance: dict | None = None, extra: str = "") -> Path:
    text = cf.new_file_text(path.name, MADE_WITH, rows)
    if tolerance:
        text = text.replace(
            "[cells]", "[tolerance]\n" + "".join(f"{k} = {v}\n" for k, v in tolerance.items()) + "\n[cells]"
        )
    path.write_text(text + extra)
    return path


# ---- the file ----


def test_file_round_trip_and_stable_order(tmp_path):
    path = write_expected(tmp_path / "e.toml", {"b/fp32/4x16/eager": COUNTS, "a/fp32/4x16/eager": COUNTS})
    expected = cf.Expected.read(path)
    assert expected.made_with == MADE_WITH
    assert list(expected.rows) == ["a/fp32/4x16/eager", "b/fp32/4x16/eager"]  # sorted when written
    assert expected.rows["a/fp32/4x16/eager"].counts == COUNTS
    # None counters (kernels on the CPU) are left out of the row, not written as 0
    line = cf.row_line("x", {**COUNTS, "kernel_launches": None})
    assert "kernel_launches" not in line and line.startswith('"x" = { python_calls = 24')


@pytest.mark.parametrize(
    "text, words",
    [
        ("[made_with]\npython = 3\n", "no [made_with]"),
        (
            '[made_with]\npython = "3.11"\n[cells]\n"a" = { pyton_calls = 1 }\n',
            "unknown counter 'pyton_calls'",
        ),
        ('[made_with]\npython = "3.11"\n[cells]\n"a" = { python_calls = -1 }\n', "whole number"),
        ('[made_with]\npython = "3.11"\n[extra]\n', "unknown section"),
        ("[made_with\n", "invalid TOML"),
    ],
)
def test_bad_files_are_refused_in_one_line(tmp_path, text, words):
    path = tmp_path / "e.toml"
    path.write_text(text)
    with pytest.raises(TeperfError) as info:
        cf.Expected.read(path)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_missing_file_names_update(tmp_path):
    with pytest.raises(TeperfError, match="--update"):
        cf.Expected.read(tmp_path / "nope.toml")


# ---- comparing ----


def test_exact_by_default_and_either_direction_fails(tmp_path):
    expected = cf.Expected.read(write_expected(tmp_path / "e.toml", {"c": COUNTS}))
    assert cg.compare_counts(expected, "c", dict(COUNTS)).status == "ok"
    worse = cg.compare_counts(expected, "c", {**COUNTS, "python_calls": 25})
    assert worse.status == "changed" and not worse.win
    assert worse.changes[0].text() == "python_calls 24 -> 25 (+1, regression)"
    better = cg.compare_counts(expected, "c", {**COUNTS, "aten_ops": 19})
    assert better.status == "changed" and better.win  # a win fails too: the file must be updated
    assert cg.compare_counts(expected, "other", COUNTS).status == "new"
    gone = cg.compare_counts(expected, "c", {**COUNTS, "allocations": None})
    assert gone.changes[0].kind == "not measured"
    extra = cg.compare_counts(expected, "c", {**COUNTS, "graphs": 2})
    assert extra.changes[0].kind == "new counter"


def test_tolerance_per_row_and_per_file(tmp_path):
    path = write_expected(
        tmp_path / "e.toml",
        {"c": COUNTS},
        tolerance={"allocations": 1},
    )
    path.write_text(
        path.read_text().replace("allocations = 8 }", "allocations = 8, tolerance = { python_calls = 2 } }")
    )
    expected = cf.Expected.read(path)
    assert cg.compare_counts(expected, "c", {**COUNTS, "python_calls": 26, "allocations": 7}).status == "ok"
    out = cg.compare_counts(expected, "c", {**COUNTS, "python_calls": 27, "allocations": 10})
    assert [(c.counter, c.allowed) for c in out.changes] == [("python_calls", 2), ("allocations", 1)]


def test_rewrite_touches_only_changed_rows_keeps_comments_and_tolerance(tmp_path):
    path = write_expected(tmp_path / "e.toml", {"b": COUNTS, "d": COUNTS})
    text = path.read_text().replace('"d" = {', '# d is the big one\n"d" = {')
    text = text.replace(
        '"b" = { python_calls = 24, aten_ops = 20, autograd_nodes = 8, allocations = 8 }',
        '"b" = { python_calls = 24, aten_ops = 20, autograd_nodes = 8, allocations = 8, '
        "tolerance = { allocations = 3 } }",
    )
    path.write_text(text)
    expected = cf.Expected.read(path)
    new = cf.rewrite(expected, {"b": {**COUNTS, "python_calls": 30}, "c": COUNTS, "e": COUNTS})
    old_lines, new_lines = text.splitlines(), new.splitlines()
    assert [line for line in new_lines if line not in old_lines] == [
        '"b" = { python_calls = 30, aten_ops = 20, autograd_nodes = 8, allocations = 8, tolerance = { '
        "allocations = 3 } }",
        cf.row_line("c", COUNTS),
        cf.row_line("e", COUNTS),
    ]
    assert [line for line in old_lines if line not in new_lines] == [
        old_lines[
            old_lines.index(
                '"b" = { python_calls = 24, aten_ops = 20, autograd_nodes = 8, allocations = 8, tolerance = '
                "{ allocations = 3 } }"
            )
        ]
    ]
    rows = [line.split('"')[1] for line in new_lines if line.startswith('"')]
    assert rows == ["b", "c", "d", "e"]  # sorted; the comment stays above d
    assert new_lines[new_lines.index(cf.row_line("d", COUNTS)) - 1] == "# d is the big one"
    path.write_text(new)
    assert cf.Expected.read(path).rows["b"].tolerance == {"allocations": 3}


def test_versions_decide_and_the_package_commit_does_not():
    hello = {
        "python": "3.11.9",
        "torch": "2.13.0+cu130",
        "gpu": "NVIDIA H200",
        "backend_te": {"version": "2.16.0.dev0+abc123"},
    }
    made = cf.made_with(hello, "cuda")
    assert made["python"] == "3.11" and made["transformer_engine"] == "2.16.0.dev0"
    other = cf.made_with({**hello, "backend_te": {"version": "2.16.0.dev0+fff999"}}, "cuda")
    assert cf.version_mismatch(made, other) == []
    newer = cf.made_with({**hello, "torch": "2.14.0+cu130"}, "cuda")
    assert cf.version_mismatch(made, newer) == ["torch 2.13.0+cu130 -> 2.14.0+cu130"]
    assert cf.version_mismatch(made, {**made, "teperf": "9.9"}) == []  # informational only


def test_functions_named_from_the_call_diff():
    before = {"pkg/mod.py::Block.forward": 1.0, "pkg/mod.py::helper": 1.0, "pkg/mod.py::_inner": 1.0}
    after = {
        "pkg/mod.py::Block.forward": 1.0,
        "pkg/mod.py::helper": 4.0,
        "pkg/mod.py::_inner": 4.0,
        "~::<built-in method len>": 2.0,
    }
    texts = cg.functions_text(before, after)
    assert texts[:2] == ["+3 calls of _inner (pkg/mod.py)", "+3 calls of helper (pkg/mod.py)"]
    assert "+2 calls of <built-in method len>" in texts
    assert cg.functions_text({}, after) == []  # nothing recorded: nothing claimed


# ---- real workers ----

FIX_MODULE = textwrap.dedent(
    """
    import torch

    EXTRA = {extra}


    def _inner(v):
        return v + 1


    def helper(v):
        return _inner(v)


    class Block(torch.nn.Module):
        def __init__(self, hidden=16):
            super().__init__()
            self.lin = torch.nn.Linear(hidden, hidden)

        def forward(self, x):
            for _ in range(EXTRA):
                helper(1)
            return self.lin(x)


    def make(hidden=16):
        return Block(hidden)
    """
)

FIX_CONFIG = """
backend = "torch"
device = "cpu"
recipes = ["fp32"]
shapes = [[4, 16]]

[modules.Block]
factory = "gatepkg.mod:make"

[schedule]
warmup = 3
"""


def side(root: Path, extra: int) -> Path:
    pkg = root / "gatepkg"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(FIX_MODULE.format(extra=extra))
    return root


@pytest.mark.real_worker  # counts in one-off workers
def test_check_update_and_refusal_end_to_end(tmp_path, capsys):
    config = tmp_path / "gate.toml"
    config.write_text(FIX_CONFIG)
    base, head = side(tmp_path / "base", 0), side(tmp_path / "head", 3)
    expected = tmp_path / "expected" / "counters.toml"
    check = ["counters", "check", "--config", str(config), "--expected", str(expected)]

    code, out, err = run_in_process(check + ["--path", str(base), "--update"], capsys)
    assert code == 0, err
    assert "Block/fp32/4x16/eager added" in out
    made = cf.Expected.read(expected)
    calls = json.loads(cf.calls_path(expected).read_text())["cells"]["Block/fp32/4x16/eager"]
    assert calls["gatepkg/mod.py::Block.forward"] == 1

    # head: 3 more helper calls = 6 more Python calls, and the functions that account for them
    code, out, err = run_in_process(check + ["--path", str(head)], capsys)
    assert code == 1, (out, err)
    before = made.rows["Block/fp32/4x16/eager"].counts["python_calls"]
    assert f"python_calls {before} -> {before + 6} (+6, regression)" in out
    assert "+3 calls of _inner (gatepkg/mod.py)" in out and "+3 calls of helper (gatepkg/mod.py)" in out
    assert (
        cf.row_line(
            "Block/fp32/4x16/eager", {**made.rows["Block/fp32/4x16/eager"].counts, "python_calls": before + 6}
        )
        in out
    )

    # a file made under another torch is refused, not diffed
    text = expected.read_text()
    expected.write_text(text.replace('torch = "', 'torch = "0.0.1-'))
    code, out, err = run_in_process(check + ["--path", str(head)], capsys)
    assert code == 2 and "made with other versions (torch 0.0.1-" in err and "\n" not in err.strip()
    expected.write_text(text)

    # --update rewrites the changed row only; then head passes and base is a win
    code, out, err = run_in_process(check + ["--path", str(head), "--update"], capsys)
    assert code == 0 and "Block/fp32/4x16/eager rewritten" in out
    assert cf.Expected.read(expected).rows["Block/fp32/4x16/eager"].counts["python_calls"] == before + 6
    code, out, err = run_in_process(check + ["--path", str(base), "--format", "json"], capsys)
    assert code == 1
    cell = json.loads(out)["cells"][0]
    assert cell["status"] == "changed" and cell["win"] is True and cell["changes"][0]["kind"] == "win"
    code, out, err = run_in_process(check + ["--path", str(base)], capsys)
    assert code == 1 and "(-6, win) - win: update the file" in out


FIXTURE_BUNDLE = Path(__file__).parent / "fixtures" / "bundles" / "v2-compare-compile-cpu"


def test_compare_bundle_head_against_the_file(tmp_path):
    # A real CPU compare (eager + compile; head's MLP busy-waits): base's counters make the file.
    base = {
        "Linear/fp32/8x2x64/eager": {
            "python_calls": 24,
            "aten_ops": 20,
            "autograd_nodes": 8,
            "allocations": 8,
        },
        "MLP/fp32/8x2x64/eager": {
            "python_calls": 46,
            "aten_ops": 42,
            "autograd_nodes": 18,
            "allocations": 21,
        },
        "MLP/fp32/8x2x64/compile": {
            "python_calls": 156,
            "aten_ops": 42,
            "autograd_nodes": 9,
            "allocations": 19,
        },
        "Gone/fp32/8x2x64/eager": COUNTS,
    }
    path = write_expected(tmp_path / "e.toml", base)
    result = cg.check_bundle(FIXTURE_BUNDLE, path)
    assert result.side == "head"
    by_key = {c.key: c for c in result.cells}
    assert by_key["Linear/fp32/8x2x64/eager"].status == "ok"
    assert [c.text() for c in by_key["MLP/fp32/8x2x64/compile"].changes] == [
        "python_calls 156 -> 162 (+6, regression)"
    ]
    assert by_key["LayerNormLinear/fp32/8x2x64/eager"].status == "new"
    assert result.not_in_config == ["Gone/fp32/8x2x64/eager"]
    assert not result.passed
    text = render(result)
    assert "the head side's counters of 6 cells" in text and "1 row of the file not in this config" in text
    assert cg.check_bundle(FIXTURE_BUNDLE, path, "base").cells[0].status == "ok"
    other = write_expected(tmp_path / "o.toml", base)
    other.write_text(other.read_text().replace('python = "3.11"', 'python = "3.12"'))
    with pytest.raises(TeperfError, match=r"python 3.12 -> 3.11"):
        cg.check_bundle(FIXTURE_BUNDLE, other)


@pytest.mark.real_worker
def test_compare_expected_gates_the_head_side(tmp_path, capsys):
    config = tmp_path / "gate.toml"
    config.write_text(FIX_CONFIG)
    base, head = side(tmp_path / "base", 0), side(tmp_path / "head", 2)
    expected = tmp_path / "counters.toml"
    code, out, err = run_in_process(
        [
            "counters",
            "check",
            "--config",
            str(config),
            "--expected",
            str(expected),
            "--path",
            str(base),
            "--update",
        ],
        capsys,
    )
    assert code == 0, err
    # one pair: the gate reads counters, not timing
    compare = ["compare", "--config", str(config), *TINY, "--results-dir", str(tmp_path / "results")]
    code, out, err = run_in_process(
        compare + ["--base-path", str(base), "--head-path", str(head), "--expected", str(expected)], capsys
    )
    assert code == 1, (out, err)
    assert "the head side's counters of 1 cell" in out and "(+4, regression)" in out
    assert "+2 calls of helper (gatepkg/mod.py)" in out  # one more head worker named the functions
    code, out, err = run_in_process(
        compare + ["--base-path", str(head), "--head-path", str(base), "--expected", str(expected)], capsys
    )
    assert code == 0, (out, err)
    assert "1 cell as expected" in out
    code, out, err = run_in_process(
        compare
        + ["--base-path", str(base), "--head-path", str(base), "--expected", str(expected), "--no-counters"],
        capsys,
    )
    assert code == 2 and "--expected needs the counters" in err
    code, out, err = run_in_process(
        compare
        + ["--base-path", str(base), "--head-path", str(base), "--expected", str(expected)]
        + ["--compile-cache", "warm"],
        capsys,
    )
    assert code == 2 and "--compile-cache cold" in err


def test_counters_update_into_a_place_it_cannot_write_names_the_file_asked_for():
    from pathlib import Path

    import pytest

    from teperf.counters.gate import CheckResult, _update
    from teperf.errors import TeperfError

    result = CheckResult(path=Path("/proc/cnt.toml"), side="run", made_with={}, cells=[], not_in_config=[])
    with pytest.raises(TeperfError, match=r"cannot write /proc/cnt.toml: ") as refused:
        _update(result, None)
    assert ".cnt.toml.tmp" not in str(refused.value)
