"""Tests of any form judged where the solution cannot reach the verdict: a checker process
that runs the tests and a solution process that only answers calls, connected by two pipes.

:mod:`rlvr.rewards.verdict` splits the common assert forms statically. Snippets it cannot split
(helper definitions, loops and comprehensions over calls, HumanEval's ``def check(candidate):
...`` followed by ``check(f)``, objects whose methods a test calls in turn) run here:

* the *solution process* (``_serve_harness.py``) executes the solution, sends the names it
  defines, then answers requests: call this name or object with these arguments, or read this
  attribute. Arguments and answers are plain data (:mod:`rlvr.rewards._plain`, exact builtin
  types); anything else stays in the solution process and the checker gets an opaque handle;
* the *checker process* (``_remote_check_harness.py``) never holds the solution. It binds each
  of the solution's names to a stand-in that forwards calls, runs the test snippets in order in
  one namespace, and reports a line per test on its own stdout, which only the trusted parent
  reads.

Both are sandboxed runs (:func:`rlvr.sandbox.run_python`, each its own uid, file view,
control group), started together and sharing the sample's wall-time budget. Whatever the
solution does in its process (patching builtins, frames, ``gc``, ``atexit``, forking, writing
lines that look like results, answering out of turn) can only change the answers it gives,
which is what any program chooses anyway: an object whose ``__eq__`` always succeeds never
reaches the checker (it gets a handle that equals only itself), the expected values are never
in the solution's process (it sees only the arguments of the calls), and the verdict is
written by a process it cannot reach.

Limits: a test may pass only plain data (or the solution's own objects) to the solution, so a
test that passes a lambda or its own class instance to the solution fails; names of the
solution that shadow builtins are not visible to the tests; each call is a round trip between
two processes (tens of microseconds), so a test calling the solution a million times is slow.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from rlvr.rewards.harnesses import harness_source
from rlvr.sandbox import SandboxLimits, SandboxResult, run_python

SOLUTION_GRACE_S = 1.0
"""The solution's process outlives the checker's deadline by this much: when a test itself
runs out of time, the checker is killed, the solution sees the channel close and exits on its
own (not charged with the time); a solution stuck in a call is killed after it."""


def judge_remotely(
    code: str,
    tests: Sequence[str],
    limits: SandboxLimits,
    run_solution: Callable[..., SandboxResult] = run_python,
) -> tuple[str, SandboxResult, SandboxResult]:
    """Run ``tests`` against ``code`` in two connected sandboxes (see the module docstring).

    Args:
        code: the solution's source.
        tests: test snippets, executed in order in one namespace in the checker.
        limits: each process's limits; both start together, so ``wall_seconds`` bounds the
            whole judgement (the solution's process gets :data:`SOLUTION_GRACE_S` more).
        run_solution: runs the solution's process (:func:`run_python` or a wrapper that
            records its events).

    Returns:
        (nonce, checker result, solution result): the checker's stdout holds ``<nonce> <index>
        pass|fail <JSON message>`` lines (:func:`rlvr.rewards.code.parse_harness_output`).
    """
    nonce = secrets.token_hex(16)
    requests_r, requests_w = os.pipe()  # checker -> solution
    answers_r, answers_w = os.pipe()  # solution -> checker
    serve = {"requests": requests_r, "responses": answers_w}
    checks = {"nonce": nonce, "tests": list(tests), "requests": requests_w, "responses": answers_r}
    with ThreadPoolExecutor(1, thread_name_prefix="rlvr-solution") as pool:
        solution = pool.submit(
            run_solution,
            harness_source("_serve_harness.py"),
            limits=replace(limits, wall_seconds=limits.wall_seconds + SOLUTION_GRACE_S),
            files={
                "solution.py": code,
                "_plain.py": harness_source("_plain.py"),
                "serve.json": json.dumps(serve),
            },
            channel=(requests_r, answers_w),
        )
        checker = run_python(
            harness_source("_remote_check_harness.py"),
            limits=limits,
            files={"_plain.py": harness_source("_plain.py"), "checks.json": json.dumps(checks)},
            channel=(answers_r, requests_w),
        )
        return nonce, checker, solution.result()
