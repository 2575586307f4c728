"""The suite's own set-up: conftest.py's XDIST_GROUPS reach pytest-xdist (the Ray modules must
not share the machine). pytest-xdist 3.8 groups a test by rewriting ``item._nodeid``, which pytest
9.2 no longer reads: every group was then silently dropped, hence pyproject's ``pytest<9.2``."""

from __future__ import annotations

import pytest


def test_this_modules_group_reached_pytest_xdist(request: pytest.FixtureRequest) -> None:
    if not getattr(request.config.option, "loadgroup", False):  # set on the workers of -n N
        pytest.skip("not run by pytest-xdist with --dist loadgroup")
    assert request.node.nodeid.endswith("@self_check"), (
        f"pytest-xdist did not apply conftest.py's xdist_group to {request.node.nodeid}: this "
        "pytest and pytest-xdist do not work together (pyproject.toml pins them)"
    )
