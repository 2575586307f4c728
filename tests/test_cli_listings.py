"""`rlvr algorithms`, `tasks`, `curricula` and `envs` never cut a name: a table when it fits, one
block per entry in a narrow terminal or a pipe."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console
from typer.testing import CliRunner

from rlvr import cli
from rlvr.algorithms import PRESETS
from rlvr.curriculum import CURRICULA
from rlvr.data import TASKS
from rlvr.envs.registry import ENVS

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
LISTINGS = {
    "algorithms": list(PRESETS),
    "tasks": list(TASKS),
    "curricula": list(CURRICULA),
    "envs": [*ENVS, "module:Class"],
}


PARTS_TITLE = "registered parts"


def _run(command: str, columns: int, *args: str) -> str:
    """The command's output; for ``algorithms``, its first listing (the presets)."""
    result = CliRunner().invoke(cli.app, [command, *args], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return ANSI.sub("", result.output).split(PARTS_TITLE)[0].rstrip(" \n") + "\n"


def test_algorithms_lists_every_registered_part() -> None:
    result = CliRunner().invoke(cli.app, ["algorithms"], env={"COLUMNS": "40"})
    parts = ANSI.sub("", result.output).split(PARTS_TITLE)[1]
    for key in ("algorithm.advantage.name", "algorithm.select.name", "algorithm.credit.name"):
        assert key in parts
    assert "pass_rate" in parts and "reward_per_token" in parts
    flat = " ".join(parts.split())  # the 40-column listing wraps
    assert (
        "algorithm.stages" in flat
        and "budgets, diver, dra, early_exit, error_correction, group_filter, guidance, hints, "
        "prefix_rl, replay"
        in flat
    )


@pytest.mark.parametrize(
    ("command", "columns"),
    [("algorithms", 80), ("algorithms", 40), ("tasks", 40), ("curricula", 40), ("envs", 40)],
)
def test_narrow_listing_has_one_block_per_entry_with_full_names(command, columns) -> None:
    out = _run(command, columns)
    assert "…" not in out and "┃" not in out  # nothing cut, no table
    entries = out.split("\n\n", 1)[1]  # after the title, which may wrap
    names = [line for line in entries.splitlines() if line and not line.startswith(" ")]
    assert names == LISTINGS[command]  # each name whole, on its own line
    assert all(len(line) <= columns for line in out.splitlines())
    assert all(line == line.rstrip() for line in out.splitlines())  # no padding in logs


def test_narrow_algorithms_block_shows_parts_and_summary() -> None:
    out = _run("algorithms", 80)
    block = out.split("\ndapo\n")[1].split("\n\n")[0]
    assert block.startswith(
        "  objective: policy_gradient  advantage: grpo  loss: token  clip: 0.2/0.28"
    )
    flat = " ".join(block.split())
    assert "aggregation: token-mean KL: -" in flat
    assert " ".join(PRESETS["dapo"].summary.split()) in flat  # wrapped, not cut


def test_wide_terminal_keeps_the_table() -> None:
    out = _run("algorithms", 200)
    names = re.findall(r"^│ (\w+)\s+│", out, flags=re.M)
    assert names == list(PRESETS) and "…" not in out
    for command in ("tasks", "curricula"):  # short names: the table fits 80 columns
        out = _run(command, 80)
        assert re.findall(r"^│ (\S+)\s+│", out, flags=re.M) == LISTINGS[command]
        assert "…" not in out


def test_one_preset_shows_every_part_at_any_width() -> None:
    wide = _run("algorithms", 80, "dapo")
    assert "│ overlong    │ buffer_frac: 0.2" in wide
    narrow = _run("algorithms", 30, "dapo")
    assert "\noverlong\n  buffer_frac: 0.2\n" in narrow and "…" not in narrow


def test_listing_on_an_80_column_console_object(monkeypatch) -> None:
    buffer = io.StringIO()
    monkeypatch.setattr(cli, "console", Console(width=80, file=buffer))
    cli._print_listing(
        "t", ["name", "kind", "about"], [["a_very_long_preset_name_indeed", "x" * 40, "[b]y"]]
    )
    lines = buffer.getvalue().splitlines()
    assert lines == ["t", "", "a_very_long_preset_name_indeed", "  kind: " + "x" * 40, "  [b]y", ""]
