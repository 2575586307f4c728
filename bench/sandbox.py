"""Throughput of the code sandbox on a correct solution: assert tests judged in the solution's
own process (before: one sandboxed run, forgeable) against judged outside it (now: a run that
evaluates the calls and a second run, without the solution, that compares; rlvr.rewards.verdict).
Both in one process, same tests, same limits, samples scored one after another.
Writes bench/results/sandbox-cpu.json.

Usage: python bench/sandbox.py [--samples 40]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rlvr.rewards.code import _run_asserts_in_process, _run_split_asserts
from rlvr.rewards.sandbox import SandboxLimits
from rlvr.rewards.verdict import split_test
from rlvr.rollout import describe_device

SOLUTION = "def add(a, b):\n    return a + b\n"
TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(10, 5) == 15"]


def rate(score_one, samples: int) -> float:
    """Samples per second of ``score_one`` (after one warm-up sample)."""
    score_one()
    start = time.perf_counter()
    for _ in range(samples):
        passed, why = score_one()
        assert passed == len(TESTS), why
    return samples / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=40)
    args = parser.parse_args()
    limits = SandboxLimits(wall_seconds=10.0)
    splits = [split_test(t) for t in TESTS]

    def in_process() -> tuple[int, str]:
        return _run_asserts_in_process(SOLUTION, TESTS, limits, time.monotonic() + 10)

    def judged_outside() -> tuple[int, str]:
        return _run_split_asserts(SOLUTION, splits, limits, time.monotonic() + 10)

    before, after = rate(in_process, args.samples), rate(judged_outside, args.samples)
    result = {
        "device": describe_device(),
        "samples": args.samples,
        "tests_per_sample": len(TESTS),
        "samples_per_s_in_process": round(before, 2),
        "samples_per_s_judged_outside": round(after, 2),
        "cost_ratio": round(before / after, 2),
    }
    out = Path(__file__).parent / "results" / "sandbox-cpu.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
