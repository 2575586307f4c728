"""Throughput of the code sandbox on a correct solution, and what each isolation layer costs.

Two measurements, both in one process, same tests, same limits, samples scored one after
another:

1. the verdict: assert tests judged in the solution's own process (one sandboxed run of
   bench/inprocess_harness.py, rlvr's harness before: forgeable) against judged outside it (a
   checker and a solution process running together, connected by pipes, rlvr.rewards.remote),
   with every layer on;
2. the layers: runs per second of a trivial program, and samples per second of the judged
   reward, as the layers are added: rlimits + uid + audit hooks only (``namespaces=False``);
   + namespaces (net, IPC, PID); + the file view (mount namespace, tmpfs); + the control
   group; + the seccomp filter (= everything, the default).

Writes bench/results/sandbox-cpu.json.

Usage: python bench/sandbox.py [--samples 40]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

from rlvr.rewards import code, remote
from rlvr.rewards.code import _run_asserts, parse_harness_output
from rlvr.rollout import describe_device
from rlvr.sandbox import cgroups, sandbox
from rlvr.sandbox.sandbox import SandboxLimits, run_python

SOLUTION = "def add(a, b):\n    return a + b\n"
TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(10, 5) == 15"]
LIMITS = SandboxLimits(wall_seconds=10.0)
LAYERS = ("namespaces", "file_view", "cgroup", "seccomp")


@contextlib.contextmanager
def layers_up_to(last: str | None) -> Iterator[bool]:
    """Turn off the layers after ``last`` in :data:`LAYERS` (None: all off); yields the
    ``namespaces`` argument for :func:`run_python`."""
    on = LAYERS[: LAYERS.index(last) + 1] if last else ()
    with contextlib.ExitStack() as stack:
        if "file_view" not in on:
            stack.enter_context(mock.patch.object(sandbox, "_view_paths", lambda: None))
        if "cgroup" not in on:
            stack.enter_context(mock.patch.object(cgroups, "create", lambda *a: None))
        if "seccomp" not in on:
            stack.enter_context(mock.patch.object(sandbox, "build_filter", lambda: None))
        yield "namespaces" in on


def rate(score_one: Callable[[], tuple[int, str]], samples: int) -> float:
    """Samples per second of ``score_one`` (after one warm-up sample)."""
    score_one()
    start = time.perf_counter()
    for _ in range(samples):
        passed, why = score_one()
        assert passed == len(TESTS), why
    return samples / (time.perf_counter() - start)


def judged(namespaces: bool) -> tuple[int, str]:
    run = _with_namespaces(namespaces)  # for the checker (remote) and the solution (code)
    with mock.patch.object(remote, "run_python", run), mock.patch.object(code, "run_python", run):
        return _run_asserts(SOLUTION, TESTS, LIMITS, time.monotonic() + 10, set())


def _with_namespaces(namespaces: bool) -> Callable[..., sandbox.SandboxResult]:
    def run(*args, **kwargs):  # noqa: ANN002, ANN003 - run_python's own signature
        return run_python(*args, **kwargs, namespaces=namespaces)

    return run


def trivial(namespaces: bool) -> tuple[int, str]:
    result = run_python("print(1)", limits=LIMITS, namespaces=namespaces)
    assert result.ok, result.stderr
    return len(TESTS), ""


def in_process() -> tuple[int, str]:
    spec = json.dumps({"nonce": "0" * 32, "tests": TESTS})
    harness = (Path(__file__).parent / "inprocess_harness.py").read_text()
    result = run_python(harness, limits=LIMITS, files={"solution.py": SOLUTION, "tests.json": spec})
    passed, first = parse_harness_output(result.stdout, "0" * 32, len(TESTS))
    return len(passed), first


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=40)
    args = parser.parse_args()
    before = rate(in_process, args.samples)
    after = rate(lambda: judged(True), args.samples)
    per_layer = {}
    for last in (None, *LAYERS):
        with layers_up_to(last) as namespaces:
            name = f"up_to_{last}" if last else "rlimits_uid_audit_hooks"
            per_layer[name] = {
                "runs_per_s_trivial": round(rate(lambda: trivial(namespaces), args.samples), 2),
                "samples_per_s_judged": round(rate(lambda: judged(namespaces), args.samples), 2),
            }
    with layers_up_to(LAYERS[-1]):
        layers = list(run_python("pass").isolation)
    full = per_layer[f"up_to_{LAYERS[-1]}"]["samples_per_s_judged"]
    base = per_layer["up_to_namespaces"]["samples_per_s_judged"]
    result = {
        "device": describe_device(),
        "samples": args.samples,
        "tests_per_sample": len(TESTS),
        "layers_in_force": layers,
        "samples_per_s_in_process": round(before, 2),
        "samples_per_s_judged_outside": round(after, 2),
        "cost_ratio_verdict": round(before / after, 2),
        "per_layer": per_layer,
        "cost_ratio_view_cgroup_seccomp": round(base / full, 2),
    }
    out = Path(__file__).parent / "results" / "sandbox-cpu.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
