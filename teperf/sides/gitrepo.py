"""Git plumbing for git sides: run git, resolve refs, read trees, materialize commits (a bare repository
too: ``git archive`` and ``ls-tree`` need no work tree). Every git call takes an argument list."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
import tomllib
from pathlib import Path, PurePosixPath
from typing import Sequence

from teperf.errors import TeperfError
from teperf.sides import cachedir


class GitFailed(Exception):
    def __init__(self, args: Sequence[str], returncode: int, stderr: str):
        self.returncode = returncode
        self.stderr = stderr.strip()
        super().__init__(f"git {' '.join(args)} failed ({returncode}): {self.stderr}")


def _git_exe() -> str:
    exe = shutil.which("git")
    if not exe:
        raise TeperfError("git is not installed (or not on PATH)", "install git to compare git refs")
    return exe


def _git_env() -> dict:
    # the repo is given by -C, nothing else
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}
    return env | dict(GIT_TERMINAL_PROMPT="0", LC_ALL="C", LANG="C", GIT_OPTIONAL_LOCKS="0")


def run_git(repo: str | os.PathLike, *args: str, binary: bool = False, check: bool = True):
    """``git -C repo args...`` -> stdout (str, stripped of the final newline; bytes if ``binary``)."""
    cmd = [_git_exe(), "-C", os.fspath(repo), "-c", "core.quotepath=off", *args]
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, env=_git_env())
    if check and proc.returncode != 0:
        raise GitFailed(args, proc.returncode, proc.stderr.decode(errors="replace"))
    if binary:
        return proc.stdout
    out = proc.stdout.decode(errors="surrogateescape")
    return out[:-1] if out.endswith("\n") else out


def repo_root(repo: str | os.PathLike = ".") -> Path:
    """The top level of the git work tree that holds ``repo`` (a bare repository: its git directory)."""
    path = Path(repo).expanduser()
    if not path.is_dir():
        problem = (
            f"--repo {repo} is not a directory" if path.exists() else f"--repo {repo}: no such directory"
        )
        raise TeperfError(problem, "pass --repo DIR, a git checkout of the project")
    try:
        if run_git(path, "rev-parse", "--is-bare-repository").strip() == "true":
            # the git directory is the repository
            return Path(run_git(path, "rev-parse", "--absolute-git-dir"))
        top = run_git(path, "rev-parse", "--show-toplevel")
    except GitFailed as exc:
        if "not a git repository" in exc.stderr.lower():
            raise TeperfError(
                f"{path.absolute()} is not inside a git repository",
                "run this command in a checkout of the project, or pass --repo DIR",
            ) from None
        raise TeperfError(
            f"git cannot read {path.absolute()}: {exc.stderr.splitlines()[-1] if exc.stderr else exc}",
            "fix the repository (see the git message), or pass another --repo",
        ) from None
    return Path(top)


def has_work_tree(repo: str | os.PathLike) -> bool:
    return run_git(repo, "rev-parse", "--is-inside-work-tree", check=False).strip() == "true"


@dataclasses.dataclass(frozen=True)
class RefSpec:
    """What the user typed, split: ``A..B``, ``A...B`` or a single ref."""

    base: str  # ref as typed ('' is HEAD in git's A..B syntax)
    head: str
    mode: str  # "range" (A..B), "merge-base" (A...B) or "parent" (single ref: base = its first parent)

    @property
    def base_ref(self) -> str:
        return self.base or "HEAD"

    @property
    def head_ref(self) -> str:
        return self.head or "HEAD"


def parse_spec(spec: str) -> RefSpec:
    """Split a spec; git ref names cannot contain '..', so splitting on it is unambiguous."""
    text = (spec or "").strip()
    if not text:
        raise TeperfError("empty ref spec", "give BASE..HEAD, BASE...HEAD or a single commit (e.g. HEAD)")
    if ".." not in text:
        return RefSpec(base=f"{text}^1", head=text, mode="parent")
    sep, mode = ("...", "merge-base") if "..." in text else ("..", "range")
    base, _, head = text.partition(sep)
    if ".." in head or (not base and not head):
        raise TeperfError(
            f"cannot parse ref spec {spec!r}", "give BASE..HEAD, BASE...HEAD or a single commit"
        )
    return RefSpec(base=base, head=head, mode=mode)


def commit_sha(repo: str | os.PathLike, ref: str) -> str | None:
    """The full SHA of the commit ``ref`` names, or None."""
    return run_git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False).strip() or None


def _rev_parse(repo: str | os.PathLike, ref: str) -> tuple[str, str]:
    """(the SHA ``ref`` names as a commit or '', what git warned). ``:/text`` (the newest commit whose
    message matches) takes no ``^{commit}``: git would search for the suffix too."""
    target = ref if ref.startswith(":/") else f"{ref}^{{commit}}"
    cmd = [_git_exe(), "-C", os.fspath(repo), "rev-parse", "--verify", target]
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, env=_git_env())
    out, said = proc.stdout.decode(errors="replace").strip(), proc.stderr.decode(errors="replace").strip()
    if proc.returncode == 0 and ref.startswith(":/") and run_git(repo, "cat-file", "-t", out) != "commit":
        out = ""
    return (out if proc.returncode == 0 else ""), said


def resolve(repo: str | os.PathLike, ref: str, *, what: str = "ref") -> str:
    """A ref (branch, tag, SHA, HEAD, HEAD~2, :/text, ...) -> the full SHA of its commit; git's warnings
    (an ambiguous name, a date past the reflog) refuse it rather than pass silently."""
    if ref.startswith("-"):
        raise TeperfError(f"{what} {ref!r} is not a valid ref", "refs cannot start with '-'")
    sha, said = _rev_parse(repo, ref)
    warned = said.splitlines()[0].removeprefix("warning: ") if said else ""
    if "is ambiguous" in said:  # git takes one of them (a tag before a branch) and says so only here
        name = re.sub(r"[~^@].*$", "", ref)
        raise TeperfError(
            f"{what} {ref!r} is ambiguous in {repo}: {name!r} names more than one ref (git: {warned})",
            f"name it in full, e.g. refs/heads/{name} or refs/tags/{name}",
        )
    if "only goes back to" in said:  # git answers with the reflog's oldest entry
        raise TeperfError(
            f"{what} {ref!r} is older than its reflog (git: {warned})",
            "give a commit, or a date within the reflog (git reflog show), e.g. main@{2.days.ago}",
        )
    if not re.fullmatch(r"[0-9a-f]{40}([0-9a-f]{24})?", sha):
        if ref.endswith("^1"):
            parent_of = ref[:-2]
            probe = commit_sha(repo, parent_of)
            if probe:
                fix = f"give both sides, e.g. teperf compare BASE..{parent_of}"
                if run_git(repo, "rev-parse", "--is-shallow-repository", check=False).strip() == "true":
                    fetch = "git fetch --deepen=1, or --unshallow"
                    fix = f"this clone is shallow: fetch the parent ({fetch}), or {fix}"
                raise TeperfError(f"{parent_of} ({probe[:10]}) has no parent commit to compare it with", fix)
        fix = f"check the name (git -C {repo} log --oneline --all | head), or git fetch it first"
        raise TeperfError(f"{what} {ref!r} does not name a commit in {repo}", fix)
    return sha


@dataclasses.dataclass(frozen=True)
class Commit:
    sha: str
    short_sha: str
    subject: str
    date: str  # committer date, ISO 8601
    ref: str  # as typed (or derived, e.g. 'main^1', 'merge-base(main, topic)')


def commit_info(repo: str | os.PathLike, sha: str, ref: str) -> Commit:
    out = run_git(repo, "show", "-s", "--no-show-signature", "--format=%H%x00%h%x00%cI%x00%s", sha)
    full, short, date, subject = out.split("\0", 3)
    return Commit(sha=full, short_sha=short, subject=subject, date=date, ref=ref)


@dataclasses.dataclass(frozen=True)
class Resolved:
    spec: RefSpec
    base: Commit
    head: Commit
    repo: Path


def resolve_spec(spec: str, repo: str | os.PathLike = ".") -> Resolved:
    root = repo_root(repo)
    parsed = parse_spec(spec)
    head_sha = resolve(root, parsed.head_ref, what="head ref")
    if parsed.mode == "merge-base":
        tip = resolve(root, parsed.base_ref, what="base ref")
        try:
            base_sha = run_git(root, "merge-base", tip, head_sha).strip()
        except GitFailed:
            raise TeperfError(
                f"{parsed.base_ref} and {parsed.head_ref} have no common ancestor",
                f"use {parsed.base_ref}..{parsed.head_ref} to compare the two commits directly",
            ) from None
        base_ref = f"merge-base({parsed.base_ref}, {parsed.head_ref})"
    else:
        base_sha = resolve(root, parsed.base_ref, what="base ref")
        base_ref = parsed.base_ref
    head = commit_info(root, head_sha, parsed.head_ref)
    return Resolved(parsed, commit_info(root, base_sha, base_ref), head, root)


def dirty_files(repo: str | os.PathLike) -> list[str]:
    """Tracked files with uncommitted changes (staged or not)."""
    args = ["status", "--porcelain=v1", "-z", "--untracked-files=no", "--ignore-submodules=dirty"]
    entries = iter(run_git(repo, *args).split("\0"))  # "XY name\0" per file, no final newline
    files = []
    for item in entries:
        if len(item) < 4:
            continue
        files.append(item[3:])
        if "R" in item[:2] or "C" in item[:2]:
            next(entries, None)  # the original name follows
    return files


def ls_tree(repo: str | os.PathLike, sha: str, path: str | None = None) -> list[tuple[str, str, str, str]]:
    """(mode, type, object, path) of every entry (recursively) in a commit, optionally under ``path``."""
    args = ["ls-tree", "-r", "-z", "--full-tree", sha]
    if path:
        args += ["--", path]
    items = filter(None, run_git(repo, *args).split("\0"))  # -z: no final newline to strip
    return [(*meta.split(), name) for meta, _, name in (item.partition("\t") for item in items)]


def _blobs(repo: str | os.PathLike, sha: str) -> list[str]:
    return [path for _mode, kind, _obj, path in ls_tree(repo, sha) if kind == "blob"]


def _shallowest(repo: str | os.PathLike, sha: str, name: str) -> str | None:
    """``name`` or ``*/name`` at ``sha`` nearest the top (not a vendored copy); ties: 'src/' layouts first."""
    hits = [path for path in _blobs(repo, sha) if path == name or path.endswith("/" + name)]
    return min(hits, key=lambda n: (n.count("/"), not n.startswith("src/"), n), default=None)


def find_package_dir(repo: str | os.PathLike, sha: str, package: str) -> str | None:
    """The package's directory at ``sha`` (``pkg``, ``src/pkg``, ...), else the file of a module of that
    name (nanoGPT's ``model.py``: a repo whose code is one module), or None."""
    init = _shallowest(repo, sha, f"{package.split('.')[0]}/__init__.py")
    if init:
        return init[: -len("/__init__.py")]
    return None if "." in package else _shallowest(repo, sha, f"{package}.py")  # a module holds no submodules


# Top-level directories and modules that are never the code under test.
_NOT_PACKAGES = frozenset(
    "tests test docs doc examples example benchmarks benchmark scripts tools build_tools ci qa "
    "notebooks configs results".split()
)
_NOT_MODULES = frozenset({"setup", "conftest", "noxfile", "tasks", "manage", "fabfile"})


def detect_package(repo: str | os.PathLike, sha: str, hint: str | None = None) -> tuple[str, str]:
    """(import name, how it was found) of the code under test at ``sha``, when ``--package`` is not given:
    TransformerEngine's package, else pyproject's project name, else the one top-level package, else the
    one top-level module. Several candidates: ``hint`` (what the config's factories import) when it is one
    of them, else a TeperfError listing them."""
    blobs = _blobs(repo, sha)
    if "transformer_engine/__init__.py" in blobs:
        return "transformer_engine", "transformer_engine/__init__.py"
    if "pyproject.toml" in blobs:
        try:
            name = tomllib.loads(show_file(repo, sha, "pyproject.toml") or "").get("project", {}).get("name")
        except (tomllib.TOMLDecodeError, AttributeError):
            name = None
        if isinstance(name, str) and name.strip():
            module = re.sub(r"[-.]+", "_", name.strip()).lower()
            if find_package_dir(repo, sha, module) is not None:
                return module, f"pyproject.toml's project name {name!r}"
    inits = [
        p for p in blobs if p.endswith("/__init__.py") and p.count("/") == (2 if p.startswith("src/") else 1)
    ]
    dirs = {PurePosixPath(p).parent.name for p in inits}
    packages = sorted(d for d in dirs if d not in _NOT_PACKAGES and d.isidentifier())
    if len(packages) == 1:
        return packages[0], "the one top-level package"
    stems = [PurePosixPath(p).stem for p in blobs if "/" not in p and p.endswith(".py")]
    modules = sorted(s for s in stems if s.isidentifier() and s not in _NOT_MODULES)
    if not packages and len(modules) == 1:
        return modules[0], "the one top-level module"
    found = packages or modules
    if hint in found:
        return hint, "the one the config's factories import"
    raise TeperfError(
        f"cannot tell which package is under test at {sha[:10]} of {repo}: "
        + (f"found {', '.join(found)}" if found else "no Python package or module at its top level"),
        "pass --package NAME (the import name under test)",
    )


def prefix(package_dir: str) -> str:
    """``package_dir`` as a path prefix: ``"pkg/"``, or ``""`` for the repo root (``"."``, ``""``)."""
    pkg = package_dir.strip("/")
    return "" if pkg in ("", ".") else pkg + "/"


def module_in_dir(repo: str | os.PathLike, shas: Sequence[str], package: str, package_dir: str) -> str | None:
    """``DIR/package.py`` when ``--package-dir DIR`` holds the code under test as one module file rather
    than a package directory of that name; else None."""
    pkg = package_dir.strip("/")
    if "." in package or pkg.endswith(".py") or PurePosixPath(pkg or ".").name == package:
        return None
    where = prefix(package_dir)
    module = f"{where}{package}.py"
    if any(show_file(repo, sha, f"{where}{package}/__init__.py") is not None for sha in shas):
        return None
    return module if any(show_file(repo, sha, module) is not None for sha in shas) else None


def _untar(stream, dest: Path) -> int:
    """Extract a tar stream into ``dest``; return the number of files."""
    count = 0
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
                continue
            try:
                tar.extract(member, dest, filter="tar")
            except TypeError:  # Python without extraction filters
                tar.extract(member, dest)
            count += member.isfile()
    while stream.read(1 << 16):  # the tar reader stops at the end marker; git may still be padding
        pass
    return count


def _archive_cmd(repo: str | os.PathLike, sha: str, nowhere: str) -> list[str]:
    """``git archive`` of the commit's files as committed. Plain ``git archive`` applies the commit's
    ``export-ignore``/``export-subst`` attributes (a package file marked export-ignore would be missing from
    the side); ``--worktree-attributes`` run in an empty work tree (``nowhere``, the cwd: git reads the
    work tree's attributes relative to it) with no index and no global attributes file reads none."""
    git_dir = run_git(repo, "rev-parse", "--absolute-git-dir")
    return [
        _git_exe(),
        f"--git-dir={git_dir}",
        f"--work-tree={nowhere}",
        "-c",
        "core.attributesFile=/dev/null",
        "archive",
        "--worktree-attributes",
        "--format=tar",
        sha,
    ]


def _extract_archive(repo: str | os.PathLike, sha: str, dest: Path, paths: Sequence[str] = ()) -> int:
    """Stream ``git archive sha [-- paths]`` into ``dest``; return the number of files."""
    count, unreadable = 0, None
    with tempfile.TemporaryFile() as errors, tempfile.TemporaryDirectory(prefix="teperf-noattr-") as nowhere:
        cmd = _archive_cmd(repo, sha, nowhere)
        if paths:
            cmd += ["--", *paths]
        env = _git_env() | {"GIT_INDEX_FILE": os.path.join(nowhere, "index")}  # absent: an empty index
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors, env=env, cwd=nowhere
        )
        try:
            count = _untar(proc.stdout, dest)
        except (tarfile.TarError, EOFError) as exc:  # git stopped mid-stream (a missing object)
            unreadable = exc
        finally:
            proc.stdout.close()
            rc = proc.wait()
        if rc != 0 or unreadable is not None:
            errors.seek(0)
            said = errors.read().decode(errors="replace").strip()
            last = said.splitlines()[-1] if said else f"{type(unreadable).__name__}: {unreadable}"
            raise TeperfError(
                f"git archive {sha[:10]} failed in {repo}: {last}",
                "the repository lacks objects of that commit (a partial or shallow clone?): fetch them "
                "(git fetch --refetch, or git fetch --unshallow) or use a full clone",
            )
    return count


