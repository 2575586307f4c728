"""docs/coverage.md stays true: every test it names exists and exercises what its row names (an
AST check of the test's code), and every registered name it gives (`algorithm.advantage: x`,
`curriculum.name: y`, `reward.terms: z`, ...) is registered."""

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


def test_each_sections_counts_are_its_rows():
    """The counts table's row of each seed section (000-004) counts that section's rows:
    full, of which combo, part, not built, all of them, and the dup rows (status "-")."""
    counted: dict[str, list[int]] = {}
    section = None
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            match = re.match(r"## (\d{3}) ", line)
            section = match.group(1) if match else None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if section is None or not line.startswith("| ") or len(cells) != 5:
            continue
        if cells[0] == "paper" or set(cells[0]) <= {"-"}:
            continue
        status = cells[3]
        dup = not status.startswith(("full", "part", "not built"))
        n = counted.setdefault(section, [0] * 6)
        n[0] += status.startswith("full")
        n[1] += status.startswith("full") and "combo" in status
        n[2] += status.startswith("part")
        n[3] += status.startswith("not built")
        n[4] += not dup
        n[5] += dup
    table = {r[0]: [int(c) for c in r[1:]] for r in _rows() if re.fullmatch(r"\d{3}", r[0])}
    assert table == counted


def _names_used(path: str, test: str) -> set[str]:
    """The names a test's code touches (identifiers, attributes, keyword arguments, string
    constants and their dotted / colon parts, its parametrize cases), with those of the
    module's own functions and fixtures it calls or takes and of the module's constants it
    reads, one level down."""
    import ast

    tree = ast.parse((ROOT / path).read_text())
    functions = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}

    def names(node: ast.AST) -> set[str]:
        out: set[str] = set()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name):
                out.add(sub.id)
            elif isinstance(sub, ast.Attribute):
                out.add(sub.attr)
            elif isinstance(sub, ast.keyword) and sub.arg:
                out.add(sub.arg)
            elif isinstance(sub, ast.arg):
                out.add(sub.arg)
            elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                out.add(sub.value)
                out.update(p for p in re.split(r"[^\w]+", sub.value) if p)
        return out

    constants = {
        target.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    test_node = functions[test]
    used = names(test_node)
    for decorator in test_node.decorator_list:  # parametrize's cases
        used |= names(decorator)
    for helper in sorted(used & set(functions) - {test}):
        used |= names(functions[helper])
    for constant in sorted(used & set(constants)):
        used |= names(constants[constant])
    return used


def _row_names(cell: str) -> set[str]:
    """What a row's rlvr-name cell names: each backticked key's value(s) after ``key:``, else
    the backticked identifier and its dotted parts' last component."""
    out: set[str] = set()
    for chunk in re.findall(r"`([^`]+)`", cell):
        if ": " in chunk:
            value = chunk.split(": ", 1)[1]
            out.update(w for w in re.split(r"[^\w]+", value) if w and not w.isdigit())
            out.add(chunk.split(": ", 1)[0].split(".")[-1])
        else:
            words = [w for w in re.split(r"[^\w]+", chunk) if w]
            out.update(words[-1:])
            out.add(chunk.strip())
    return out - {"name", "params", "true", "false", "null"}


def test_each_rows_tests_touch_what_the_row_names():
    """A row's test must exercise its method: at least one named test's code (or a helper of its
    module it calls) names the registered name, function or config key the row gives."""
    unchecked = []
    for row in _rows():
        if len(row) != 5 or row[3].split()[0] not in ("full", "part"):
            continue
        refs, wanted = _test_refs(row[4]), {w.lower() for w in _row_names(row[2])}
        if not refs or not wanted:
            continue
        used = [{u.lower() for u in _names_used(path, name)} for path, name in refs]
        if not any(wanted & names for names in used):
            unchecked.append(f"{row[0]}: {sorted(wanted)} in none of {row[4]}")
    assert not unchecked, "\n".join(unchecked)
