"""Any PyTorch code base (issue 24), without workers: finding the package, a single module at the
root, data files, a partial clone, the inputs factory, the recorded PYTHONPATH, non-TE wording."""

from __future__ import annotations

import os
import subprocess

import pytest
from conftest import run_in_process
from gitfixture import commit, git, make_fixture, make_pure_python, make_single_module, make_te_shaped, write
from gitfixture import planted_repo as _planted_repo

from teperf.config import load_config
from teperf.errors import TeperfError
from teperf.plan import expand
from teperf.sides import Side, changes, gitrepo, with_inherited_pythonpath
from teperf.sides.git import plan_sides
from teperf.sides.layout import GENERIC
from teperf.sides.target import Refused, Target


def quiet(_msg):
    pass


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TEPERF_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("TEPERF_ALLOW_DIRTY", raising=False)


def test_package_found_in_the_repo(tmp_path):
    te_repo, _ = make_te_shaped(tmp_path / "te")
    assert gitrepo.detect_package(te_repo, "HEAD")[0] == "transformer_engine"
    research = make_pure_python(tmp_path / "r")
    assert gitrepo.detect_package(research, "HEAD") == ("research", "the one top-level package")
    fx = make_fixture(tmp_path / "f", install=False)
    assert gitrepo.detect_package(fx.repo, fx.base)[0] == "mypkg"

    # pyproject's name wins over several packages; a dashed name is its import name
    repo = tmp_path / "lib"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    write(repo / "pyproject.toml", '[project]\nname = "My-Lib"\n')
    write(repo / "my_lib" / "__init__.py", "")
    write(repo / "helpers" / "__init__.py", "")
    commit(repo, "two packages")
    assert gitrepo.detect_package(repo, "HEAD") == ("my_lib", "pyproject.toml's project name 'My-Lib'")


def test_package_not_found_names_the_candidates(tmp_path):
    fx = make_single_module(tmp_path)
    with pytest.raises(TeperfError, match=r"cannot tell .* found model, train; pass --package NAME"):
        gitrepo.detect_package(fx.repo, fx.head)


def test_the_detected_package_is_said(tmp_path):
    research = make_pure_python(tmp_path)
    said = []
    planned = plan_sides("v1..HEAD", repo=str(research), log=said.append)
    assert planned.target.package == "research" and planned.target.package_dir == "src/research"
    assert said[0] == "package under test: research (the one top-level package; --package NAME names another)"


def test_single_module_at_the_root(tmp_path):
    fx = make_single_module(tmp_path)
    spec = f"{fx.base}..{fx.head}"
    assert gitrepo.find_package_dir(fx.repo, fx.head, "model") == "model.py"
    for package_dir in (None, ".", "model.py"):  # found, the newcomer's --package-dir ., the file itself
        planned = plan_sides(spec, repo=str(fx.repo), package="model", package_dir=package_dir, log=quiet)
        assert planned.target.package_dir == "model.py" and planned.strategy.name == "path"
        assert planned.pair.changes.counts() == {"python": 1, "other": 1}  # model.py; the image is data
    base, head = planned.make()
    assert head.sys_path == (head.description["tree"],)  # the tree's root: `import model` finds model.py
    for strategy in ("overlay", "build"):
        with pytest.raises(TeperfError, match=f"--strategy {strategy} needs a package directory.*model.py"):
            plan_sides(spec, repo=str(fx.repo), package="model", strategy=strategy, log=quiet)


@pytest.mark.parametrize(
    "path, package_dir, expected",
    [
        ("images/arch.png", "model.py", False),
        ("assets/data/table.json", "mypkg", False),
        ("notebooks2/demo.ipynb", "mypkg", False),
        ("mypkg/_table.json", "mypkg", True),  # inside the package: an overlay would run the installed copy's
        ("tools/gen.sh", "mypkg", True),
    ],
)
def test_data_files_outside_the_package_are_not_build_inputs(path, package_dir, expected):
    assert changes.is_build_input(path, package_dir) is expected


