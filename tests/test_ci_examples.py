"""The CI examples (examples/ci/) parse, and run the very commands the manual's "Nightly at scale" gives.

The Slurm script and the workflow's shard step are also run as shell, with stand-ins for
sbatch, srun and teperf on PATH that record their arguments.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parent.parent
NIGHTLY_PAGE = ROOT / "docs" / "nightly.md"
WORKFLOW = ROOT / "examples" / "ci" / "github-nightly.yml"
SBATCH = ROOT / "examples" / "ci" / "slurm-nightly.sbatch"
SECRETS = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "TEPERF_HISTORY"}
LABELS = ["self-hosted", "gpu", "h200"]


def readme_commands() -> list[str]:
    text = (ROOT / "docs" / "nightly.md").read_text()
    section = text.split("\n## Nightly at scale\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```\n(.*?)```", section, re.S).group(1)
    return [line for line in block.splitlines() if line.strip()]


def signatures(lines) -> set[tuple]:
    """Each teperf invocation in shell lines -> (subcommand, its --options): what a command is, not its
    values."""
    out = set()
    for line in lines:
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        for k, w in enumerate(words):
            if w == "teperf" and k + 1 < len(words):
                rest = words[k + 1 :]
                flags = []
                for t in rest[1:]:
                    if t in (";", "&&", "||", "|"):
                        break
                    if t.startswith("--"):
                        flags.append(t.split("=")[0])
                out.add((rest[0], tuple(sorted(flags))))
    return out


def workflow():
    return yaml.safe_load(WORKFLOW.read_text())


def run_lines(wf) -> list[str]:
    lines = []
    for job in wf["jobs"].values():
        for step in job.get("steps", []):
            lines += step.get("run", "").splitlines()
    return lines


def shell_lines(path: Path) -> list[str]:
    return path.read_text().replace("\\\n", " ").splitlines()


def test_readme_block_is_the_three_commands():
    sigs = signatures(readme_commands())
    assert sigs == {
        ("nightly", ("--history", "--night", "--ref", "--repo", "--shard")),
        ("history", ("--history", "--nights")),
        ("dashboard", ("--history", "--out")),
    }


def test_workflow_parses_and_runs_the_readme_commands():
    wf = workflow()
    assert signatures(run_lines(wf)) == signatures(readme_commands())
    triggers = wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` as true
    assert "schedule" in triggers and "workflow_dispatch" in triggers
    shard = wf["jobs"]["shard"]
    assert shard["runs-on"] == LABELS
    assert shard["strategy"]["fail-fast"] is False
    assert shard["strategy"]["matrix"]["shard"] == list(range(1, int(wf["env"]["SHARDS"]) + 1))
    dash = wf["jobs"]["dashboard"]
    assert dash["needs"] == "shard" and "!cancelled()" in dash["if"]  # built after a failed shard too
    assert any(s.get("uses", "").startswith("actions/upload-artifact") for s in dash["steps"])
    assert wf["jobs"]["deploy"]["needs"] == "dashboard"
    used = set(re.findall(r"secrets\.([A-Z_]+)", WORKFLOW.read_text()))
    assert used == SECRETS


def test_the_manual_names_the_secrets_and_labels():
    text = NIGHTLY_PAGE.read_text().split("\n## Nightly at scale\n", 1)[1].split("\n## ", 1)[0]
    assert all(f"`{s}`" in text for s in SECRETS)
    assert "[self-hosted, gpu, h200]" in text and "--dependency=afterany:" in text and "--array=1-N" in text


def fakes(tmp_path: Path) -> tuple[dict, Path]:
    """sbatch, srun, git and teperf stand-ins that append their argv to calls.log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    record = (
        f'printf "%s" "$(basename "$0")" >> {log}; for a in "$@"; do printf " %q" "$a" >> {log}; done; '
        f"echo >> {log}\n"
    )
    scripts = {
        "sbatch": record + 'echo "4242;cluster"\n',
        "srun": record + 'while [[ "$1" == --* ]]; do shift; done; exec "$@"\n',
        "git": record + "echo 0123456789abcdef\n",
        "teperf": record,
    }
    for name, body in scripts.items():
        (bin_dir / name).write_text("#!/bin/bash\n" + body)
        (bin_dir / name).chmod(0o755)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text("")
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "TEPERF_VENV": str(venv),
        "TEPERF_HISTORY": "s3://bucket/teperf/history",
        "TE_REPO": str(tmp_path / "TE"),
        "USER": "tester",
    }
    return env, log