def _submodule_repo(repo: Path, path: str) -> Path | None:
    """A local git repository holding the submodule at ``path`` (checked out, or in .git/modules)."""
    checked_out = repo / path
    if has_work_tree(repo) and (checked_out / ".git").exists():
        return checked_out
    modules = Path(run_git(repo, "rev-parse", "--absolute-git-dir")) / "modules"
    out = run_git(repo, "config", "-f", ".gitmodules", "--get-regexp", r"^submodule\..*\.path$", check=False)
    keys = [key for key, _, value in (line.partition(" ") for line in out.splitlines()) if value == path]
    names = [key[len("submodule.") : -len(".path")] for key in keys]  # the submodule's name, else its path
    return next((modules / name for name in [*names, path] if (modules / name).is_dir()), None)


def _fill_submodules(repo: Path, sha: str, dest: Path, depth: int = 0) -> None:
    if depth > 4:
        return
    for mode, _kind, commit, path in ls_tree(repo, sha):
        if mode != "160000":  # not a submodule
            continue
        source = _submodule_repo(repo, path)
        if source is None or run_git(source, "cat-file", "-t", commit, check=False).strip() != "commit":
            fix = f"run git -C {repo} submodule update --init --recursive, then run teperf again"
            raise TeperfError(f"submodule {path} at {commit[:10]} is not available locally in {repo}", fix)
        target = dest / path
        target.mkdir(parents=True, exist_ok=True)
        _extract_archive(source, commit, target)
        _fill_submodules(source, commit, target, depth + 1)


