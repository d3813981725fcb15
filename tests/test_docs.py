"""The manual: the command reference is generated from the click commands (so every command and option is in
it), every page is in the navigation, every evidence set is listed, every file of teperf it names exists, and
the README stays short."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

mkdocs_click_docs = pytest.importorskip("mkdocs_click._docs")
yaml = pytest.importorskip("yaml")

from teperf.cli import cli  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def walk(command, path=("teperf",)):
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from walk(sub, (*path, name))


def test_the_generated_reference_has_every_command_and_option():
    text = "\n".join(mkdocs_click_docs.make_command_docs("teperf", cli, style="table", list_subcommands=True))
    assert "::: mkdocs-click" in (DOCS / "reference.md").read_text()
    for path, command in walk(cli):
        assert " ".join(path) in text, path
        for param in command.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("-") and not getattr(param, "hidden", False):
                    assert opt in text, (path, opt)


def nav_files(nav):
    for item in nav:
        for value in item.values() if isinstance(item, dict) else [item]:
            if isinstance(value, list):
                yield from nav_files(value)
            else:
                yield value


def test_every_page_is_in_the_navigation_and_no_page_speaks_of_issue_numbers():
    conf = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    pages = {p.name for p in DOCS.glob("*.md")}
    assert set(nav_files(conf["nav"])) == pages
    for page in [*DOCS.glob("*.md"), ROOT / "README.md"]:
        assert not re.search(r"\bissues? \d", page.read_text(), re.I), page


def test_every_evidence_set_is_listed():
    listed = (DOCS / "evidence.md").read_text()
    for d in (ROOT / "results" / "evidence").iterdir():
        if d.is_dir():
            assert f"`results/evidence/{d.name}/`" in listed, d.name


def test_the_readme_is_short_and_points_at_the_manual():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert "make docs" in text and "make demo" in text and "make test" in text


def test_gpu_scripts_cite_no_files_a_user_does_not_have():
    for script in [
        *(ROOT / "scripts" / "gpu").glob("*.sh"),
        *(ROOT / "results" / "evidence").glob("*/gpu_*.sh"),
    ]:
        assert "../shared" not in script.read_text(), script


def test_every_teperf_file_the_docs_name_exists():
    """A `teperf/...py` path anywhere in docs/ or the README, and each file or folder of architecture.md's
    layout (its names are under teperf/), is in the tree: a renamed or moved module fails here until its page
    follows."""
    named = set()
    for page in [*DOCS.glob("*.md"), ROOT / "README.md"]:
        named |= set(re.findall(r"\bteperf/[\w/]+\.py\b", page.read_text()))
    layout = (DOCS / "architecture.md").read_text().split("```")[1].splitlines()
    assert layout[1] == "teperf/", layout[:2]
    for line in layout[2:]:
        first = (
            re.split(r"\s{2,}", line.strip())[0]
            if line.startswith("  ") and not line.startswith("   ")
            else ""
        )
        named |= {f"teperf/{name}" for name in re.split(r",\s*", first) if name.endswith((".py", "/"))}
    assert len(named) > 40, sorted(named)  # the layout was read
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert not missing, missing


def test_the_bundle_format_page_lists_every_record_kind_and_field():
    """docs/bundle-format.md's tables come from teperf/records.py when the manual is built (a mkdocs hook):
    every record kind and every field a reader checks is on the page."""
    import dataclasses
    import importlib.util

    from teperf import records

    spec = importlib.util.spec_from_file_location("bundle_format", DOCS / "_hooks" / "bundle_format.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    page = (DOCS / "bundle-format.md").read_text()
    assert hook.MARKER in page
    text = hook.on_page_markdown(page)
    assert hook.MARKER not in text
    for cls in [records.BundleMeta, records.CaseMeta, *records.KINDS.values()]:
        for field in dataclasses.fields(cls):
            internal = not field.compare  # kept beside the JSON object, not in it
            assert (f"| `{field.name}` |" in text) != internal, (cls.__name__, field.name)
    for kind in records.KINDS:
        assert f"### `{kind}`" in text
    assert "| `open_half_pct` | `dict` | `{}` | an open cell's 95 % half-width at the end |" in text
