"""What a newcomer ran into on a fresh clone (issue 24): each case is one command's answer."""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
import textwrap

import pytest
from conftest import PLANTED, ROOT

# A Ctrl-C that lands inside `from scipy import stats` during a run: an import hook raises
# KeyboardInterrupt at the point of scipy's import where that left scipy broken for good
# ("Module 'scipy' has no attribute '_lib'"), as a Ctrl-C at that moment does; after the real
# (tiny) run, a plain Ctrl-C.
CTRL_C_IN_IMPORT = textwrap.dedent(
    """
    import sys
    import teperf.api

    loaded_before = "scipy.stats" in sys.modules

    class CtrlC:
        armed = False
        def find_spec(self, name, path=None, target=None):
            if self.armed and name == "scipy._lib._ccallback":
                self.armed = False  # one Ctrl-C
                raise KeyboardInterrupt
            return None

    hook = CtrlC()
    sys.meta_path.insert(0, hook)
    measure = teperf.api.run_schedule

    def run_schedule(*args):
        sys.stderr.write(f"scipy.stats loaded when measuring starts: {'scipy.stats' in sys.modules}\\n")
        hook.armed = True
        measure(*args)
        hook.armed = False
        raise KeyboardInterrupt

    teperf.api.run_schedule = run_schedule
    sys.stderr.write(f"scipy.stats loaded at start: {loaded_before}\\n")
    from teperf.cli import main
    main(sys.argv[1:])
    """
)


