"""teperf doctor: runs anywhere, reads only, says 'unknown' for what it cannot read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import run_in_process

from teperf import doctor
from teperf.commands.doctor import command
from teperf.cpus import available_cores, check_core
from teperf.doctor import STATUSES, Check
from teperf.errors import TeperfError


def _valid(checks):
    assert checks, "no checks"
    for c in checks:
        assert isinstance(c, Check)
        assert c.status in STATUSES, c
        assert c.name and isinstance(c.detail, str) and isinstance(c.fix, str)
        json.dumps(c.to_dict())


def test_runs_on_this_machine():
    checks = doctor.all_checks()
    _valid(checks)
    names = {c.name for c in checks}
    assert {
        "core",
        "governor",
        "turbo",
        "isolation",
        "aslr",
        "load",
        "runnable",
        "python",
        "torch",
        "transformer_engine",
        "gpu",
        "gpu_busy",
    } <= names
    assert next(c for c in checks if c.name == "core").status in ("ok", "warn")  # the default core exists


def test_quick_checks_are_a_fast_subset():
    import time

    t0 = time.perf_counter()
    quick = doctor.quick_checks(check_core(None))
    assert time.perf_counter() - t0 < 10
    _valid(quick)
    assert {c.name for c in quick} == {"core", "governor", "turbo", "isolation", "aslr", "load", "runnable"}
    assert "gpu_busy" in {c.name for c in doctor.quick_checks(None, device="cuda")}


def test_unreadable_is_unknown_not_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(doctor, "SYS_CPU", str(tmp_path / "no-sys"))
    monkeypatch.setattr(doctor, "PROC", str(tmp_path / "no-proc"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no nvidia-smi
    checks = {c.name: c for c in doctor.all_checks(check_core(None))}
    for name in ("governor", "turbo", "isolation", "aslr", "load", "runnable", "gpu", "gpu_busy"):
        assert checks[name].status == "unknown", checks[name]


def test_a_check_that_raises_becomes_unknown(monkeypatch):
    def boom(core):
        raise RuntimeError("sensor exploded")

    monkeypatch.setattr(doctor, "check_governor", boom)
    (governor,) = [c for c in doctor.quick_checks(check_core(None)) if c.name == "governor"]
    assert governor.status == "unknown" and "sensor exploded" in governor.detail


def _fake_sys(
    tmp_path: Path,
    core: int,
    governor="powersave",
    isolated="",
    no_turbo="0",
    aslr="2",
    loadavg="0.10 0.20 0.30 1/100 1",
):
    sys_cpu = tmp_path / "sys"
    (sys_cpu / f"cpu{core}" / "cpufreq").mkdir(parents=True)
    (sys_cpu / f"cpu{core}" / "cpufreq" / "scaling_governor").write_text(governor + "\n")
    (sys_cpu / "intel_pstate").mkdir()
    (sys_cpu / "intel_pstate" / "no_turbo").write_text(no_turbo + "\n")
    (sys_cpu / "isolated").write_text(isolated + "\n")
    proc = tmp_path / "proc"
    (proc / "sys" / "kernel").mkdir(parents=True)
    (proc / "sys" / "kernel" / "randomize_va_space").write_text(aslr + "\n")
    (proc / "loadavg").write_text(loadavg + "\n")
    return sys_cpu, proc


def _stat_line(tid: int, comm: str, state: str, processor: int) -> str:
    # proc(5): pid (comm) state ... field 39 = processor; fill the rest with zeros
    fields = [state] + ["0"] * 35 + [str(processor)] + ["0"] * 13
    return f"{tid} ({comm}) " + " ".join(fields)


def test_verdicts_from_a_fake_sysfs(tmp_path, monkeypatch):
    core = check_core(None)
    sys_cpu, proc = _fake_sys(tmp_path, core, isolated=str(core), aslr="0", loadavg="99.0 50.0 10.0 5/100 1")
    task = proc / "4242" / "task" / "4242"
    task.mkdir(parents=True)
    (task / "stat").write_text(_stat_line(4242, "busy (loop) x", "R", core))
    idle = proc / "4243" / "task" / "4243"
    idle.mkdir(parents=True)
    (idle / "stat").write_text(_stat_line(4243, "sleeper", "S", core))
    monkeypatch.setattr(doctor, "SYS_CPU", str(sys_cpu))
    monkeypatch.setattr(doctor, "PROC", str(proc))
    checks = {c.name: c for c in doctor.quick_checks(core)}
    assert checks["governor"].status == "warn" and "cpupower" in checks["governor"].fix
    assert checks["turbo"].status == "warn"
    assert checks["isolation"].status == "ok"
    assert checks["aslr"].status == "warn" and "randomize_va_space" in checks["aslr"].fix
    assert checks["load"].status == "warn"
    assert checks["runnable"].status == "warn" and "busy (loop) x (4242)" in checks["runnable"].detail
    assert "sleeper" not in checks["runnable"].detail


def test_good_machine_is_ok(tmp_path, monkeypatch):
    core = check_core(None)
    sys_cpu, proc = _fake_sys(
        tmp_path, core, governor="performance", isolated=f"{core}", no_turbo="1", aslr="2"
    )
    monkeypatch.setattr(doctor, "SYS_CPU", str(sys_cpu))
    monkeypatch.setattr(doctor, "PROC", str(proc))
    checks = {c.name: c for c in doctor.quick_checks(core)}
    for name in ("governor", "turbo", "isolation", "aslr", "load", "runnable"):
        assert checks[name].status == "ok", checks[name]


def test_missing_core_fails():
    missing = max(available_cores()) + 1000
    check = doctor.check_core(missing)
    assert check.status == "fail" and "--core" in check.fix


def test_parse_cpu_list():
    assert doctor.parse_cpu_list("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert doctor.parse_cpu_list("\n") == set()


def test_versions_without_importing_torch():
    import subprocess
    import sys

    # A fresh interpreter: computing versions must not import torch.
    code = "import sys; from teperf.doctor import all_checks; all_checks(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_side_interpreter_versions():
    import sys

    checks = {c.name: c for c in doctor.check_versions(sys.executable)}
    assert checks[f"python [{sys.executable}]"].status == "ok"
    assert f"torch [{sys.executable}]" in checks
    gone = doctor.check_versions("/nonexistent/python3")
    assert [c.status for c in gone] == ["fail"]


def test_cli_json_and_exit_codes():
    runner = CliRunner()
    ok = runner.invoke(command, ["--format", "json"])
    assert ok.exit_code in (0, 1), ok.output
    data = json.loads(ok.output)
    assert data["verdict"] in STATUSES and data["checks"]
    assert ok.exit_code == (1 if data["verdict"] == "fail" else 0)
    # a core the machine lacks is bad input, refused before any check (no isolcpus=<that core> advice)
    bad = runner.invoke(command, ["--core", str(max(available_cores()) + 1000), "--format", "json"])
    assert isinstance(bad.exception, TeperfError) and "is not available" in str(bad.exception)
    text = runner.invoke(command, [])
    assert "overall:" in text.output


def test_doctor_changes_nothing(tmp_path, monkeypatch):
    # Every file doctor opens is opened read-only.
    import builtins

    real_open = builtins.open
    modes = []

    def spy(file, mode="r", *args, **kwargs):
        modes.append(mode)
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy)
    doctor.all_checks()
    assert modes and all(set(m) <= {"r", "b", "t"} for m in modes), modes


def test_text_output_with_a_side_python_path():
    # "[/abs/path]" in a check name must be printed, not parsed as rich markup.
    import sys

    out = CliRunner().invoke(command, ["--python", sys.executable])
    assert out.exception is None or isinstance(out.exception, SystemExit), out.exception
    assert out.exit_code in (0, 1) and "overall:" in out.output
    assert f"python [{sys.executable}]" in out.output.replace("\n", "")


def _fake_nvidia_smi(tmp_path, body):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(0o755)
    return str(bin_dir)


def test_gpu_and_driver(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    assert doctor.gpu_and_driver() == (None, None)
    monkeypatch.setenv(
        "PATH", _fake_nvidia_smi(tmp_path, 'echo "NVIDIA H200, 570.1"; echo "NVIDIA H200, 570.1"')
    )
    assert doctor.gpu_and_driver() == ("NVIDIA H200", "570.1")
    from teperf.history.store import machine_fingerprint
    from teperf.nightly import local_machine

    assert local_machine("cuda", cpu_model="CPU X") == machine_fingerprint("CPU X", "NVIDIA H200", "570.1")


def test_gpu_and_driver_when_nvidia_smi_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", _fake_nvidia_smi(tmp_path, 'echo "no devices" >&2; exit 9'))
    assert doctor.gpu_and_driver() == (None, None)


def test_quick_checks_give_no_core_advice_for_a_core_the_machine_lacks():
    missing = max(available_cores()) + 1000
    checks = {c.name: c for c in doctor.quick_checks(missing)}
    assert checks["core"].status == "fail"
    assert "isolation" not in checks and "runnable" not in checks
    assert all(str(missing) not in c.fix for name, c in checks.items() if name != "core")


@pytest.mark.parametrize("exe", ["/bin/true", "/bin/false"])
def test_doctor_fails_an_interpreter_that_is_no_python(exe):
    from teperf import doctor

    (check,) = doctor.check_versions(exe)
    assert check.status == "fail" and "does not answer like a Python 3" in check.detail, check


def test_the_doctor_does_not_count_this_runs_own_workers_as_load():
    import os
    import subprocess
    import sys

    from teperf import doctor

    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    assert os.getppid() not in doctor._descendants(pids)

    child = subprocess.Popen([sys.executable, "-c", "input()"], stdin=subprocess.PIPE)
    try:
        assert child.pid in doctor._descendants(pids + [child.pid])
    finally:
        child.communicate(b"\n")


def test_doctor_claims_no_core(tmp_path, monkeypatch, capsys):
    from teperf import doctor

    monkeypatch.setenv("TEPERF_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setattr(doctor, "all_checks", lambda core, pythons: [])
    code, out, err = run_in_process(["doctor"], capsys)
    assert code == 0 and not (tmp_path / "teperf-cores").exists(), (out, err)
