"""teperf cache and the cache directory (teperf/sides/cachedir.py): clear, list, entries a running teperf
holds, a file in the way."""

from __future__ import annotations

import fcntl

import pytest
from conftest import one_error, run_in_process

from teperf.errors import TeperfError


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


def test_cache_clear_refuses_a_negative_age(tmp_path, capsys):
    one_error(*run_in_process(["cache", "clear", "--older-than", "-1", "--cache-dir", str(tmp_path)], capsys))


@pytest.mark.parametrize("where", ["file", "below a file"])
def test_a_cache_dir_that_is_a_file_is_one_line_not_a_traceback(tmp_path, where):
    from teperf.sides import cachedir

    (tmp_path / "file").write_text("x")
    root = tmp_path / "file" if where == "file" else tmp_path / "file" / "sub"
    with pytest.raises(TeperfError) as exc:
        cachedir.kind_dir("trees", root)
    assert "a file is in the way" in str(exc.value) and "--cache-dir" in str(exc.value)


def test_cache_list_refuses_a_device_as_its_directory(capsys):
    one_error(*run_in_process(["cache", "list", "--cache-dir", "/dev/null"], capsys), "a file is in the way")