@pytest.mark.real_worker
def test_ctrl_c_inside_a_lazy_import_still_gives_130_and_the_table(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            CTRL_C_IN_IMPORT,
            "compare",
            "--config",
            "demo",  # its factories import from the paths (the default's built-ins would be refused)
            "--base-path",
            str(PLANTED / "base"),
            "--head-path",
            str(PLANTED / "base"),
            "--modules",
            "Linear",
            "--processes",
            "2",
            "--rounds",
            "1",
            "--trials",
            "2",
            "--iters",
            "5",
            "--warmup",
            "2",
            "--prestart",
            "0",
            "--no-counters",
            "--format",
            "json",
            "--results-dir",
            str(tmp_path / "results"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "scipy.stats loaded at start: False" in proc.stderr  # else the test proves nothing
    assert "scipy.stats loaded when measuring starts: True" in proc.stderr
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr
    printed = json.loads(proc.stdout)
    assert printed["meta"]["status"] == "interrupted"
    assert printed["rows"][0]["n_pairs"] == 2  # the summary's statistics ran


def _tree_entry(root, sha="a" * 40):
    from teperf.sides import cachedir

    path = root / "trees" / sha
    path.mkdir(parents=True)
    cachedir.write_json(path / cachedir.META, {"complete": True, "sha": sha})
    (path / "model.py").write_text("x = 1\n")
    return path


def test_cache_clear_keeps_entries_a_running_teperf_holds(tmp_path, capsys):
    from conftest import run_in_process

    from teperf.sides import cachedir

    used, unused = _tree_entry(tmp_path, "a" * 40), _tree_entry(tmp_path, "b" * 40)
    cachedir.hold(used)
    # another teperf's hold, as hold() takes it there (this process's own holds do not keep entries)
    other = open(cachedir._inuse_file(used), "a+")
    fcntl.flock(other.fileno(), fcntl.LOCK_SH)
    try:
        code, out, _ = run_in_process(["cache", "clear", "--cache-dir", str(tmp_path)], capsys)
        assert code == 0
        assert used.is_dir() and not unused.exists()
        assert "removed 1 entries" in out
        assert "kept 1 in use by a running teperf" in out and f"trees/{'a' * 24}" in out
    finally:
        other.close()  # what that process's exit does
    done = cachedir.clear(tmp_path)
    assert [e.key for e in done.removed] == ["a" * 40] and not done.in_use and not used.exists()


def _compare_bundle(tmp_path, module="Linear", **meta_fields):
    """A small compare bundle on disk (two pairs of one cell), no workers."""
    from test_faults import _bundle, _lines, _meta, _trial

    recs = [
        _trial(s, p, t, 1000 + t + (30 if s == "head" else 0))
        for p in (0, 1)
        for t in (0, 1)
        for s in ("base", "head")
    ]
    return _bundle(tmp_path, {**_meta(module=module), **meta_fields}, _lines(recs))


def test_fail_on_empty_is_refused(capsys):
    from conftest import run_in_process

    code, _, err = run_in_process(
        ["compare", "--base-path", ".", "--head-path", ".", "--fail-on", ""], capsys
    )
    assert code == 2 and "--fail-on '' names no verdict" in err and "Traceback" not in err
    code, _, err = run_in_process(
        ["compare", "--base-path", ".", "--head-path", ".", "--fail-on", " , "], capsys
    )
    assert code == 2 and "names no verdict" in err


def test_dashboard_of_a_file_is_refused(tmp_path, capsys):
    from conftest import run_in_process

    not_a_store = tmp_path / "passwd"
    not_a_store.write_text("root:x:0:0::/root:/bin/sh\n")
    code, _, err = run_in_process(
        ["dashboard", "--history", str(not_a_store), "--out", str(tmp_path / "site")], capsys
    )
    assert code == 2 and "is a file, not a history store" in err
    assert not (tmp_path / "site").exists()


def test_config_directory_says_directory(tmp_path, capsys):
    from conftest import run_in_process

    code, _, err = run_in_process(["run", "--config", str(tmp_path), "--path", "."], capsys)
    assert code == 2 and "is a directory, not a TOML file" in err and "not found" not in err


def test_unknown_cell_before_measuring_names_the_config(capsys):
    from conftest import run_in_process

    argv = ["compare", "--base-path", ".", "--head-path", ".", "--explain", "Nope/fp32"]
    code, _, err = run_in_process(argv, capsys)
    assert code == 2 and "no cell 'Nope/fp32' in the config" in err and "bundle" not in err


def test_nightly_outside_git_does_not_point_to_compare(tmp_path, capsys):
    from conftest import run_in_process

    code, _, err = run_in_process(["nightly", "--repo", str(tmp_path)], capsys)
    assert code == 2 and "is not inside a git repository" in err
    assert "teperf compare" not in err


def test_report_of_a_bundle_running_on_another_host(tmp_path, capsys):
    from conftest import run_in_process

    path = _compare_bundle(
        tmp_path, status="running", coordinator={"pid": 4242, "hostname": "elsewhere-7", "start_ticks": 1}
    )
    code, out, _ = run_in_process(["report", str(path), "--format", "json"], capsys)
    note = next(n for n in json.loads(out)["notes"] if n.startswith("run status"))
    assert "running on elsewhere-7, pid 4242" in note and "so far" in note and "stopped" not in note


def test_markdown_keeps_link_syntax_literal(tmp_path):
    from teperf.render import render
    from teperf.summary import summarize

    text = render(summarize(_compare_bundle(tmp_path, module="[x](https://evil.invalid)")), "markdown")
    assert "\\[x\\](https://evil.invalid)" in text
    assert "[x](" not in text.replace("\\[x\\](", "")


def test_a_long_module_name_keeps_its_end_on_a_narrow_terminal(tmp_path):
    import io

    from rich.console import Console

    from teperf.render import render
    from teperf.summary import summarize

    name = "VeryLongModuleNameThatDoesNotFitIntoTheColumn_EndsHere"
    buf = io.StringIO()
    render(summarize(_compare_bundle(tmp_path, module=name)), "table", console=Console(file=buf, width=80))
    flat = "".join(line.strip(" │┃|") for line in buf.getvalue().splitlines())
    assert "EndsHere" in flat.replace(" ", "")
