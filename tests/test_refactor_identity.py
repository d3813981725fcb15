"""Help texts, renders of the fixture bundles, resolved configs, explain renders and input errors are
byte-for-byte what tests/fixtures/refactor-identity.json stored (issue 25's refactor changed none of them).

When an output is meant to change, rewrite the store with ``python -m tests.refactor_identity --store``
and review its diff."""

from __future__ import annotations

import json

import refactor_identity


def test_outputs_are_unchanged(tmp_path):
    stored = json.loads(refactor_identity.STORED.read_text())
    now = refactor_identity.digest(refactor_identity.capture(tmp_path))
    assert sorted(now) == sorted(stored)
    changed = [key for key in stored if now[key] != stored[key]]
    for key in changed[:3]:
        print(f"--- {key} stored\n{stored[key]}\n--- {key} now\n{now[key]}")
    assert not changed
