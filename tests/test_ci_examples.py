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


# ------------------------------------------------------------------ the pull-request workflow

PR_WORKFLOW = ROOT / "examples" / "ci" / "github-pr.yml"
SCHEDULE_FLAGS = {"--processes", "--rounds", "--trials", "--iters", "--warmup", "--lanes", "--precision"}


def pr_steps() -> dict:
    wf = yaml.safe_load(PR_WORKFLOW.read_text())
    return {step.get("name", step.get("uses")): step for step in wf["jobs"]["compare"]["steps"]}


def pr_fakes(tmp_path: Path) -> tuple[dict, Path]:
    """A ``gh`` stand-in: the pull request's commits, its labels ($FAKE_LABELS) and the id of teperf's
    comment ($FAKE_COMMENT_ID, none if empty); every POST/PATCH's body kept as bodies/N.md; calls in
    calls.log. Plus the workflow's env and what GitHub's runner sets."""
    env, log = fakes(tmp_path)
    bodies = tmp_path / "bodies"
    bodies.mkdir()
    gh = f"""{{ printf gh; for a in "$@"; do printf " %q" "$a"; done; echo; }} >> {log}
case "$*" in
  *"--jq .head.sha"*) echo 2222222222222222222222222222222222222222 ;;
  *"--jq .base.sha"*) echo 1111111111111111111111111111111111111111 ;;
  *labels*) printf '%s\\n' $FAKE_LABELS ;;
  *"-X PATCH"*|*"-X POST"*) for a in "$@"; do case "$a" in body=@*) n=$(ls {bodies} | wc -l);
      cp "${{a#body=@}}" "{bodies}/$n.md" ;; esac; done ;;
  *comments*) [ -n "$FAKE_COMMENT_ID" ] && echo "$FAKE_COMMENT_ID" ;;
esac
exit 0
"""
    (tmp_path / "bin" / "gh").write_text("#!/bin/bash\n" + gh)
    (tmp_path / "bin" / "gh").chmod(0o755)
    wf = yaml.safe_load(PR_WORKFLOW.read_text())
    runner = tmp_path / "runner"
    runner.mkdir()
    env |= {k: str(v) for k, v in wf["env"].items()}
    env |= {"GITHUB_REPOSITORY": "me/TransformerEngine", "PR": "7", "RUNNER_TEMP": str(runner)}
    env |= {"RUN_URL": "https://github.com/me/TransformerEngine/actions/runs/1"}
    env |= {"GITHUB_EVENT_NAME": "pull_request", "FAKE_LABELS": "", "FAKE_COMMENT_ID": ""}
    env |= {"RESULTS": str(tmp_path / "results"), "GITHUB_OUTPUT": str(tmp_path / "output")}
    env |= {"GITHUB_ENV": str(tmp_path / "github_env"), "GITHUB_RUN_ID": "1", "GITHUB_RUN_ATTEMPT": "2"}
    return env, log


def run_step(name: str, env: dict, cwd=None) -> subprocess.CompletedProcess:
    script = pr_steps()[name]["run"]
    return subprocess.run(
        ["bash", "-e", "-c", script], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )


def outputs(env: dict) -> dict:
    path = Path(env["GITHUB_OUTPUT"])
    return dict(line.split("=", 1) for line in path.read_text().splitlines()) if path.exists() else {}


def test_pr_workflow_measures_the_pull_request_and_fails_only_on_slower():
    wf = yaml.safe_load(PR_WORKFLOW.read_text())
    triggers = wf.get("on", wf.get(True))
    assert (
        "labeled" in triggers["pull_request"]["types"] and "synchronize" in triggers["pull_request"]["types"]
    )
    assert triggers["issue_comment"]["types"] == ["created"]
    job = wf["jobs"]["compare"]
    assert job["runs-on"] == LABELS
    assert wf["permissions"]["pull-requests"] == "write" and wf["env"]["TEPERF_CONFIG"] == "pr-thread"
    assert wf["env"]["LONG_LABEL"] in job["if"] and "/teperf longer" in job["if"]
    # no third-party action: GitHub's own, and gh on the runner
    assert all(s["uses"].startswith("actions/") for s in job["steps"] if "uses" in s)
    sigs = signatures("\n".join(run_lines(wf)).replace("\\\n", " ").splitlines())  # joined continuations
    compare = next(flags for cmd, flags in sigs if cmd == "compare")
    assert {"--repo", "--config", "--fail-on"} <= set(compare)  # --budget: only when longer (below)
    assert not SCHEDULE_FLAGS & set(compare)  # the config's schedule plans itself
    assert ("report", ("--format",)) in sigs and "--format comment" in PR_WORKFLOW.read_text()
    assert "github-pr.yml" in (ROOT / "docs" / "pull-requests.md").read_text()


