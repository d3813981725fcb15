"""Which code each side really runs: checked before measuring, recorded while measuring, judged after.

A measuring tool's worst defect is a confident number about the wrong code.
Before any pair starts, :func:`preflight` asks each side's interpreter (without
importing anything heavy) where torch, the package under test and teperf's
worker code would come from, and :func:`check_path_sides` refuses
``--base-path/--head-path`` that the config imports nothing from. Each worker
then reports what it imported (teperf.worker.provenance: interpreter, torch,
the package's version, path and content hash); :func:`identical_code` says
when two sides the user meant to differ ran the same code.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Iterable, Optional

from teperf.errors import TeperfError
from teperf.sides import Side

TE_PACKAGES = ("transformer_engine",)
PREFLIGHT_TIMEOUT_S = 120.0


def packages_under_test(config, sides: Iterable[Side] = ()) -> list[str]:
    """Top-level import names whose code the cells measure: the package a git side was made of
    (``--package``), TE for the te backend, each factory's package, torch itself for torch's
    built-in reference modules. A factory outside the sides' trees that imports the package
    (nanoGPT's ``model``) is the same on both sides: the side's package is what differs."""
    names: list[str] = [
        s.description["package"] for s in sides if isinstance(s.description.get("package"), str)
    ]
    if config.backend == "te":
        names += TE_PACKAGES
    for spec in config.modules:
        factory = getattr(spec, "factory", None)
        if factory:
            names.append(factory.split(":", 1)[0].split(".", 1)[0])
        elif config.backend == "torch":
            names.append("torch")
    return list(dict.fromkeys(names))


def measured_packages(config, sides: Iterable[Side] = ()) -> list[str]:
    """The packages under test whose code lives outside torch (what a side must be able to import)."""
    return [n for n in packages_under_test(config, sides) if n != "torch"]


def check_path_sides(config, sides: Iterable[Side]) -> None:
    """--base-path/--head-path/--path put directories first on sys.path; refuse when the config's
    modules import nothing from them, or a package under test is in none of them."""
    for side in sides:
        if side.description.get("kind") != "path" or not side.sys_path:
            continue
        option = f"--{side.label}-path" if side.label in ("base", "head") else "--path"
        wanted = measured_packages(config)
        if not wanted:
            raise TeperfError(
                f"{option} {side.sys_path[0]} is not used: the modules measured "
                f"({', '.join(m.name for m in config.modules)}) are torch's built-in reference modules, which "
                "import nothing from it",
                "measure modules whose factories import from the paths (check --modules; a config's [modules.NAME] "
                'factory = "pkg.mod:make"; see examples/planted and --config demo)',
            )
        for name in wanted:
            if not any(_provides(Path(p), name) for p in side.sys_path):
                raise TeperfError(
                    f"{option} {side.sys_path[0]} holds no {name} (neither {name}/ nor {name}.py), so {side.label} "
                    f"would import {name} from elsewhere",
                    f"point {option} at the directory that holds {name}, or use a config whose factories import "
                    "from it",
                )


def _provides(directory: Path, name: str) -> bool:
    if (directory / name).is_dir() or (directory / f"{name}.py").is_file():
        return True
    return any(directory.glob(f"{name}.*.so")) or any(directory.glob(f"{name}.*.pyd"))


# Run in the side's interpreter with the side's sys.path and PYTHONPATH: finds, never imports
# (importing torch and TE costs 10 s on the H200; find_spec of a top-level name costs milliseconds).
_PREFLIGHT = r"""
import importlib.util, json, sys
sys.path[0:0] = json.loads(sys.argv[1])
out = {"python": sys.version.split()[0], "executable": sys.executable, "prefix": sys.prefix, "found": {}}
for name in json.loads(sys.argv[2]):
    try:
        spec = importlib.util.find_spec(name)
    except Exception as exc:
        spec, out["found"][name] = None, "error: %s: %s" % (type(exc).__name__, exc)
        continue
    out["found"][name] = (spec.origin or (list(spec.submodule_search_locations or []) or [None])[0]) if spec else None
print(json.dumps(out))
"""


def _where_else(side: Side) -> str:
    """The options that point ``side`` elsewhere: a git side's tree is the ref's, so only PYTHONPATH adds
    code from outside it; `run`'s one side takes --python/--path."""
    if "ref" in side.description:
        return (
            "put the directory that holds it on PYTHONPATH (git sides import the ref's tree and PYTHONPATH)"
        )
    flag = f"--{side.label}-" if side.label in ("base", "head") else "--"
    return f"point {flag}python/{flag}path at one that has it"


def preflight(config, sides: Iterable[Side], hash_seed: int = 0) -> dict[str, dict]:
    """Each side's interpreter, and where it finds torch, the packages under test and teperf's
    worker; a one-line TeperfError naming the interpreter and what it lacks, before any pair."""
    from teperf.engine.spawn import check_python, worker_code_dir, worker_env

    sides = list(sides)
    wanted = ["torch", *measured_packages(config, sides), "teperf.worker"]
    found: dict[str, dict] = {}
    for side in sides:
        check_python(side.python)
        with tempfile.TemporaryDirectory(prefix="teperf-preflight-") as cwd:
            try:
                proc = subprocess.run(
                    [side.python, "-c", _PREFLIGHT, json.dumps(list(side.sys_path)), json.dumps(wanted)],
                    cwd=cwd,
                    env=worker_env(side, hash_seed),
                    capture_output=True,
                    text=True,
                    stdin=subprocess.DEVNULL,
                    timeout=PREFLIGHT_TIMEOUT_S,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise TeperfError(
                    f"{side.label}'s interpreter {side.python} could not be asked what it imports: {exc}",
                    "check that it runs (`PYTHON -c 'import sys'`)",
                )
        try:
            facts = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise TeperfError(
                f"{side.label}'s interpreter {side.python} fails to start: {last}",
                "point the side at a working Python 3 interpreter",
            )
        missing = [
            name for name in wanted if not facts["found"].get(name) or "error:" in str(facts["found"][name])
        ]
        if missing:
            what = {
                "torch": "torch",
                "teperf.worker": "teperf's worker code (a Python >= 3.9 that can read it)",
            }
            names = ", ".join(what.get(m, m) for m in missing)
            fix = (
                f"install torch into that environment ({side.python} -m pip install torch)"
                if missing == ["torch"]
                else f"install {names} into that environment, or {_where_else(side)}"
            )
            raise TeperfError(
                f"{side.label}'s interpreter {side.python} ({facts['prefix']}) lacks {names}", fix
            )
        facts["found"].pop("teperf.worker", None)
        worker_dir = worker_code_dir()
        for name, origin in list(facts["found"].items()):
            if origin and str(origin).startswith(worker_dir):
                raise TeperfError(
                    f"{side.label} would import {name} from teperf's worker code directory", "report this bug"
                )
        found[side.label] = facts
    return found


def side_facts(worker_records: Iterable) -> dict[str, dict]:
    """label -> the ``imported`` facts of that side's first worker that reported them."""
    facts: dict[str, dict] = {}
    for rec in worker_records:
        imported = (getattr(rec, "hello", None) or {}).get("imported")
        if isinstance(imported, dict) and imported.get("packages") is not None:
            facts.setdefault(rec.side, imported)
    return facts


def code_identity(imported: dict) -> Optional[tuple]:
    """What makes two sides' code the same: the Python and torch versions, and every package under
    test's content hash (torch's own modules, too big to hash, by version and path: two installs
    of one version may still differ). None when something is unknown."""
    packages = imported.get("packages") or {}
    if not packages:
        return None
    parts = []
    for name, facts in sorted(packages.items()):
        if not isinstance(facts, dict) or not facts.get("imported"):
            return None
        if name != "torch" and not facts.get("hash"):
            return None
        parts.append((name, facts.get("hash") or f"{facts.get('version')} at {facts.get('path')}"))
    torch = imported.get("torch") or {}
    return (imported.get("python"), torch.get("version"), tuple(parts))


def meant_to_differ(sides_meta: dict) -> bool:
    """Whether the user named two different sides (a deliberate A/A names the same one twice)."""
    metas = [m for m in (sides_meta or {}).values() if isinstance(m, dict)]
    if len(metas) != 2:
        return False

    def what(meta: dict) -> tuple:
        python = meta.get("python")
        # abspath, not realpath: every venv's python links to the same base interpreter
        python = os.path.abspath(python) if python and os.path.sep in python else python
        return (meta.get("sha"), meta.get("dirty"), python, tuple(meta.get("sys_path") or ()))

    base, head = metas
    if base.get("sha") and head.get("sha"):  # git sides: the commits (and dirtiness) say it
        return (base.get("sha"), base.get("dirty")) != (head.get("sha"), head.get("dirty"))
    return what(base) != what(head)


def identical_code(meta: dict, worker_records: Iterable) -> Optional[str]:
    """One line when two sides meant to differ imported identical code (the run is no comparison)."""
    if meta.get("kind") != "compare" or not meant_to_differ(meta.get("sides") or {}):
        return None
    facts = side_facts(worker_records)
    if len(facts) != 2:
        return None
    identities = [code_identity(f) for f in facts.values()]
    if identities[0] is None or identities[0] != identities[1]:
        return None
    packages = identities[0][2]
    what = ", ".join(f"{name} {'hash ' + str(h) if name != 'torch' else h}" for name, h in packages)
    return (
        f"both sides ran identical code ({what}; python {identities[0][0]}, torch {identities[0][1]}): "
        "this is no comparison of what you named"
    )


def side_line(label: str, imported: dict) -> str:
    """'base imported: python 3.11.7 (/venv-a), torch 2.13.0 (/venv-a/.../torch), demo_blocks (path, hash ...)'."""
    torch = imported.get("torch") or {}
    bits = [f"python {imported.get('python')} ({imported.get('prefix')})"]
    bits.append(f"torch {torch.get('version')} ({torch.get('path')})")
    for name, facts in (imported.get("packages") or {}).items():
        if name == "torch" or not isinstance(facts, dict):
            continue
        if not facts.get("imported"):
            bits.append(f"{name} not imported ({facts.get('error')})")
            continue
        version = f" {facts['version']}" if facts.get("version") else ""
        files = facts.get("files")
        bits.append(f"{name}{version} ({facts.get('path')}; {files} files, hash {facts.get('hash')})")
    return f"{label} imported: " + ", ".join(bits)


def mixed_code(records: Iterable) -> list[str]:
    """Sides whose workers did not all import the same code (the tree changed during the run)."""
    seen: dict[str, set] = {}
    for rec in records:
        imported = (getattr(rec, "hello", None) or {}).get("imported")
        if isinstance(imported, dict):
            seen.setdefault(rec.side, set()).add(code_identity(imported))
    return sorted(label for label, ids in seen.items() if len(ids) > 1)
