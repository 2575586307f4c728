"""The training spine trains exactly as before its reorganisations (issues 24 and 46): the
per-step metrics and sampled completions of small runs recorded from the old code
(:mod:`spine_reference`) are reproduced: bitwise on the machine that recorded each (CPU model,
a digest of its flags, torch), to within float rounding on another (1e-4 relative or 1e-6 absolute, the same completions)."""

from __future__ import annotations

import json
import re

import pytest
from spine_reference import DATA, compare, configs, machine, run

RECORDED = json.loads(DATA.read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(configs(DATA)))
def test_reference_metrics_are_reproduced(tmp_path, name):
    exact = RECORDED["machines"][name] == machine()
    problems = compare(RECORDED["runs"][name], run(name, tmp_path / name), exact)
    assert not problems, "\n".join(problems[:20])


def test_every_reference_run_names_the_machine_that_recorded_it():
    """The bitwise comparison can happen: each run's machine is written as :func:`machine`
    writes it (the CPU, ``(flags <digest>)``, the torch build)."""
    assert set(RECORDED["machines"]) == set(RECORDED["runs"]) == set(configs(DATA))
    for name, recorded in RECORDED["machines"].items():
        assert re.fullmatch(r".+ \(flags [0-9a-f]{16}\) \| torch .+", recorded), name
