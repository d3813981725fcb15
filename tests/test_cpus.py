"""Cores (teperf/cpus.py): CPU lists, the default core, and claims between two runs on one machine."""

from __future__ import annotations

import fcntl

import pytest

from teperf.cpus import parse_cpu_list

_CLAIM = "import sys, teperf.cpus as c; print(c.check_core(None), flush=True); sys.stdin.read()"


def test_a_second_run_pins_to_a_core_the_first_did_not_claim(tmp_path, monkeypatch):
    import subprocess
    import sys

    from teperf import cpus, doctor

    if len(cpus.available_cores()) < 2:
        pytest.skip("needs two usable cores")
    monkeypatch.setenv("TEPERF_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setattr(cpus, "_CLAIMS", {})
    first = subprocess.Popen([sys.executable, "-c", _CLAIM], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        taken = int(first.stdout.readline())
        assert taken == cpus.available_cores()[-1]
        assert cpus.claimed_by_others() == {taken: str(first.pid)}
        mine = cpus.check_core(None)
        assert mine != taken and mine in cpus.available_cores()
        assert taken not in cpus.spare_cores([mine])  # nor are its pairs started on the other's core
        check = doctor.check_runnable(taken)
        assert check.status == "warn" and f"another teperf run (pid {first.pid})" in check.detail
    finally:
        first.communicate(b"")
    assert cpus.claimed_by_others() == {}  # its claim ended with it


def test_a_run_that_finds_every_core_claimed_says_whose_core_it_shares(tmp_path, monkeypatch, capsys):
    from teperf import cpus

    monkeypatch.setenv("TEPERF_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setattr(cpus, "available_cores", lambda: [0, 1])
    monkeypatch.setattr(cpus, "_SHARED", {"note": "", "said": False})
    (tmp_path / "teperf-cores").mkdir()
    held = []
    for core, pid in ((0, "111"), (1, "222")):  # two other runs (another open file: flock refuses this one)
        f = open(tmp_path / "teperf-cores" / f"core{core}", "w")
        f.write(pid), f.flush(), fcntl.flock(f, fcntl.LOCK_EX)
        held.append(f)
    try:
        assert cpus.check_core(None) == 1
    finally:
        [f.close() for f in held]
    assert (
        capsys.readouterr().err == ""
    )  # not yet: a refusal of bad input after the config's load stays one line
    cpus.say_shared_core()  # measuring starts
    cpus.say_shared_core()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "every core is claimed" in err, err
    assert "pid 222" in err and "--core" in err, err


@pytest.mark.parametrize(
    "text, cores", [("7\n", {7}), ("3,11", {3, 11}), ("6-7", {6, 7}), ("0-1,8-9", {0, 1, 8, 9})]
)
def test_parse_cpu_list(text, cores):
    assert parse_cpu_list(text) == cores


@pytest.mark.parametrize("cores", [set(), {3}, {0, 1, 2, 3, 8}, {0, 2, 4}, {5, 6, 10, 11, 12}])
def test_a_cpu_list_written_reads_back(cores):
    from teperf.cpus import cpu_list_text

    text = cpu_list_text(cores)
    assert text == "none" if not cores else parse_cpu_list(text) == cores
    assert cpu_list_text({0, 1, 2, 3, 8}) == "0-3,8"


def test_a_core_claimed_here_is_not_claimed_by_others_and_a_core_the_machine_lacks_is_refused(
    tmp_path, monkeypatch
):
    from teperf import cpus
    from teperf.errors import TeperfError

    monkeypatch.setenv("TEPERF_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setattr(cpus, "_CLAIMS", {})
    core = cpus.available_cores()[0]
    assert cpus.claim_core(core) and cpus.claim_core(core)  # again: this process holds it already
    assert (tmp_path / "teperf-cores" / f"core{core}").read_text() == str(__import__("os").getpid())
    assert core not in cpus.claimed_by_others()
    for bad in (max(cpus.available_cores()) + 1000, True, "0"):
        with pytest.raises(TeperfError, match="is not available on this machine"):
            cpus.check_core(bad)
    for f in cpus._CLAIMS.values():
        f.close()


def test_the_default_core_is_the_last_one_no_other_run_holds(tmp_path, monkeypatch):
    from teperf import cpus

    monkeypatch.setenv("TEPERF_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setattr(cpus, "_CLAIMS", {})
    monkeypatch.setattr(cpus, "available_cores", lambda: [0, 1, 2])
    monkeypatch.setattr(cpus, "claimed_by_others", lambda: {2: "4242"})
    assert cpus.default_core(claim=False) == 1  # only looks: nothing claimed
    assert not (tmp_path / "teperf-cores").exists()
