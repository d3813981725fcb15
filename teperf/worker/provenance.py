"""What this worker really imported, with a content hash of the package's loaded files (by content and
path relative to the package: the same code hashes the same wherever it lies on disk)."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import sys
import time

COMPILED_SUFFIXES = (".so", ".pyd", ".dylib", ".dll")
CHUNK = 1 << 20


def _mapped_files() -> set[str]:
    """Real paths of every file mapped into this process (Linux); empty elsewhere."""
    out: set[str] = set()
    with contextlib.suppress(OSError), open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/"):
                out.add(parts[5].strip().removesuffix(" (deleted)"))
    return out


def _file_hash(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _version(name: str, module) -> str | None:
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    try:
        from importlib import metadata

        dists = metadata.packages_distributions().get(name) or [name]
        return metadata.version(dists[0])
    except Exception:  # no metadata: a plain directory on sys.path
        return None


def _belongs(module_name: str, name: str, file: str) -> bool:
    if module_name == name or module_name.startswith(name + "."):
        return True
    # a compiled sibling such as transformer_engine_torch (TE's PyTorch extension)
    return module_name.startswith(name + "_") and file.endswith(COMPILED_SUFFIXES)


def version_key(prefix: str, path: str | None) -> str:
    """Where a package's version is known by: its environment and location."""
    return f"{prefix}:{path}"


def package_facts(
    name: str, mapped: set[str], known: dict | None = None, versions: dict | None = None
) -> dict:
    """Version, location and content hash of package ``name`` as loaded; ``known``: an earlier worker's
    ``compiled``, whose hashes are reused while the file's stat matches (TE's libraries are 100+ MB);
    ``versions``: earlier workers' versions by version_key (a version without ``__version__`` costs a scan
    of every installed distribution, 0.2 s a worker)."""
    known, versions = known or {}, versions or {}
    try:
        module = importlib.import_module(name)  # as loaded, if it is
    except Exception as exc:
        return {"imported": False, "error": f"{type(exc).__name__}: {exc}"}
    location = getattr(module, "__file__", None)
    paths = list(getattr(module, "__path__", []) or [])
    root = paths[0] if paths else (os.path.dirname(location) if location else None)
    files: dict[str, str] = {}  # relative name -> absolute path
    for mod_name, mod in list(sys.modules.items()):
        file = getattr(mod, "__file__", None)
        if isinstance(file, str) and _belongs(mod_name, name, file):
            rel = os.path.relpath(file, root) if root and file.startswith(root + os.sep) else mod_name
            files[rel] = file
    if root and paths:
        # compiled files of the package that are mapped in but are no module (libtransformer_engine.so)
        real = {os.path.realpath(p) for p in mapped}
        for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for fn in filenames:
                if ".so" in fn or fn.endswith(COMPILED_SUFFIXES):
                    full = os.path.join(dirpath, fn)
                    if os.path.realpath(full) in real:
                        files.setdefault(os.path.relpath(full, root), full)
    total = hashlib.sha256()
    compiled: dict[str, list] = {}
    for rel in sorted(files):
        try:
            if files[rel].endswith(".py"):
                digest = _file_hash(files[rel])
            else:
                real = os.path.realpath(files[rel])
                st = os.stat(real)
                stat = [st.st_size, st.st_mtime_ns, st.st_ino]
                prior = known.get(real)
                digest = prior[3] if prior and list(prior[:3]) == stat else _file_hash(real)
                compiled[real] = stat + [digest]
        except OSError:
            digest = "unreadable"
        total.update(f"{rel}\0{digest}\n".encode(errors="surrogateescape"))
    key = version_key(sys.prefix, root or location)
    return {
        "imported": True,
        "version": versions[key] if key in versions else _version(name, module),
        "path": root or location,
        "files": len(files),
        "compiled_files": len(compiled),
        "compiled": compiled,  # real path -> [size, mtime_ns, inode, sha256]: what later workers may reuse
        "hash": total.hexdigest()[:16] if files else None,
    }


def imported_facts(packages: list[str], known: dict | None = None, versions: dict | None = None) -> dict:
    """The worker's interpreter, torch, and each package under test (``packages``)."""
    started = time.perf_counter()
    torch = sys.modules.get("torch")
    mapped = _mapped_files()
    facts = {
        "executable": sys.executable,
        "prefix": sys.prefix,
        "python": sys.version.split()[0],
        "sys_path": [p for p in sys.path if p],
        "torch": {
            "version": getattr(torch, "__version__", None),
            "path": os.path.dirname(torch.__file__) if torch is not None else None,
        },
        "packages": {},
    }
    for name in packages:
        if name == "torch":  # its version and path say which; hashing GBs would not pay
            entry = {"imported": torch is not None, **facts["torch"], "files": None, "hash": None}
        else:
            entry = package_facts(name, mapped, known, versions)
        facts["packages"][name] = entry
    facts["seconds"] = round(time.perf_counter() - started, 3)  # what the hashing cost this worker
    return facts
