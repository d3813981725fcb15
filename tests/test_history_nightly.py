"""The nightly's decisions, without workers: shards, the previous nightly's commit, the machine, backfill's
range and dry run, and a repository that is none."""

from __future__ import annotations

import dataclasses
import itertools
import random

import pytest
import synthetic_history as synthetic
from conftest import one_error, run_in_process
from gitfixture import planted_repo as _planted_repo

from teperf.errors import TeperfError
from teperf.history.store import HistoryStore, machine_fingerprint
from teperf.nightly import choose_base, local_machine, parse_shard, shard_cases


@dataclasses.dataclass(frozen=True)
class C:
    module: str
    recipe: str
    shape: tuple
    dtype: str
    mode: str


def matrix():
    return [
        C(m, r, s, "bfloat16", mode)
        for m, r, s, mode in itertools.product(
            ["Linear", "LayerNormLinear", "LayerNormMLP", "TransformerLayer"],
            ["bf16", "fp8_delayed", "mxfp8"],
            [(8, 2, 256), (128, 4, 256)],
            ["eager", "cuda-graph"],
        )
    ]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 48])
def test_shards_partition_the_matrix_evenly(n):
    cases = matrix()
    shards = [shard_cases(cases, i, n) for i in range(1, n + 1)]
    flat = [c for s in shards for c in s]
    assert sorted(map(repr, flat)) == sorted(map(repr, cases))  # every case exactly once
    sizes = [len(s) for s in shards]
    assert max(sizes) - min(sizes) <= 1


def test_shards_do_not_depend_on_the_matrix_order():
    cases = matrix()
    shuffled = cases[:]
    random.Random(3).shuffle(shuffled)
    for i in (1, 2, 3):
        assert shard_cases(cases, i, 3) == shard_cases(shuffled, i, 3)


def test_shards_from_lead_cases_with_tuple_shapes():
    from teperf.config import load_config
    from teperf.plan import expand

    cases = expand(load_config("default"))
    a, b = shard_cases(cases, 1, 2), shard_cases(cases, 2, 2)
    assert {c.id for c in a}.isdisjoint({c.id for c in b}) and len(a) + len(b) == len(cases)


@pytest.mark.parametrize("text,expected", [(None, (1, 1)), ("1/1", (1, 1)), ("2/4", (2, 4))])
def test_parse_shard(text, expected):
    assert parse_shard(text) == expected


@pytest.mark.parametrize("text", ["0/2", "3/2", "1/0", "a/b", "2", "1/2/3", ""])
def test_parse_shard_refuses_nonsense(text):
    with pytest.raises(TeperfError):
        parse_shard(text)


def test_shard_out_of_range():
    with pytest.raises(TeperfError):
        shard_cases(matrix(), 4, 3)


def test_one_shard_range_check_serves_import_and_nightly():
    with pytest.raises(TeperfError) as from_flag:
        parse_shard("4/3")
    with pytest.raises(TeperfError) as from_cases:
        shard_cases(matrix(), 4, 3)
    assert (
        str(from_flag.value)
        == str(from_cases.value)
        == "shard 4/3 out of range; I must be between 1 and N, e.g. --shard 1/2 and --shard 2/2"
    )


@pytest.fixture
def history(tmp_path):
    st = HistoryStore(tmp_path / "h")
    plan = synthetic.Plan(commits=5, machines=(("CPU A", None, None), ("CPU B", "GPU", "1.0")))
    synthetic.write(st, plan)
    return st.read()


def machine_a():
    return machine_fingerprint("CPU A", None, None)[0]


def test_first_nightly_pairs_with_the_parent(tmp_path):
    empty = HistoryStore(tmp_path / "none").read()
    choice = choose_base(empty, machine=machine_a(), ref="main", head_sha="f" * 40)
    assert choice.spec == "f" * 40 and choice.base_sha is None and not choice.skip
    root = choose_base(
        empty, machine=machine_a(), ref="main", head_sha="f" * 40, has_parent=lambda sha: False
    )
    assert root.spec == f"{'f' * 40}..{'f' * 40}"


def test_next_nightly_pairs_with_the_previous_nightly_commit(history):
    head = "f" * 40
    choice = choose_base(history, machine=machine_a(), ref="main", head_sha=head)
    assert choice.base_sha == synthetic.sha_of(4)
    assert choice.spec == f"{synthetic.sha_of(4)}..{head}"


def test_same_commit_again_is_skipped_unless_forced(history):
    last = synthetic.sha_of(4)
    assert choose_base(history, machine=machine_a(), ref="main", head_sha=last).skip
    forced = choose_base(history, machine=machine_a(), ref="main", head_sha=last, force=True)
    assert not forced.skip and forced.base_sha == synthetic.sha_of(3)


def test_another_shard_of_the_same_night_is_not_skipped(history):
    last = synthetic.sha_of(4)
    other = choose_base(history, machine=machine_a(), ref="main", head_sha=last, shard="2/2")
    assert not other.skip and other.base_sha == synthetic.sha_of(3)  # the same base as shard 1/1 had


def test_other_machines_and_branches_are_not_the_previous_nightly(history):
    other_machine = machine_fingerprint("CPU C", None, None)[0]
    assert choose_base(history, machine=other_machine, ref="main", head_sha="f" * 40).base_sha is None
    assert choose_base(history, machine=machine_a(), ref="release", head_sha="f" * 40).base_sha is None


def test_rewritten_branch_falls_back_to_the_parent(history):
    choice = choose_base(
        history, machine=machine_a(), ref="main", head_sha="f" * 40, is_ancestor=lambda a, b: False
    )
    assert choice.base_sha is None and choice.spec == "f" * 40 and "not an ancestor" in choice.reason


