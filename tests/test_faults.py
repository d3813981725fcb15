"""Issue 13 without worker processes: refused mistakes, hints, escaping, damaged bundles,
help texts, exit statuses (the CLI in-process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_in_process

from teperf import cli
from teperf.config import build_config
from teperf.engine.hints import OOM_HINT, failure_hint, start_hint
from teperf.engine.spawn import WorkerError, exit_text
from teperf.errors import TeperfError
from teperf.render import render
from teperf.safe_text import for_markdown, for_terminal
from teperf.summary import summarize

run = run_in_process


# --- config mistakes: one line each, exit 2, before any worker starts ---------------------------


@pytest.mark.parametrize(
    "argv, words",
    [
        (["run", "--modules", ""], "--modules is empty"),
        (["run", "--modules", " , "], "--modules is empty"),
        (["run", "--recipes", ""], "--recipes is empty"),
        (["run", "--backend", "te", "--device", "cpu"], "--backend te needs a CUDA device"),
        (["run", "--timeout", "0"], "--timeout must be a positive number"),
        (["run", "--trials", "0"], "--trials must be an integer"),
        (
            ["compare", "--trials", "3", "--rounds", "1", "--base-path", ".", "--head-path", "."],
            "use an even number, e.g. --trials 4",
        ),
        (["run", "--shape", "100000,100000", "--modules", "Linear"], "use a smaller --shape"),
        (["doctor", "--core", "999"], "core 999 is not available"),
    ],
)
def test_cli_mistakes_are_refused_in_one_line(argv, words, capsys):
    code, out, err = run(argv, capsys)
    assert code == 2, err
    assert words in err and err.count("\n") == 1 and "Traceback" not in err
    assert "isolcpus" not in err + out


@pytest.mark.parametrize(
    "raw, words",
    [
        ({"modules": []}, "modules is empty"),
        ({"shapes": []}, "shapes is empty"),
        ({"modules": {"Linear": {"kwargs": {"hidden": 8}}}}, "takes no kwargs"),
        ({"schedule": {"timeout_s": -1}}, "timeout_s must be"),  # a TOML value: named by its key, not a flag
    ],
)
def test_config_file_mistakes_are_refused(raw, words):
    with pytest.raises(TeperfError, match=words):
        build_config(raw, {})


def test_errors_name_the_flag_only_when_the_user_typed_it():
    cli_cfg = build_config({}, {"timeout_s": 5.0})
    toml_cfg = build_config({"schedule": {"timeout_s": 5.0}}, {})
    assert cli_cfg.option("timeout_s") == "--timeout" and toml_cfg.option("timeout_s") == "timeout_s"
    with pytest.raises(TeperfError, match="trials 3 x rounds 1.*trials = 4"):
        from teperf.api import compare, path_side

        compare(
            build_config({"schedule": {"trials": 3, "rounds": 1}}, {}), path_side("base"), path_side("head")
        )
    from teperf.plan import check_balance

    check_balance(
        build_config({"schedule": {"trials": 9, "rounds": 6}}, {}), 2
    )  # the PR thread's 6 x 9 balances
    check_balance(build_config({"schedule": {"trials": 3, "rounds": 1}}, {}), 1)  # one side: no couples


def test_dashboard_refuses_a_store_that_does_not_exist(tmp_path, capsys):
    code, _, err = run(
        ["dashboard", "--history", str(tmp_path / "typo"), "--out", str(tmp_path / "site")], capsys
    )
    assert code == 2 and "no history store" in err and err.count("\n") == 1
    assert not (tmp_path / "site").exists()


# --- hints ---------------------------------------------------------------------------------------


def test_hints_name_the_real_cause(tmp_path):
    cfg = build_config({}, {"timeout_s": 3.0})
    side = type("S", (), {"python": "/usr/bin/python3"})()
    assert exit_text(-9) == "was killed by SIGKILL (signal 9)" and exit_text(3) == "exited with status 3"
    assert failure_hint(f"worker for head {exit_text(-9)}") == OOM_HINT
    # found dead when teperf next wrote to it (spawn.Worker.send); the row's error as the table has it
    assert failure_hint("lost pair 2: worker for head is gone (exit -9)") == OOM_HINT
    assert failure_hint("worker for head is gone (exit -90)") != OOM_HINT
    assert "--timeout" in failure_hint("worker for base did not answer within 3 s (killed)")
    assert "factories" in failure_hint("RuntimeError: this factory is broken")
    log = tmp_path / "w.log"
    assert "--timeout" in start_hint(WorkerError("x", timed_out=True), side, cfg, log)
    assert "timeout_s" in start_hint(WorkerError("x", timed_out=True), side, build_config({}, {}), log)
    assert "memory" in start_hint(WorkerError("x", exit_code=-9), side, cfg, log)
    no_cuda = WorkerError(
        "x", fatal="device cuda asked for, but this torch sees no CUDA device", fix="use --device cpu"
    )
    assert start_hint(no_cuda, side, cfg, log) == "use --device cpu"


# --- escaping ------------------------------------------------------------------------------------


def test_text_is_made_safe_for_markdown_and_terminal():
    assert for_markdown("<script>x</script> | a & b\nc") == "&lt;script&gt;x&lt;/script&gt; \\| a &amp; b c"
    assert for_markdown('<img src=x onerror="alert(1)">') == '&lt;img src=x onerror="alert(1)"&gt;'
    assert for_terminal("boom \x1b[31mred\x1b[0m \x1b]0;title\x07done\x07\x08") == "boom red done"
    assert for_terminal("two\nlines\ttab") == "two\nlines\ttab"


def _bundle(tmp_path: Path, meta: dict, records: bytes) -> Path:
    path = tmp_path / "bundle"
    path.mkdir()
    (path / "meta.json").write_text(json.dumps(meta))
    (path / "records.jsonl").write_bytes(records)
    return path


def _meta(module="Linear", subject="fine"):
    return {
        "status": "complete",
        "config": {
            "device": "cpu",
            "core": 1,
            "schedule": {"processes": 2, "rounds": 1, "trials": 2, "iters": 10},
            "stats": {},
        },
        "sides": {"base": {"label": "base", "sha": "a" * 40, "subject": subject}, "head": {"label": "head"}},
        "cases": [
            {
                "id": 0,
                "module": module,
                "recipe": "fp32",
                "shape": [8, 64],
                "dtype": "float32",
                "mode": "eager",
            }
        ],
    }


def _trial(side, pair, trial, ns):
    return {
        "kind": "trial",
        "case_id": 0,
        "side": side,
        "pair": pair,
        "round": 0,
        "trial": trial,
        "iters": 10,
        "process_cpu_ns": ns,
        "thread_cpu_ns": ns,
        "wall_ns": ns,
        "sync_ns": 0,
    }


def _lines(records) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def test_markdown_escapes_names_subjects_and_errors(tmp_path):
    evil = "<img src=x onerror=alert(1)>|x"
    recs = [_trial(s, p, t, 1000 + t) for p in (0, 1) for t in (0, 1) for s in ("base", "head")]
    recs.append(
        {
            "kind": "failure",
            "pair": 1,
            "side": "head",
            "case_id": 0,
            "error": "\x1b[31m<b>boom</b>",
            "final": True,
        }
    )
    summary = summarize(
        _bundle(tmp_path, _meta(module=evil, subject="<script>alert(1)</script>"), _lines(recs))
    )
    text = render(summary, "markdown")
    assert "<img" not in text and "<script" not in text and "<b>" not in text and "\x1b" not in text
    assert "&lt;img src=x onerror=alert(1)&gt;\\|x" in text and "&lt;script&gt;" in text


def test_table_strips_control_characters(tmp_path):
    import io

    from rich.console import Console

    recs = [
        {
            "kind": "setup",
            "pair": 0,
            "side": "base",
            "case_id": 0,
            "status": "error",
            "error": "\x1b]0;pwned\x07\x1b[2Jbad",
        }
    ]
    summary = summarize(_bundle(tmp_path, _meta(), _lines(recs)))
    buf = io.StringIO()
    render(summary, "table", console=Console(file=buf, width=200, force_terminal=False))
    assert "\x1b" not in buf.getvalue() and "bad" in buf.getvalue()


# --- damaged bundles -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tail, skipped",
    [
        (b'{"kind":"trial","pair":0,"ro\n', 1),  # cut short by a crash
        (b"\xff\xfe not utf-8\n", 1),
        (b'garbage\n[1, 2]\n"text"\n', 3),
        (
            b'{"kind":"trial","case_id":0,"side":"base","pair":0,"round":0,"trial":9,"iters":"ten","process_cpu_ns":1}\n',
            1,
        ),
        (
            b'{"kind":"setup","case_id":[0],"side":7}\n{"kind":"pair","start_s":"soon"}\n',
            2,
        ),  # both of the wrong shape
    ],
)
def test_report_survives_any_bytes_and_counts_what_it_skipped(tmp_path, tail, skipped, capsys):
    recs = [_trial(s, p, t, 1000 + t) for p in (0, 1) for t in (0, 1) for s in ("base", "head")]
    path = _bundle(tmp_path, _meta(), _lines(recs[:4]) + tail + _lines(recs[4:]))
    for fmt in ("table", "markdown", "json", "csv"):
        code, out, err = run(["report", str(path), "--format", fmt], capsys)
        assert code == 0 and "Traceback" not in err, err
    summary = summarize(path)
    assert summary.rows[0].n_trials == 4
    assert any(f"skipped {skipped} unreadable line" in n for n in summary.notes), summary.notes


@pytest.mark.parametrize("meta_text", ["{}", '{"cases": [{"id": 0}], "config": {"schedule": {}}}'])
def test_report_of_an_empty_or_odd_meta_says_so(tmp_path, meta_text, capsys):
    path = tmp_path / "bundle"
    path.mkdir()
    (path / "meta.json").write_text(meta_text)
    (path / "records.jsonl").write_bytes(b"")
    code, out, err = run(["report", str(path), "--format", "markdown"], capsys)
    assert code == 0, err
    assert "None" not in out and "schedule unknown" in out


@pytest.mark.parametrize("meta_bytes", [b"\xff\xfe", b"[1, 2]", b'{"cases": 5}'])
def test_unreadable_meta_is_one_line(tmp_path, meta_bytes, capsys):
    path = tmp_path / "bundle"
    path.mkdir()
    (path / "meta.json").write_bytes(meta_bytes)
    code, out, err = run(["report", str(path)], capsys)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err


# --- help and exit statuses ----------------------------------------------------------------------


def test_help_texts_are_complete(capsys):
    import click

    for name in ("run", "compare"):
        command = cli.cli.commands[name]
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert param.help, f"{name} {param.opts} has no help"
        code, out, _ = run([name, "--help"], capsys)
        assert code == 0
        flat = " ".join(out.split())
        for words in (
            "--timeout",
            "default: (600",
            "--processes",
            "default: (8",
            "--trials",
            "default: (6",
            "--iters",
            "default: (50",
            "pr-thread",
            "Exit status",
            "130",
        ):
            assert words in flat, (name, words)


def test_a_bare_repository_is_read_like_a_checkout(tmp_path, capsys):
    # Git sides read refs with git plumbing (sides/gitrepo.py), so a bare repository is a valid
    # --repo: a ref it lacks gets the same one-line error as in a checkout, no traceback.
    import subprocess

    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "te.git")], check=True)
    # --config demo: modules from a package (torch's own are refused before git is asked: test_provenance.py)
    argv = ["compare", "main..dev", "--repo", str(tmp_path / "te.git"), "--config", "demo"]
    code, _, err = run(argv, capsys)
    assert code == 2 and "'dev' does not name a commit" in err and err.count("\n") == 1, err


def test_each_case_gets_its_own_global_state_back_before_a_trial():
    # TE keeps the last attention backend choice in a module-level dict; two attention cases
    # in one worker must each see their own (compiled ones failed on the other's).
    from teperf.worker.runner import Built
    from teperf.worker.session import Session

    shared = {"attention_params": None, "backend_selection_requires_update": True}
    session = Session(device="cpu", backends=[])
    seen = []
    for case_id, params in ((0, "A"), (1, "B")):

        def step(params=params):
            seen.append(shared["attention_params"])
            shared.update(attention_params=params, backend_selection_requires_update=False)

        step()  # set-up: the case leaves its own choice behind
        session.cases[case_id] = (step, Built(module=None, inputs=(), global_state=shared), {})
        session.saved_state[case_id] = dict(shared)
    seen.clear()
    session.ready(0)()
    session.ready(1)()
    session.ready(0)()
    assert seen == ["A", "B", "A"]  # each step starts from its own case's choice, never the other's


def test_import_says_how_many_lines_it_skipped(tmp_path, capsys):
    recs = [_trial(s, p, t, 1000 + t) for p in (0, 1) for t in (0, 1) for s in ("base", "head")]
    path = _bundle(tmp_path, _meta(), _lines(recs) + b"\xff\xfe\n")
    code, out, err = run(["import", str(path), "--history", str(tmp_path / "h"), "--sha", "a" * 40], capsys)
    assert code == 0, err
    assert "skipped 1 unreadable line" in err and "1 bundle added" in out


def test_a_worker_that_cannot_import_torch_is_told_which_torch_it_found(tmp_path):
    # issue 59: "check that python3 can import torch", not which torch it found (a torch/ in --path)
    import sys
    import types

    from teperf.config import load_config
    from teperf.engine.hints import start_hint
    from teperf.sides import Side

    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('not the real torch')\n")
    side = Side(label="head", python=sys.executable, sys_path=(str(tmp_path),), description={"kind": "path"})
    hint = start_hint(types.SimpleNamespace(), side, load_config("demo"), tmp_path / "w.log")
    assert f"it finds torch at {tmp_path / 'torch' / '__init__.py'}: a torch in {tmp_path}" in hint
    assert "on the side's path, shadows the interpreter's own" in hint
    plain = Side(label="head", python=sys.executable, sys_path=(), description={})
    assert "(it finds torch at " in start_hint(types.SimpleNamespace(), plain, load_config("demo"), tmp_path)


def test_a_full_disk_mid_run_prints_what_was_measured_then_says_so(tmp_path, capsys):
    # issue 59: "cannot use: No space left on device; give a path you can read and write", exit 2 after
    # measuring, and no table of what was measured
    import errno
    import json

    from teperf.bundle import Bundle
    from teperf.commands._common import measure_and_report
    from teperf.config import load_config
    from teperf.errors import DiskFull
    from teperf.options import MeasureOptions

    fixture = Path(__file__).parent / "fixtures" / "bundles" / "v1-compare-counters"
    meta = json.loads((fixture / "meta.json").read_text())
    lines = (fixture / "records.jsonl").read_text().splitlines()

    def measure(config, *sides, results_dir, **kw):
        with Bundle.session(results_dir, "compare", {k: meta[k] for k in ("config", "sides", "cases")}) as b:
            for line in lines:
                b.append(json.loads(line))
            raise OSError(errno.ENOSPC, "No space left on device", str(b.path / "records.jsonl"))

    options = MeasureOptions(config=load_config("default"), results_dir=str(tmp_path), fmt="json")
    with pytest.raises(DiskFull) as info:
        measure_and_report(measure, options)
    assert info.value.exit_code == 1 and "the disk filled up while teperf wrote" in info.value.one_line()
    assert "No space left on device" in info.value.one_line() and "keeps what was measured" in info.value.fix
    printed = json.loads(capsys.readouterr().out)
    assert [r["module"] for r in printed["rows"]] == ["LayerNormLinear"] and printed["meta"][
        "status"
    ] == "failed"


def test_a_factory_function_its_module_lacks_is_named_not_the_paths():
    from teperf.engine.hints import FACTORY_HINT, failure_hint

    hint = failure_hint("AttributeError: module 'demo_blocks' has no attribute 'nope'")
    assert hint.startswith("demo_blocks has no nope") and "factory" in hint
    assert failure_hint("ModuleNotFoundError: No module named 'x'") == FACTORY_HINT


# --- what a failed case reports (the worker's describe_failure) ----------------------------------


def _raise_in(filename: str, code: str, **names):
    exec(compile(code, filename, "exec"), names)


def test_a_failed_capture_reports_its_first_error_at_tes_line():
    from teperf.worker.__main__ import describe_failure

    te_file = "/site/transformer_engine/pytorch/permutation.py"
    try:
        try:
            _raise_in(
                te_file,
                "def pad():\n    raise RuntimeError('operation not permitted when stream is capturing')\n"
                "pad()",
            )
        finally:
            raise RuntimeError("operation failed due to a previous error during capture\nSearch for ...")
    except RuntimeError as exc:
        text = describe_failure(exc)
    first, then = text.splitlines()
    assert first == (
        "RuntimeError: operation not permitted when stream is capturing "
        "(at transformer_engine/pytorch/permutation.py:2 in pad)"
    )
    assert then == "then RuntimeError: operation failed due to a previous error during capture"


def test_a_plain_failure_keeps_its_words_and_names_the_measured_codes_line():
    from teperf.worker.__main__ import describe_failure

    try:
        _raise_in("/work/model.py", "def fwd():\n    raise ValueError('boom\\nsecond line')\nfwd()")
    except ValueError as exc:
        assert describe_failure(exc) == "ValueError: boom (at model.py:2 in fwd)\nsecond line"


def test_a_failed_compile_names_tes_line_from_dynamos_user_code():
    # dynamo's traceback holds only torch's frames; TE's line is in its message (TE 2.20.2, torch 2.11)
    from teperf.worker.__main__ import describe_failure

    te = "/site/transformer_engine/pytorch/attention/dot_product_attention"
    message = (
        "NotImplementedError: \n\nfrom user code:\n"
        '   File "/site/transformer_engine/pytorch/jit.py", line 108, in wrapper\n    return f(*args)\n'
        f'  File "{te}/utils.py", line 647, in get_attention_backend\n    if cc != (9, 0):\n'
        '  File "/venv/torch/_dynamo/polyfills/__init__.py", line 536, in cmp_ne\n'
    )

    class InternalTorchDynamoError(RuntimeError):
        pass

    guard = "def make_guard():\n    raise NotImplementedError\nmake_guard()"
    try:
        try:  # dynamo's error in the middle of the chain: the case's own code wraps it
            try:
                _raise_in("/venv/torch/_guards.py", guard)
            except NotImplementedError as inner:
                inner.args = (message.removeprefix("NotImplementedError: "),)  # dynamo appends to the root's
                raise InternalTorchDynamoError(message) from inner
        except InternalTorchDynamoError as dynamo:
            raise RuntimeError("compile failed") from dynamo
    except RuntimeError as exc:
        described = describe_failure(exc)
    # as a TE 2.20.2 compile read on an H100 (results/evidence/gpu-dsv3-1207b/): where, not the traceback
    assert described == (
        "NotImplementedError (at transformer_engine/pytorch/attention/dot_product_attention/utils.py:647 "
        "in get_attention_backend)\nthen RuntimeError: compile failed"
    )