def materialize(
    repo: str | os.PathLike,
    sha: str,
    *,
    cache_dir: str | os.PathLike | None = None,
    submodules: bool = False,
    needs: str | None = None,
) -> Path:
    """The commit's files under ``<cache>/trees/<sha>/`` (made once, reused), from ``git archive``: nothing
    is written to the user's work tree, index or .git. ``submodules``: add theirs from their local clones
    (no network). ``needs``: the one path the caller uses, taken alone when objects elsewhere are missing."""
    repo = Path(repo)
    trees = cachedir.kind_dir("trees", cache_dir)
    final = trees / sha
    meta_file = final / cachedir.META
    with cachedir.locked(trees / f"{sha}.lock"):
        cachedir.hold(final)
        meta = cachedir.read_json(meta_file) if final.is_dir() else {}
        whole_enough = not meta.get("only") or meta.get("only") == needs  # a tree of one path serves only it
        # a tree made before "as_committed" may lack export-ignore files: made again
        if meta.get("complete") and meta.get("as_committed") and whole_enough:
            if submodules and not meta.get("submodules"):  # the tree is there, its submodules are not
                _fill_submodules(repo, sha, final)
                cachedir.write_json(meta_file, {**meta, "submodules": True})
            else:
                cachedir.touch(final)
            return final
        cachedir.remove_tree(final)  # an incomplete leftover
        started = time.perf_counter()
        with cachedir.making(final) as tmp:
            try:
                files, only = _extract_archive(repo, sha, tmp), None
            except TeperfError:  # objects outside ``needs`` are missing (a partial mirror): take only it
                if not needs:
                    raise
                cachedir.remove_tree(tmp)  # what the whole archive wrote before it stopped
                tmp.mkdir()
                files, only = _extract_archive(repo, sha, tmp, (needs,)), needs
            if submodules:
                _fill_submodules(repo, sha, tmp)
            cachedir.write_json(
                tmp / cachedir.META,
                {
                    "complete": True,
                    "as_committed": True,
                    "sha": sha,
                    "repo": str(repo),
                    "files": files,
                    "submodules": submodules,
                    "only": only,
                    "subject": run_git(repo, "show", "-s", "--format=%s", sha),
                    "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "seconds": round(time.perf_counter() - started, 3),
                },
            )
    return final


