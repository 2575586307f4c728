"""docs/coverage.md stays true: every test it names exists, and every registered name it gives
(`algorithm.advantage: x`, `curriculum.name: y`, `reward.terms: z`, ...) is registered."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "coverage.md"


def _rows() -> list[list[str]]:
    rows = []
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) >= 3 and not set(cells[0]) <= {"-"}:
            rows.append(cells)
    return rows


def _test_refs(cell: str) -> list[tuple[str, str]]:
    """(file, test) pairs of a cell: ``tests/x.py::test_a; ::test_b`` (the file carries on)."""
    refs, current = [], None
    for path, name in re.findall(r"(tests/[\w/]+\.py)?::(test_\w+)", cell):
        current = path or current
        assert current is not None, f"a test without its file: {cell}"
        refs.append((current, name))
    return refs


def test_every_test_the_table_names_exists():
    refs = [ref for row in _rows() for cell in row for ref in _test_refs(cell)]
    assert len(refs) > 100
    missing = [
        f"{path}::{name}"
        for path, name in sorted(set(refs))
        if not re.search(rf"^def {name}\(", (ROOT / path).read_text(), flags=re.M)
    ]
    assert not missing, missing


def test_every_registered_name_the_table_gives_is_registered():
    from rlvr.algorithms import GROUP_FILTERS
    from rlvr.curriculum import CURRICULA
    from rlvr.registries import algorithm_parts
    from rlvr.rewards import available_rewards

    parts = algorithm_parts()
    rewards = set(available_rewards())
    checked = 0
    for row in _rows():
        for key, value in re.findall(r"`([\w.]+): ([\w\-+ /]+?)`", " ".join(row)):
            names = [v.strip() for v in value.split(" / ")]
            if key in parts:
                registry = parts[key]
            elif key == "criterion":  # the group_filter stage's
                registry = GROUP_FILTERS
            elif key == "curriculum.name":
                registry = CURRICULA
            elif key == "reward.terms":
                registry = rewards
            else:
                continue
            for name in names:
                assert name in registry, f"{key}: {name} (docs/coverage.md) is not registered"
                checked += 1
    assert checked > 50


@pytest.mark.parametrize("status", ["full", "part", "not built"])
def test_the_counts_add_up(status):
    rows = [r for r in _rows() if len(r) == 5 and r[0] not in ("paper", "section")]
    counted = sum(r[3].startswith(status) for r in rows)
    total = next(r for r in _rows() if r[0] == "**total**")
    column = {"full": 1, "part": 3, "not built": 4}[status]
    assert int(total[column].strip("*")) == counted
