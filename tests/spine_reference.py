"""Per-step metrics of small runs, recorded from the code before a reorganisation of the training
spine and kept as test data (``tests/data/spine_reference.json``), so the reorganised spine is
checked to train exactly as the old one did. The policy-gradient runs were first recorded before
issue 24, then again before issue 46 on a machine whose name the first recording lacked (the code
then reproduced the first recording within 1e-6 relative); one run of each other objective kind
(SFT, DPO, on-policy distillation) and of two estimators that need a produced signal (ReMax's
greedy rewards, AAPO's reference rewards) were added before issue 46; PPO (GAE, a value head, KL
in the reward), a run with every optional term of J(theta) at once (KL in the loss, entropy
bonus, TIS, off-policy masking, top-entropy tokens, the SFT term) and Skywork-OR1's adaptive
entropy bonus with DPPO's sampler-anchored loss were added before the learner was split into
objective kinds (issue 46, part 3); GHPO's hints, GFPO's filter, RePO's replay and Knapsack RL's
group sizes were added before the collector's draw became a list of stages (part 2). Every run
was recorded again when AdamW became fused on the CPU (issue 48: one kernel per step instead of
the multi-tensor loop); every metric stayed within 7.2e-7 of the loop's recording.

Record again (only when a change is *meant* to alter training)::

    .venv/bin/python tests/spine_reference.py [NAME ...]   # no NAME: every run

Each run is stored with the machine that computed it (:func:`machine`).
``test_spine_reference.py`` reruns every config and compares: bitwise on the CPU and torch that
recorded it, within 1e-6 relative elsewhere (other kernels sum in another order).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import torch

TESTS = Path(__file__).resolve().parent
DATA = TESTS / "data" / "spine_reference.json"
STEPS = 3
VOLATILE = ("time/", "rollout/tokens_per_s", "rollout/seconds", "lr")
"""Metrics that depend on the clock (or repeat the schedule), not on what was computed."""


def _base(run_dir: Path) -> dict[str, Any]:
    return {
        "model": {"name": "tiny-random-llama"},
        "task": {"name": "arithmetic", "level": 1, "n_eval": 8},
        "rollout": {"group_size": 4, "prompts_per_step": 2, "max_new_tokens": 12, "dtype": "fp32"},
        "reward": {"function": "rewards_for_tests:letter_fraction"},
        "algorithm": {"preset": "grpo", "beta": 0.0},
        "train": {
            "steps": STEPS,
            "lr": 1e-3,
            "micro_batch_size": 3,
            "threads": 1,
            "autocast": "fp32",
            "device": "cpu",
        },
        "eval": {"before": False, "after": False},
        "logging": {
            "run_dir": str(run_dir),
            "progress": False,
            "tensorboard": False,
            "samples_per_step": 8,
        },
        "checkpoint": {"every": 0, "save_final": False},
    }


def configs(run_dir: Path) -> dict[str, dict[str, Any]]:
    """The pinned runs: a plain task with a reference and several minibatches and epochs, DAPO's
    dynamic sampling, a group reward (TTRL's majority vote) beside a per-sample one, and a
    multi-turn agent environment with GiGPO credit, one run per objective kind, two produced
    signals, PPO, and every optional term of the policy-gradient loss."""
    plain = _base(run_dir)
    plain["algorithm"] = {"preset": "grpo", "beta": 0.04, "ppo_epochs": 2, "minibatches": 2}
    dapo = _base(run_dir)
    dapo["algorithm"] = {"preset": "dapo", "max_draws": 3}
    group = _base(run_dir)
    group["reward"] = {
        "terms": [
            {"name": "majority_vote"},
            {"name": "rewards_for_tests:letter_fraction", "weight": 0.5},
        ]
    }
    agent = _base(run_dir)
    agent["reward"] = {"function": None}
    agent["env"] = {"name": "envs_for_tests:CountdownEnv", "max_turns": 3, "max_episode_tokens": 40}
    agent["algorithm"] = {"preset": "grpo", "beta": 0.0, "credit": "gigpo"}
    sft = _base(run_dir)
    sft["algorithm"] = {"preset": "sft"}  # the arithmetic task's worked solutions
    dpo = _base(run_dir)
    dpo["task"] = {
        "name": "file",
        "path": str(TESTS.parent / "configs" / "data" / "arith_prefs.jsonl"),
        "chosen_column": "chosen",
        "rejected_column": "rejected",
        "n_eval": 4,
    }
    dpo["algorithm"] = {"preset": "dpo"}
    distill = _base(run_dir)
    distill["model"]["teacher"] = "tiny-random-qwen2"  # the same byte vocabulary
    distill["algorithm"] = {"preset": "on_policy_distillation"}
    remax = _base(run_dir)
    remax["algorithm"] = {"preset": "remax"}
    aapo = _base(run_dir)
    aapo["algorithm"] = {"preset": "aapo"}
    ppo = _base(run_dir)
    ppo["algorithm"] = {"preset": "ppo", "ppo_epochs": 2}  # GAE, a value head, KL in the reward
    terms = _base(run_dir)  # every optional term of J(theta) at once
    terms["algorithm"] = {
        "preset": "grpo",
        "beta": 0.04,
        "kl_in": "loss",
        "entropy_coef": 0.01,
        "tis_cap": 2.0,
        "off_policy_mask": 0.5,
        "top_entropy_rho": 0.5,
        "sft_coef": 0.1,
        "ppo_epochs": 2,
        "minibatches": 2,
    }
    adaptive = _base(run_dir)  # Skywork-OR1's adaptive entropy bonus, a sampler-anchored loss
    adaptive["algorithm"] = {"preset": "grpo", "entropy_target": 6.0, "policy_loss": "dppo_tv"}
    rows = {"name": "file", "path": str(TESTS / "data" / "spine_rows.jsonl"), "eval_fraction": 0.5}
    hints = _base(run_dir)  # the task's verifier: every group fails and is played hinted
    hints["reward"] = {}
    hints["rollout"]["hints"] = [0.25, 0.5]
    gfpo = _base(run_dir)
    gfpo["algorithm"] = {
        "preset": "grpo",
        "beta": 0.0,
        "group_filter": "reward_per_token",
        "group_filter_oversample": 2,
    }
    replay = _base(run_dir)  # 2 training rows: every step revisits both
    replay["task"] = rows
    replay["rollout"].update(group_size=2, replay=2, replay_threshold=0.3)
    replay["algorithm"] = {"preset": "grpo", "beta": 0.0, "tis_cap": 2.0}
    knapsack = _base(run_dir)
    knapsack["task"] = rows
    knapsack["curriculum"] = {"name": "knapsack", "params": {"threshold": 0.4, "max_size": 6}}
    return {
        "plain": plain,
        "dapo": dapo,
        "group_reward": group,
        "agent": agent,
        "sft": sft,
        "dpo": dpo,
        "distill": distill,
        "remax": remax,
        "aapo": aapo,
        "ppo": ppo,
        "terms": terms,
        "adaptive_entropy": adaptive,
        "hints": hints,
        "gfpo": gfpo,
        "replay": replay,
        "knapsack": knapsack,
    }


def machine() -> str:
    """The CPU and torch build that computed the numbers (bitwise equality is asked only there):
    the model name and a digest of the CPU's flags (:func:`rlvr.precision.cpu_identity`), since
    one name ("AMD EPYC") covers CPUs whose kernels round differently."""
    from rlvr.precision import cpu_identity

    cpu = cpu_identity()
    return f"{cpu['cpu']} (flags {cpu['flags']}) | torch {torch.__version__}"


def run(name: str, run_dir: Path) -> list[dict[str, Any]]:
    """Train config ``name`` in ``run_dir``; each step's metrics (clock-free) and samples."""
    from rlvr import train
    from rlvr.config import build_config
    from rlvr.logging import read_metrics

    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    train(build_config(configs(run_dir)[name]))
    samples: dict[int, list[str]] = {}
    with open(run_dir / "samples.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            samples.setdefault(row["step"], []).append(row["completion"])
    steps = []
    for row in read_metrics(run_dir):
        metrics = {
            k: v
            for k, v in row.items()
            if k != "step" and isinstance(v, int | float) and not k.startswith(VOLATILE)
        }
        steps.append({"step": row["step"], "metrics": metrics, "completions": samples[row["step"]]})
    return steps


def compare(recorded: list[dict], now: list[dict], exact: bool) -> list[str]:
    """Differences between a recorded run and a new one (empty: the same training)."""
    problems = []
    if [r["step"] for r in recorded] != [r["step"] for r in now]:
        return [f"steps {[r['step'] for r in recorded]} != {[r['step'] for r in now]}"]
    for old, new in zip(recorded, now, strict=True):
        if old["completions"] != new["completions"]:
            problems.append(f"step {old['step']}: other completions were sampled")
        for key, value in old["metrics"].items():
            if key not in new["metrics"]:
                problems.append(f"step {old['step']}: {key} no longer logged")
                continue
            got = new["metrics"][key]
            same = got == value or (math.isnan(got) and math.isnan(value))
            # mismatch/* and the publish check's difference: the sampler's and the learner's
            # log-probs differ by float rounding (~1e-7), which another CPU's kernels round
            # otherwise: equal to within 1e-6. Other metrics to within 1e-4 relative or 1e-6
            # absolute there: an Intel Xeon with AMX sums fp32 in another order than the AMD
            # EPYC that recorded them, and after three steps policy/loss differed by up to 6e-5
            # relative, sums that cancel to ~1e-8 (advantages/mean) by 4e-8, and one weight's
            # update rounded to nothing (policy/params_changed_frac 1 - 1.1e-5); the completions
            # sampled stay exactly the recorded ones
            noise = 1e-6
            if not same and (exact or not math.isclose(got, value, rel_tol=1e-4, abs_tol=noise)):
                problems.append(f"step {old['step']}: {key} {value!r} -> {got!r}")
    return problems


def main(names: list[str]) -> None:
    """Record the runs ``names`` (every run when empty) into :data:`DATA`, keeping the others."""
    import tempfile

    out: dict[str, Any] = (
        json.loads(DATA.read_text(encoding="utf-8")) if DATA.is_file() else {"runs": {}}
    )
    out.setdefault("machines", {})
    here = machine()
    with tempfile.TemporaryDirectory() as tmp:
        for name in names or list(configs(Path(tmp))):
            out["runs"][name] = run(name, Path(tmp) / name)
            out["machines"][name] = here
            print(f"{name}: {len(out['runs'][name])} steps", file=sys.stderr)
    DATA.parent.mkdir(exist_ok=True)
    DATA.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {DATA} on {here}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