@dataclasses.dataclass(frozen=True)
class DiffEntry:
    path: str
    submodule: bool


def diff_entries(repo: str | os.PathLike, a: str, b: str) -> list[DiffEntry]:
    """Paths that differ between two commits (renames as delete + add), submodules marked."""
    if a == b:
        return []
    # -z: ":old_mode new_mode old new status\0path\0" per path, and no final newline to strip
    parts = run_git(
        repo, "diff", "--raw", "-z", "--no-renames", "--no-ext-diff", "--no-abbrev", a, b, "--"
    ).split("\0")
    return [
        DiffEntry(path=path, submodule="160000" in meta[1:].split()[:2])
        for meta, path in zip(parts[::2], parts[1::2])
        if meta.startswith(":")
    ]


def tracked_py(repo: str | os.PathLike, sha: str, package_dir: str) -> set[str]:
    """Package-relative paths of the .py files tracked under ``package_dir`` at ``sha``."""
    under = prefix(package_dir)
    rows = ls_tree(repo, sha, under or None)
    return {name[len(under) :] for _m, kind, _o, name in rows if kind == "blob" and name.endswith(".py")}


def show_file(repo: str | os.PathLike, sha: str, path: str) -> str | None:
    """The text of ``path`` at ``sha``, or None when it is not there."""
    proc = run_git(repo, "cat-file", "-p", f"{sha}:{path}", binary=True, check=False)
    return proc.decode(errors="replace") if proc else None
