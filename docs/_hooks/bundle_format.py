"""mkdocs hook: docs/bundle-format.md's tables, generated at build time from the types teperf reads a bundle
with (teperf/records.py), so that the page cannot drift from them."""

from __future__ import annotations

import ast
import inspect
import io
import textwrap
import tokenize

from teperf import records

MARKER = "<!-- bundle-format: generated from teperf/records.py -->"


def _default(value: ast.expr | None) -> str:
    if value is None:
        return "required"
    if isinstance(value, ast.Call) and ast.unparse(value.func) == "dataclasses.field":
        for kw in value.keywords:
            if kw.arg == "default_factory":
                return {"dict": "`{}`", "list": "`[]`"}.get(
                    ast.unparse(kw.value), f"`{ast.unparse(kw.value)}()`"
                )
            if kw.arg == "default":
                return f"`{ast.unparse(kw.value)}`"
    return f"`{ast.unparse(value)}`"


def _internal(value: ast.expr | None) -> bool:
    """A field outside the JSON object (``compare=False``: what a reader keeps beside it)."""
    return isinstance(value, ast.Call) and any(
        kw.arg == "compare" and ast.unparse(kw.value) == "False" for kw in value.keywords
    )


def fields_table(cls: type) -> str:
    """One row per field of ``cls``: its name, type, default and the comment on its line."""
    source = textwrap.dedent(inspect.getsource(cls))
    comments = {
        tok.start[0]: tok.string.lstrip("# ").strip()
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    }
    (node,) = ast.parse(source).body
    rows = ["| field | type | default | note |", "|---|---|---|---|"]
    for stmt in node.body:
        if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
            continue
        annotation = ast.unparse(stmt.annotation)
        if annotation.startswith("ClassVar") or _internal(stmt.value):
            continue
        note = comments.get(stmt.lineno, "").replace("|", "\\|")
        rows.append(f"| `{stmt.target.id}` | `{annotation}` | {_default(stmt.value)} | {note} |")
    return "\n".join(rows)


def _doc(cls: type) -> str:
    return " ".join(inspect.getdoc(cls).split()).replace("``", "`")


def render() -> str:
    parts = [
        f"Bundle schema **{records.SCHEMA_VERSION}** (`meta.json`'s `schema`).",
        "## meta.json",
        f"`BundleMeta`: {_doc(records.BundleMeta)} Keys it does not know are kept and written back.",
        fields_table(records.BundleMeta),
        f"Each entry of `cases`, `CaseMeta`: {_doc(records.CaseMeta)}",
        fields_table(records.CaseMeta),
        "## records.jsonl",
        "One JSON object a line, appended and flushed as the run goes; its `kind` names its type. A line of"
        " a kind this teperf does not know is kept and not read"
        f" (`UnknownRecord`: {_doc(records.UnknownRecord)})",
    ]
    for kind, cls in records.KINDS.items():
        parts += [f"### `{kind}`", f"`{cls.__name__}`: {_doc(cls)}", fields_table(cls)]
    return "\n\n".join(parts)


def on_page_markdown(markdown: str, **kwargs) -> str:
    return markdown.replace(MARKER, render()) if MARKER in markdown else markdown
