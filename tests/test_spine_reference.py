"""The training spine trains exactly as before its reorganisation (issue 24): the per-step
metrics and sampled completions of small runs recorded from the old code
(:mod:`spine_reference`) are reproduced: bitwise on the machine that recorded them (CPU
model and flags), to within float rounding on another."""

from __future__ import annotations

import json

import pytest
from spine_reference import DATA, compare, configs, machine, run

RECORDED = json.loads(DATA.read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(configs(DATA)))
def test_reference_metrics_are_reproduced(tmp_path, name):
    exact = RECORDED["machine"] == machine()
    problems = compare(RECORDED["runs"][name], run(name, tmp_path / name), exact)
    assert not problems, "\n".join(problems[:20])