def test_local_machine_on_cpu_matches_what_a_cpu_run_records():
    fid, label = local_machine("cpu", cpu_model="Some CPU")
    assert fid == machine_fingerprint("Some CPU", None, None)[0]
    fid_gpu, label_gpu = local_machine("cuda", cpu_model="Some CPU", gpu="NVIDIA H200", driver="570.1")
    assert fid_gpu == machine_fingerprint("Some CPU", "NVIDIA H200", "570.1")[0] and "H200" in label_gpu


def test_plan_nightly_is_the_command_without_the_printing(tmp_path):
    from gitfixture import make_fixture

    from teperf import api
    from teperf.config import build_config
    from teperf.options import SideOptions

    fx = make_fixture(tmp_path, install=False)
    # factories that import the repository's package (torch's own modules are refused: test_provenance.py)
    mine = {"factory": "mypkg.blocks:make_mlp"}
    config = build_config({"modules": {"Linear": mine, "LayerNormMLP": mine}}, {})
    history = str(tmp_path / "history")
    plan = api.plan_nightly(config, SideOptions(repo=str(fx.repo)), history=history, shard="2/2", night="n1")
    assert (plan.head_sha, plan.repo, plan.shard, plan.night) == (fx.head, str(fx.repo), (2, 2), "n1")
    assert plan.choice.spec == fx.head and not plan.choice.skip  # the first night: the head's first parent
    assert [c.module for c in plan.cases] == ["Linear"]  # sorted by module, dealt round-robin
    assert plan.describe().startswith(f"nightly: main at {fx.head[:10]} on ")
    assert plan.describe().endswith("night n1 shard 2/2: 1 case; " + plan.choice.reason)
    assert plan.record() == {"run_kind": "nightly", "ref": "main", "shard": "2/2", "night": "n1"}
    assert plan.meta()["nightly"]["history"] == str(plan.store.url)
    with pytest.raises(TeperfError, match="shard 3/3 has no cases"):
        api.plan_nightly(
            build_config({"modules": {"Linear": mine}, "shapes": [[8, 2, 64]]}, {}),
            SideOptions(repo=str(fx.repo)),
            history=history,
            shard="3/3",
        )


def test_a_night_whose_package_did_not_change_is_not_measured_or_stored(tmp_path):
    # issue 59: a docs-only night was stored as MLP "faster -1.2 %" (2 pairs), the identical-code warning lost
    from gitfixture import commit, make_fixture

    from teperf import api
    from teperf.config import build_config
    from teperf.options import MeasureOptions, SideOptions

    fx = make_fixture(tmp_path, install=False)
    (fx.repo / "README.md").write_text("docs only\n")
    docs = commit(fx.repo, "docs only")
    config = build_config({"modules": {"MLP": {"factory": "mypkg.blocks:make_mlp"}}}, {})
    history = str(tmp_path / "history")
    sides = SideOptions(repo=str(fx.repo), package="mypkg")
    plan = api.plan_nightly(config, sides, ref="main", history=history, at=docs)
    assert plan.choice.spec == docs  # paired with its first parent, the fixture's head
    result = api.nightly(plan, MeasureOptions(config=config, results_dir=str(tmp_path / "r")), sides)
    assert result.path is None and result.unchanged.startswith("the package mypkg did not change")
    assert not (tmp_path / "history").exists() or api.HistoryStore(history).read().empty


def test_nightly_outside_git_does_not_point_to_compare(tmp_path, capsys):
    from conftest import run_in_process

    code, _, err = run_in_process(["nightly", "--repo", str(tmp_path)], capsys)
    assert code == 2 and "is not inside a git repository" in err
    assert "teperf compare" not in err


def test_backfill_dry_run_lists_the_commits_and_measures_nothing(tmp_path, capsys):
    repo = _planted_repo(tmp_path)
    history = tmp_path / "history"
    argv = ["nightly", "--repo", str(repo), "--config", "demo", "--dry-run", "--history", str(history)]
    code, out, err = run_in_process([*argv, "--backfill", "HEAD~1..HEAD"], capsys)
    assert code == 0, err
    assert "would measure 2 commit(s)" in out and "base" in out and "head" in out, out
    assert not history.exists()  # nothing measured, nothing stored
    code, out, err = run_in_process([*argv, "--backfill", "HEAD..HEAD"], capsys)
    assert code == 0 and "would measure 1 commit(s)" in out, (out, err)


def test_a_reversed_backfill_range_is_refused(tmp_path, capsys):
    repo = _planted_repo(tmp_path)
    argv = ["nightly", "--repo", str(repo), "--config", "demo", "--dry-run", "--history", str(tmp_path / "h")]
    one_error(
        *run_in_process([*argv, "--backfill", "HEAD..HEAD~1"], capsys), "adds no commit", "HEAD~1..HEAD"
    )


@pytest.mark.parametrize("spec, end", [("..HEAD", "A"), ("HEAD~1..", "B")])
def test_a_backfill_range_without_an_end_says_which(spec, end, tmp_path, capsys):
    repo = _planted_repo(tmp_path)
    argv = ["nightly", "--repo", str(repo), "--config", "demo", "--dry-run", "--history", str(tmp_path / "h")]
    one_error(*run_in_process([*argv, "--backfill", spec], capsys), f"leaves out {end}", "name both ends")


@pytest.mark.parametrize("command", ["nightly --dry-run", "import x"])
def test_a_shard_count_of_zero_is_named(command, capsys):
    one_error(*run_in_process([*command.split(), "--shard", "1/0"], capsys), "N, the number of shards")