def test_partial_clone_missing_blob_is_one_line(tmp_path):
    fx = make_single_module(tmp_path)
    blob = git(fx.repo, "rev-parse", f"{fx.head}:model.py")
    (fx.repo / ".git" / "objects" / blob[:2] / blob[2:]).unlink()  # what a blob:none clone lacks offline
    with pytest.raises(TeperfError) as caught:
        gitrepo.materialize(fx.repo, fx.head)
    text = caught.value.one_line()
    assert text.startswith(f"git archive {fx.head[:10]} failed in ") and "\n" not in text
    assert blob[:7] in text or "unable" in text or "missing" in text  # git's own words
    assert "git fetch" in text


def test_inputs_factory_in_the_config(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[modules.GPT]\nfactory = "model:make"\ninputs = "model:make_inputs"\n')
    case = expand(load_config(str(path)))[0]
    assert case.inputs == "model:make_inputs" and case.to_wire("cpu", 1)["inputs"] == "model:make_inputs"
    path.write_text('[modules.Linear]\ninputs = "model:make_inputs"\n')
    with pytest.raises(TeperfError, match="inputs needs a factory"):
        load_config(str(path))
    path.write_text('[modules.GPT]\nfactory = "model:make"\ninputs = "make_inputs"\n')
    with pytest.raises(TeperfError, match='inputs must be "pkg.mod:callable"'):
        load_config(str(path))


def test_worker_builds_token_ids_from_the_inputs_factory(tmp_path, monkeypatch):
    import torch

    from teperf.worker.backends import factory
    from teperf.worker.runner import make_step

    write(
        tmp_path / "tok.py",
        "import torch\n"
        "def make(vocab=16):\n"
        "    return torch.nn.Sequential(torch.nn.Embedding(vocab, 8), torch.nn.Linear(8, 8))\n"
        "def ids(shape, dtype, device):\n"
        "    assert dtype == torch.float32\n"
        "    return (torch.randint(0, 16, shape, device=device),)\n",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    case = {"factory": "tok:make", "inputs": "tok:ids", "kwargs": {}, "recipe": "fp32", "shape": [2, 5]}
    built = factory.build(case, "cpu")
    assert built.inputs[0].dtype == torch.int64 and built.info["inputs"] == "tok:ids"
    step, _ = make_step(built, "eager")
    step()
    assert built.module[1].weight.grad is not None


def test_inherited_pythonpath_is_recorded_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["helpers", "/abs/dir", ""]))
    side = with_inherited_pythonpath(Side("head", "python3"))
    assert side.env["PYTHONPATH"] == os.pathsep.join([str(tmp_path / "helpers"), "/abs/dir"])
    assert side.to_meta()["env"]["PYTHONPATH"] == side.env["PYTHONPATH"]
    own = Side("head", "python3", env={"PYTHONPATH": "/own"})
    assert with_inherited_pythonpath(own) is own
    monkeypatch.delenv("PYTHONPATH")
    plain = Side("head", "python3")
    assert with_inherited_pythonpath(plain) is plain


def test_explain_refuses_a_recorded_pythonpath_that_is_gone(tmp_path):
    from teperf.explain.capture import sides_from_meta

    meta = {
        "sides": {"base": {"label": "base", "python": "python3", "env": {"PYTHONPATH": str(tmp_path / "x")}}}
    }
    with pytest.raises(TeperfError, match="PYTHONPATH directory .*x, recorded in the bundle, is gone"):
        sides_from_meta(meta["sides"])


def test_build_estimate_is_not_tes_for_another_package(tmp_path):
    from teperf.sides.strategies.build import Build

    target = Target(repo=tmp_path, package="model", package_dir="model", layout=GENERIC, log=quiet)
    assert Build(target, None)._estimate() == "no earlier model build to go by"
    assert "TE" not in Build(target, None)._estimate()


def test_module_file_refused_by_package_strategies():
    target = Target(repo=".", package="model", package_dir="model.py", layout=GENERIC, log=quiet)
    with pytest.raises(Refused, match="use --strategy path"):
        target.refuse_module("overlay")


