"""The code reward's harness scripts, as source text for :func:`rlvr.sandbox.run_python`.

``_call_harness.py`` (function-call tests, :mod:`rlvr.rewards.code`), ``_serve_harness.py`` and
``_remote_check_harness.py`` (the solution and checker processes of :mod:`rlvr.rewards.remote`)
and ``_plain.py`` (the plain-data codec they share, :mod:`rlvr.rewards.verdict`) lie next to this
file; each runs inside the sandbox as a script, never imported there.
"""

from __future__ import annotations

import functools
from pathlib import Path


@functools.cache
def harness_source(name: str) -> str:
    """The text of the harness file ``name`` (e.g. ``"_plain.py"``) of :mod:`rlvr.rewards`."""
    return Path(__file__).with_name(name).read_text()
