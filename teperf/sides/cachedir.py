"""teperf's on-disk cache: git trees by SHA, overlay (shadow) trees, builds.

Layout under the cache root (``$TEPERF_CACHE``, else ``$XDG_CACHE_HOME/teperf``,
else ``~/.cache/teperf``)::

    trees/<sha>/             a commit's files, from ``git archive`` (+ .teperf.json)
    overlays/<key>/<pkg>/    a shadow package: the side's .py files, symlinks for the rest
    builds/<hash>/           prefix/ (the build), build.log, build.json
    buildtrees/<key>/        src/: the persistent, incremental build directory of one build configuration
    ext/<key>/               prefix/ (a framework extension built over the installed core), build.log, ...
    cores/<key>/             lib/ (a core library built with CMake in a buildtrees/ tree), build.log, ...
    ccache/shared/           the compiler cache every build shares (when ccache is installed)

Entries are made in a temporary sibling and renamed into place: a crash leaves none half-made.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import shutil
import time
from pathlib import Path
from typing import Iterator

from teperf.errors import TeperfError

KINDS = ("trees", "overlays", "builds", "buildtrees", "ext", "cores", "ccache")
BUILT = ("builds", "ext", "cores")  # kinds whose metadata is BUILD_META
META = ".teperf.json"  # inside trees/<sha>/ and overlays/<key>/
BUILD_META = "build.json"  # inside builds/<hash>/ and ext/<key>/


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    given = cache_dir or os.environ.get("TEPERF_CACHE")
    if given and Path(given).exists() and not Path(given).is_dir():  # /dev/null: click's file_okay passes it
        raise TeperfError(
            f"cannot use {given} as teperf's cache directory: a file is in the way",
            "pass --cache-dir (or set $TEPERF_CACHE to) a writable directory",
        )
    if given:
        return Path(given).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return (base / "teperf").absolute()


def kind_dir(kind: str, cache_dir: str | os.PathLike | None = None) -> Path:
    path = cache_root(cache_dir) / kind
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        in_the_way = isinstance(exc, (FileExistsError, NotADirectoryError))
        why = "a file is in the way" if in_the_way else exc.strerror
        raise TeperfError(
            f"cannot create teperf's cache directory {path}: {why}",
            "pass --cache-dir (or set $TEPERF_CACHE to) a writable directory",
        ) from None
    return path


@contextlib.contextmanager
def making(final: Path) -> Iterator[Path]:
    """A temporary sibling of ``final`` to fill, then renamed to it (atomic; another process's copy wins)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{final.name}-{os.getpid()}-{time.monotonic_ns()}"
    tmp.mkdir()
    try:
        yield tmp
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.exists():
                raise
    finally:
        remove_tree(tmp)  # gone once renamed


def remove_tree(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
        return

    def _onerror(func, p, _exc_info):  # read-only files from git archive
        with contextlib.suppress(OSError):
            os.chmod(p, 0o700)
            func(p)

    if path.exists():
        for root, dirs, _files in os.walk(path):
            for d in dirs:
                with contextlib.suppress(OSError):
                    os.chmod(os.path.join(root, d), 0o755)
        shutil.rmtree(path, onerror=_onerror)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (a lock file), held for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        _flock(handle, fcntl.LOCK_EX)
        yield


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def du(path: Path) -> int:
    """Bytes used by the files under ``path`` (symlinks counted as links, not targets)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


@dataclasses.dataclass
class Entry:
    kind: str  # one of KINDS
    key: str  # sha, overlay key or build hash
    path: Path
    meta: dict
    size: int
    mtime: float
    complete: bool  # False for leftovers of an interrupted run (.tmp-*) or a failed build


def entries(cache_dir: str | os.PathLike | None = None, kinds=KINDS, sizes: bool = True) -> list[Entry]:
    root = cache_root(cache_dir)
    found: list[Entry] = []
    for kind in kinds:
        for path in sorted(p for p in (root / kind).glob("*") if p.is_dir()):  # not the .lock, .inuse files
            meta = read_json(path / (BUILD_META if kind in BUILT else META))
            complete = not path.name.startswith(".tmp-") and bool(meta) and meta.get("ok", True) is not False
            size = du(path) if sizes else 0
            found.append(Entry(kind, path.name, path, meta, size, path.stat().st_mtime, complete))
    return found


@dataclasses.dataclass
class Cleared:
    removed: list[Entry]
    in_use: list[Entry]  # held by a running teperf (hold()): left in place


def clear(
    cache_dir: str | os.PathLike | None = None, kinds=KINDS, older_than_s: float | None = None
) -> Cleared:
    """Remove cache entries (of ``kinds``, unused for ``older_than_s``) but those a running teperf holds."""
    now = time.time()
    done = Cleared([], [])
    for entry in entries(cache_dir, kinds):
        if older_than_s is not None and now - entry.mtime < older_than_s:
            continue
        own = _HELD.pop(entry.path, None)  # this process asked: its own hold does not keep it
        if own is not None:
            own.close()
        with _unused(entry.path) as free:
            if not free:
                done.in_use.append(entry)
                continue
            remove_tree(entry.path)
        (entry.path.parent / f"{entry.key}.lock").unlink(missing_ok=True)
        done.removed.append(entry)
    return done


# Entries this process uses: path -> the open .inuse file whose shared lock says so (until exit).
_HELD: dict[Path, object] = {}


def _inuse_file(path: Path) -> Path:
    return path.parent / f"{path.name}.inuse"


def _flock(handle, flags: int) -> bool:
    """flock ``handle``; False when LOCK_NB was asked and another process holds it."""
    try:
        fcntl.flock(handle.fileno(), flags)
    except BlockingIOError:
        return False
    except OSError:  # a filesystem without flock: run unlocked
        pass
    return True


def hold(path: Path) -> None:
    """Mark the entry at ``path`` as in use by this process until it exits: ``cache clear`` leaves
    it alone. Called before the entry is read or made, so a clear already under way finishes first
    and the caller then finds it gone and makes it again."""
    if path in _HELD:
        return
    inuse = _inuse_file(path)
    inuse.parent.mkdir(parents=True, exist_ok=True)
    while True:
        handle = open(inuse, "a+")
        _flock(handle, fcntl.LOCK_SH)
        # a clear unlinks the file it locked: a lock on that one would guard nothing
        with contextlib.suppress(FileNotFoundError):
            if os.fstat(handle.fileno()).st_ino == os.stat(inuse).st_ino:
                _HELD[path] = handle
                return
        handle.close()


@contextlib.contextmanager
def _unused(path: Path) -> Iterator[bool]:
    """True (and no one can start using it while inside) when no other process holds ``path``;
    the .inuse file goes with the entry."""
    inuse = _inuse_file(path)
    with open(inuse, "a+") as handle:
        if not _flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB):
            yield False
            return
        yield True
        inuse.unlink(missing_ok=True)  # still locked: a waiting hold() sees the unlink and starts over


def touch(path: Path) -> None:
    """Mark an entry as used now (``cache clear --older-than`` goes by this)."""
    with contextlib.suppress(OSError):
        os.utime(path)