def calls(log: Path) -> list[list[str]]:
    return [shlex.split(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_sbatch_script_is_valid_bash_and_uses_the_readme_commands():
    subprocess.run(["bash", "-n", str(SBATCH)], check=True)
    assert signatures(shell_lines(SBATCH)) == signatures(readme_commands())
    text = SBATCH.read_text()
    assert "#SBATCH --gpus=1" in text and "--signal=INT@" in text


def test_sbatch_from_the_login_node_submits_the_array_and_the_dashboard(tmp_path):
    env, log = fakes(tmp_path)
    out = subprocess.run(["bash", str(SBATCH)], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    sb = [c for c in calls(log) if c[0] == "sbatch"]
    assert len(sb) == 2
    assert "--array=1-4" in sb[0] and sb[0][-1] == str(SBATCH.resolve())
    assert "--dependency=afterany:4242" in sb[1] and any(
        a.startswith("--wrap=bash") and "dashboard" in a for a in sb[1]
    )
    assert not [c for c in calls(log) if c[0] == "teperf"]  # the login node measures nothing


def test_sbatch_array_task_runs_its_shard_and_the_dashboard_job_builds(tmp_path):
    env, log = fakes(tmp_path)
    task = {
        **env,
        "SLURM_JOB_ID": "4243",
        "SLURM_ARRAY_JOB_ID": "4242",
        "SLURM_ARRAY_TASK_ID": "3",
        "TEPERF_SHARDS": "4",
    }
    out = subprocess.run(["bash", str(SBATCH)], env=task, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    (nightly,) = [c for c in calls(log) if c[0] == "teperf"]
    assert nightly[1] == "nightly"
    args = dict(zip(nightly[2::2], nightly[3::2]))
    assert (
        args["--shard"] == "3/4"
        and args["--night"] == "slurm-4242"
        and args["--history"] == "s3://bucket/teperf/history"
    )
    assert args["--repo"] == env["TE_REPO"] and args["--ref"] == "origin/main"
    log.unlink()
    out = subprocess.run(
        ["bash", str(SBATCH), "dashboard"],
        env={**env, "SLURM_JOB_ID": "4244"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert [c[1] for c in calls(log) if c[0] == "teperf"] == ["history", "dashboard"]


def test_workflow_shard_step_runs_as_shell(tmp_path):
    """The shard step's shell, with the expressions GitHub would fill in, calls teperf as intended."""
    wf = workflow()
    step = next(s for s in wf["jobs"]["shard"]["steps"] if "teperf nightly" in s.get("run", ""))
    values = {"matrix.shard": "3", "github.run_id": "999"}
    script = re.sub(r"\$\{\{\s*([\w.]+)\s*\}\}", lambda m: values[m.group(1)], step["run"])
    env, log = fakes(tmp_path)
    wf_env = {k: str(v) for k, v in wf["env"].items() if "${{" not in str(v)}
    out = subprocess.run(
        ["bash", "-c", script], env={**env, **wf_env}, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    (nightly,) = calls(log)
    args = dict(zip(nightly[2::2], nightly[3::2]))
    assert nightly[:2] == ["teperf", "nightly"]
    assert args == {
        "--repo": "TransformerEngine",
        "--ref": "main",
        "--shard": "3/4",
        "--night": "gh-999",
        "--history": "s3://bucket/teperf/history",
    }


def test_counters_workflow_runs_the_gate_on_pull_requests():
    path = ROOT / "examples" / "ci" / "github-counters.yml"
    wf = yaml.safe_load(path.read_text())
    triggers = wf.get("on", wf.get(True))
    assert "pull_request" in triggers
    sigs = signatures(run_lines(wf))
    assert ("counters", ("--expected",)) in sigs  # the CPU job: the default config
    assert ("counters", ("--config", "--expected", "--modes")) in sigs  # the TE job
    assert wf["jobs"]["h200"]["runs-on"] == LABELS
    # every expected file the workflow checks is one the header says how to make
    files = set(re.findall(r"--expected (\S+)", path.read_text()))
    assert files == {"ci/teperf-counters-cpu.toml", "ci/teperf-counters-h200.toml"}
    assert "github-counters.yml" in (ROOT / "docs" / "counters.md").read_text()
