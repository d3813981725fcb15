"""Which code each side really runs: path sides checked before measuring, worker imports after."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Optional

from teperf.errors import TeperfError
from teperf.plan import measured_packages
from teperf.records import BundleMeta
from teperf.sides import Side


def check_sides_used(config, named: str, *, git: bool = False) -> None:
    """Refuse sides (``named``: "--base-path DIR", or the git spec "A..B") when the modules measured are
    torch's built-in reference modules, which import nothing from them: one rule for path and git sides, so
    that no table of two commits or directories measures torch's own code."""
    if measured_packages(config):
        return
    modules = ", ".join(m.name for m in config.modules)
    if git:
        fix = (
            "pass --config with modules whose factories import the package: --config pr-thread or te-model "
            'for TransformerEngine, or your own config\'s [modules.NAME] factory = "pkg.mod:make" '
            "(see --config demo)"
        )
    else:
        fix = (
            "measure modules whose factories import from the paths (check --modules; a config's "
            '[modules.NAME] factory = "pkg.mod:make"; see examples/planted and --config demo)'
        )
    raise TeperfError(
        f"{f'the git sides ({named}) are' if git else f'{named} is'} not used: the modules measured "
        f"({modules}) are torch's built-in reference modules, which import nothing from "
        f"{'the repository' if git else 'it'}",
        fix,
    )


def check_path_sides(config, sides: Iterable[Side]) -> None:
    """Refuse a path side whose directories the modules import nothing from, or lack a package under test;
    a git side measured with torch's built-in modules too."""
    for side in sides:
        if side.description.get("source") == "git":
            check_sides_used(config, str(side.description.get("spec")), git=True)
        if side.description.get("kind") != "path" or not side.sys_path:
            continue
        option = f"--{side.label}-path" if side.label in ("base", "head") else "--path"
        check_sides_used(config, f"{option} {side.sys_path[0]}")
        wanted = measured_packages(config)
        for name in wanted:
            if not any(_provides(Path(p), name) for p in side.sys_path):
                raise TeperfError(
                    f"{option} {side.sys_path[0]} holds no {name} (neither {name}/ nor {name}.py), so "
                    f"{side.label} would import {name} from elsewhere",
                    f"point {option} at the directory that holds {name}, or use a config whose factories "
                    "import from it",
                )


def _provides(directory: Path, name: str) -> bool:
    if (directory / name).is_dir() or (directory / f"{name}.py").is_file():
        return True
    return any(directory.glob(f"{name}.*.so")) or any(directory.glob(f"{name}.*.pyd"))


def side_facts(worker_records: Iterable) -> dict[str, dict]:
    """label -> the ``imported`` facts of that side's first worker that reported them."""
    facts: dict[str, dict] = {}
    for rec in worker_records:
        imported = (getattr(rec, "hello", None) or {}).get("imported")
        if isinstance(imported, dict) and imported.get("packages") is not None:
            facts.setdefault(rec.side, imported)
    return facts


def code_identity(imported: dict) -> Optional[tuple]:
    """Python and torch versions and each package's hash (torch's version and path); None: unknown."""
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


def identical_code(meta: BundleMeta, worker_records: Iterable) -> Optional[str]:
    """One line when two sides meant to differ imported identical code (the run is no comparison)."""
    if meta.kind != "compare" or not meant_to_differ(meta.sides):
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
    """'base imported: python 3.11.7 (/venv-a), torch 2.13.0 (...), demo_blocks (path, hash ...)'."""
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