def test_bisect_build_estimate_goes_by_the_packages_own_builds(tmp_path):
    from teperf.bisect.sides import tier_seconds
    from teperf.sides import cachedir

    cache = str(tmp_path / "c")
    assert tier_seconds("model", "build", cache) == (60.0, "default")  # not TE's 600 s
    home = tmp_path / "c" / "builds" / "abc"
    home.mkdir(parents=True)
    cachedir.write_json(home / cachedir.BUILD_META, {"ok": True, "package": "model", "seconds": 12.5})
    assert tier_seconds("model", "build", cache) == (12.5, "measured")
    assert tier_seconds("model", "path", cache) == (1.0, "default")


def _git(repo, *args):
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    )


def test_a_blob_missing_outside_the_package_does_not_stop_a_package_only_tree(tmp_path):
    from teperf.sides import gitrepo

    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("X = 1\n")
    (repo / "data").mkdir()
    (repo / "data" / "enwik8.gz").write_bytes(b"not in this mirror")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "c")
    sha = _git(repo, "rev-parse", "HEAD").stdout.strip()
    blob = _git(repo, "rev-parse", "HEAD:data/enwik8.gz").stdout.strip()
    (repo / ".git" / "objects" / blob[:2] / blob[2:]).unlink()  # as in a partial mirror
    with pytest.raises(TeperfError, match="git archive"):
        gitrepo.materialize(repo, sha, cache_dir=tmp_path / "c")
    tree = gitrepo.materialize(repo, sha, cache_dir=tmp_path / "c", needs="pkg")
    assert (tree / "pkg" / "__init__.py").read_text() == "X = 1\n" and not (tree / "data").exists()
    assert gitrepo.materialize(repo, sha, cache_dir=tmp_path / "c", needs="pkg") == tree  # cached
    with pytest.raises(
        TeperfError, match="git archive"
    ):  # a strategy that needs the whole tree still says so
        gitrepo.materialize(repo, sha, cache_dir=tmp_path / "c")


def test_the_package_of_a_root_of_several_modules_comes_from_the_config_factories(tmp_path):
    from teperf.config import build_config
    from teperf.sides import gitrepo

    repo = tmp_path / "nano"
    repo.mkdir()
    for name in ("bench", "configurator", "model", "sample", "train"):
        (repo / f"{name}.py").write_text("X = 1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "c")
    sha = _git(repo, "rev-parse", "HEAD").stdout.strip()
    with pytest.raises(TeperfError, match="cannot tell which package"):
        gitrepo.detect_package(repo, sha)
    config = build_config({"modules": {"Block": {"factory": "model:make"}}}, {})
    assert config.factory_package == "model"
    assert gitrepo.detect_package(repo, sha, config.factory_package)[0] == "model"
    with pytest.raises(TeperfError, match="cannot tell which package"):  # a hint that is no candidate
        gitrepo.detect_package(repo, sha, "elsewhere")
    assert build_config({}, {}).factory_package is None  # built-in modules import no package of the repo


def test_a_package_dir_in_neither_commit_is_named_as_missing(tmp_path, capsys):
    repo = _planted_repo(tmp_path)
    argv = ["compare", "HEAD~1..HEAD", "--repo", str(repo), "--config", "demo", "--plan", "--package-dir"]
    code, out, err = run_in_process([*argv, "nope/dir"], capsys)
    assert code == 2 and "Traceback" not in err
    assert err.splitlines()[-1].startswith("teperf: error: --package-dir nope/dir is in neither"), err
    assert "is not named" not in err
    code, out, err = run_in_process([*argv, "demo_blocks"], capsys)
    assert code == 0, err


def test_an_absolute_package_dir_is_named_as_given_not_with_its_root_cut_off(tmp_path, capsys):
    repo = _planted_repo(tmp_path)
    argv = ["compare", "HEAD~1..HEAD", "--repo", str(repo), "--config", "demo", "--plan"]
    code, out, err = run_in_process([*argv, "--package-dir", str(tmp_path / "elsewhere")], capsys)
    assert code == 2 and f"--package-dir {tmp_path / 'elsewhere'} is in neither" in err, err
