"""Text that is not ours (module names, commit subjects, exception messages), made safe: no HTML or
broken tables in markdown, no escape sequences on a terminal."""

from __future__ import annotations

import html
import re

# ANSI CSI (colours, cursor moves) and OSC (titles, hyperlinks) sequences, then any other
# C0/C1 control character except newline and tab.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]?")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def for_terminal(text) -> str:
    """``text`` without escape sequences or control characters (newlines and tabs stay)."""
    return _CONTROL.sub("", _ANSI.sub("", str(text)))


# Markdown syntax that would turn a name into a link, an image, code or emphasis: `[x](y)` must read
# as itself. An underscore inside a word (fp8_delayed) cannot start emphasis and stays as it is.
_MARKDOWN = re.compile(r"[\\`*\[\]~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def for_markdown(text) -> str:
    """``text`` as literal markdown table content: HTML escaped, markdown syntax and ``|`` escaped,
    one line."""
    one_line = " ".join(for_terminal(text).split("\n"))
    escaped = _MARKDOWN.sub(lambda m: "\\" + m.group(0), html.escape(one_line, quote=False))
    return escaped.replace("|", "\\|")