def test_pr_workflow_takes_the_longer_budget_from_the_label_or_the_command(tmp_path):
    env, log = pr_fakes(tmp_path)
    env["FAKE_LABELS"] = "bug teperf-long"
    out = run_step("Which commits, and how long", env)
    assert out.returncode == 0, out.stderr
    assert outputs(env) == {"head": "2" * 40, "base": "1" * 40, "longer": "true"}
    assert Path(env["GITHUB_ENV"]).read_text() == f"RESULTS={env['RUNNER_TEMP']}/teperf-1-2\n"
    Path(env["GITHUB_OUTPUT"]).unlink()
    assert (
        run_step("Which commits, and how long", {**env, "GITHUB_EVENT_NAME": "issue_comment"}).returncode == 0
    )
    assert outputs(env)["longer"] == "true"
    for longer, budget in (("true", ["--budget", "45m"]), ("false", [])):
        log.unlink(missing_ok=True)
        step = {**env, "LONGER": longer, "BASE_SHA": "1" * 40, "HEAD_SHA": "2" * 40}
        assert run_step("Compare the merge base with the head", step).returncode == 0
        (teperf,) = [c for c in calls(log) if c[0] == "teperf"]
        assert teperf == [
            "teperf", "compare", f"{'1' * 40}...{'2' * 40}", "--repo", ".", "--config", "pr-thread", *budget,
            "--fail-on", "slower", "--results-dir", env["RESULTS"],
        ]  # fmt: skip


@pytest.mark.real_worker
def test_pr_workflow_runs_its_compare_and_posts_one_comment(tmp_path):
    """The compare step as written, over a fixture repository with the config swapped for a CPU one and the
    schedule cut short (teperf on PATH adds the flags); then the comment is posted once and updated."""
    import sys

    import schedules
    from gitfixture import make_fixture

    fx = make_fixture(tmp_path / "fx")
    config = tmp_path / "cpu.toml"
    config.write_text(
        'backend = "torch"\ndevice = "cpu"\nrecipes = ["fp32"]\nshapes = [[8, 2, 32]]\n\n'
        '[modules.MLP]\nfactory = "mypkg.blocks:make_mlp"\nkwargs = { width = 32, depth = 4 }\n'
    )
    env, log = pr_fakes(tmp_path)
    (tmp_path / "bin" / "git").unlink()  # the real git, on the fixture
    short = " ".join([*schedules.TWO_PAIRS, *schedules.FORKED, "--no-counters"])
    (tmp_path / "bin" / "teperf").write_text(
        f'#!/bin/bash\n[ "$1" = compare ] && set -- "$@" {short}\nexec {sys.executable} -m teperf "$@"\n'
    )
    env |= {
        "TEPERF_CONFIG": str(config),
        "BASE_SHA": fx.base,
        "HEAD_SHA": fx.head,
        "LONGER": "false",
        "PYTHONPATH": f"{fx.site}{os.pathsep}{ROOT}",
        "TEPERF_CACHE": str(tmp_path / "cache"),
    }
    out = run_step("Compare the merge base with the head", env, cwd=fx.repo)
    assert out.returncode == 0, out.stderr
    status = outputs(env)["status"]
    assert Path(env["RESULTS"]).is_dir(), out.stderr[-3000:]
    assert len(list(Path(env["RESULTS"]).iterdir())) == 1  # one bundle, the one the comment shows
    out = run_step("Post or update the comment", {**env, "STATUS": status})
    assert out.returncode == 0, out.stderr
    body = (tmp_path / "bodies" / "0.md").read_text().splitlines()
    assert (
        body[0] == env["MARKER"] and body[1].startswith("**teperf: ") and "| MLP | fp32 |" in "\n".join(body)
    )
    posted = [c for c in calls(log) if c[0] == "gh" and "-X" in c]
    assert posted[0][:4] == ["gh", "api", "-X", "POST"] and posted[0][4].endswith("/issues/7/comments")
    # the next push: the comment found by its marker is edited, not a second one posted
    log.unlink()
    out = run_step("Post or update the comment", {**env, "STATUS": status, "FAKE_COMMENT_ID": "4242"})
    assert out.returncode == 0, out.stderr
    (edit,) = [c for c in calls(log) if c[0] == "gh" and "-X" in c]
    assert edit[:5] == ["gh", "api", "-X", "PATCH", "repos/me/TransformerEngine/issues/comments/4242"]
    # the gate: exit 1 exactly where the table says slower, a cell failed, or too few units decide a cell
    slower = any(word in body[1] for word in ("slower", "failed", "too few units"))
    assert status == ("1" if slower else "0"), (status, body[:3])
    gate = run_step("The gate", {**env, "STATUS": status})
    assert gate.returncode == int(status)


def test_pr_workflow_comments_on_a_pull_request_that_leaves_the_package_alone(tmp_path):
    env, log = pr_fakes(tmp_path)  # teperf compare measured nothing and exited 0: no bundle
    out = run_step("Post or update the comment", {**env, "STATUS": "0"})
    assert out.returncode == 0, out.stderr
    body = (tmp_path / "bodies" / "0.md").read_text().splitlines()
    assert body[:2] == [
        env["MARKER"],
        "**teperf: the package did not change** (no file of it differs): nothing to measure",
    ]
    assert run_step("The gate", {**env, "STATUS": "0"}).returncode == 0
