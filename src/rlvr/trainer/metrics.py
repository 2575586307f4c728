"""What the loop records of a step: the metrics of its samples (rewards, lengths, groups,
categories), its ``samples.jsonl`` rows, the staleness of its batch, and the one-line summary of
an evaluation."""

from __future__ import annotations

import sys
from typing import Any

import torch

from rlvr import algorithms
from rlvr.config import Config
from rlvr.curriculum import per_category
from rlvr.data import Problem, Task, answer_extractor, data_stats
from rlvr.grading import answer_entropy_within_groups
from rlvr.policy import trie_rows
from rlvr.trainer.batch import Samples


def note(text: str) -> None:
    """A line on stderr, never wrapped (so logs can be grepped and commands copied)."""
    print(text, file=sys.stderr, flush=True)


def warn(text: str) -> None:
    note(f"warning: {text}")


def step_metrics(
    data: Samples, task: Task, threshold: float, tree_forward: bool = False
) -> dict[str, float]:
    """Reward, length, group and per-category statistics of one step's samples (answers as the
    task's verifier reads them); a sample is correct (``reward/accuracy``) when its reward is
    at least ``threshold`` (``eval.reward_threshold``, as a held-out sample judged by the
    reward). The batch's tokens: ``tokens/completions`` (the completions' tokens) and
    ``tokens/trained`` (the completion tokens the training forward runs: under the tree forward,
    ``tree_forward``, the nodes of each prompt's prefix trie, as many as it runs when a
    prompt's leaves share a micro-batch; split across micro-batches a shared segment runs once
    in each), with the trees' counts (:func:`tree_metrics`). What was sampled, kept or not,
    is the collector's ``tokens/generated`` (:func:`generated_tokens`). With expert traces
    (``algorithm.expert``) these describe the policy's samples, and ``expert/*`` the traces."""
    expert: dict[str, float] = {}
    if data.expert is not None:  # LUFFY's traces: their own metrics; the rest is the policy's
        traces = data.select(torch.nonzero(data.expert).flatten())
        expert["expert/traces"] = float(len(traces))
        if len(traces):
            expert["expert/reward_mean"] = traces.rewards.mean().item()
        data = data.sampled()
    rewards, group_ids = data.rewards, data.group_ids
    if len(data) == 0:  # no group passed the selector: nothing sampled is kept
        return {"rollout/tokens_per_s": data.tokens_per_s}
    lengths = torch.tensor([len(c) for c in data.completion_ids], dtype=torch.float)
    extract = answer_extractor(task)
    problems = [data.problems[int(g)] for g in group_ids]
    answers = [extract(text, p) for text, p in zip(data.texts, problems, strict=True)]
    metrics = {
        "reward/mean": rewards.mean().item(),
        "reward/std": rewards.std().item() if len(rewards) > 1 else 0.0,
        "reward/accuracy": (rewards >= threshold).float().mean().item(),
        "response/length_mean": lengths.mean().item(),
        "response/length_max": lengths.max().item(),
        "response/truncated_frac": 1 - sum(data.finished) / len(data.finished),
        "response/answer_entropy": answer_entropy_within_groups(answers, group_ids),
        **{f"groups/{k}": v for k, v in algorithms.group_stats(rewards, group_ids).items()},
        "rollout/tokens_per_s": data.tokens_per_s,
    }
    metrics["tokens/completions"] = lengths.sum().item()
    metrics["tokens/trained"] = lengths.sum().item()
    if data.columns.get("tree_segments") is not None:
        metrics.update(tree_metrics(data.columns["tree_segments"], group_ids))
    if tree_forward:
        groups = group_ids.tolist()
        prompt_len = [len(p) for p in data.prompt_ids]
        rows, _ = trie_rows(groups, prompt_len, data.completion_ids)
        metrics["tokens/trained"] = float(sum(len(tokens) for _, tokens, _ in rows))
    right = rewards >= threshold  # as reward/accuracy: lengths of right and wrong answers apart
    for name, rows in (("right", right), ("wrong", ~right)):
        if bool(rows.any()):  # Dr. GRPO: length normalisation lets wrong answers grow
            metrics[f"response/length_{name}_mean"] = lengths[rows].mean().item()
    for category, values in per_category(data.problems, rewards, group_ids).items():
        if category:  # a task with categories: what each one gets and scores
            metrics[f"category/{category}/reward"] = sum(values) / len(values)
            metrics[f"category/{category}/samples_frac"] = len(values) / len(rewards)
    return {**metrics, **expert}


def tree_metrics(token_segments: list[list[int]], group_ids: torch.Tensor) -> dict[str, float]:
    """A batch's tree rollouts (``tree_segments``: each completion token's segment label):
    ``tree/leaves_per_prompt`` and ``tree/branch_points`` (segments with two children or
    more, per prompt)."""
    groups = group_ids.tolist()
    children: dict[tuple[int, int], set[int]] = {}
    for labels, g in zip(token_segments, groups, strict=True):
        path = list(dict.fromkeys(labels))
        for parent, child in zip(path, path[1:], strict=False):
            children.setdefault((g, parent), set()).add(child)
    prompts = max(len(set(groups)), 1)
    return {
        "tree/leaves_per_prompt": len(groups) / prompts,
        "tree/branch_points": sum(len(c) > 1 for c in children.values()) / prompts,
    }


def generated_tokens(table: Samples) -> float:
    """The tokens the engine sampled for a played table: each completion's sampled tokens (an
    episode's actions, not its observations), a tree's shared segment once."""
    table = table.sampled()  # expert traces were not sampled
    masks = table.action_mask or [[1] * len(c) for c in table.completion_ids]
    given = table.given_tokens  # a given prefix was not sampled either
    if given is not None and any(given):
        masks = [[0] * g + list(m[g:]) for m, g in zip(masks, given, strict=True)]
    segments = table.columns.get("tree_segments")
    if segments is None:
        return float(sum(sum(m) for m in masks))
    sampled: dict[tuple[int, int], int] = {}  # (group, segment) -> its sampled tokens
    for labels, mask, g in zip(segments, masks, table.group_ids.tolist(), strict=True):
        counts: dict[int, int] = {}
        for label, m in zip(labels, mask, strict=True):
            counts[label] = counts.get(label, 0) + m
        sampled.update({(g, label): n for label, n in counts.items()})
    return float(sum(sampled.values()))


def sample_rows(data: Samples, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` samples of a step as ``samples.jsonl`` rows."""
    rows = []
    for i in range(min(limit, len(data.texts))):
        problem = data.problems[int(data.group_ids[i])]
        row = {
            "prompt": problem.prompt,
            "answer": problem.answer,
            "completion": data.texts[i],
            "reward": data.rewards[i].item(),
            "terms": {label: values[i] for label, values in data.terms.items()},
        }
        if reasons := data.reasons(i):  # a judge's reply, a failed test: why it scored so
            row["reasons"] = reasons
        if data.transcripts is not None:  # agent episodes: the whole chat, reward per turn
            row["transcript"] = data.transcripts[i]
            row["turn_rewards"] = data.turn_rewards[i] if data.turn_rewards else []
            if data.infos is not None:  # each step's info: the environment's own details
                row["step_infos"] = data.infos[i]
        rows.append(row)
    return rows


def staleness(version: int, data: Samples, bound: int) -> dict[str, float]:
    """``staleness/mean`` and ``/max``: policy versions between the learner (before this step's
    update) and the policy that sampled the batch, over its samples; more than ``bound``
    (``rollout.max_staleness``, plus ``sync_every`` - 1 for a semi-online snapshot) is a bug,
    never trained on."""
    lag = version - data.policy_version
    if not 0 <= lag <= bound:
        raise RuntimeError(
            f"a batch sampled by policy version {data.policy_version} reached the learner at "
            f"version {version}: staleness {lag} outside [0, {bound}] (rollout.max_staleness, sync_every)"
        )
    return {"staleness/mean": float(lag), "staleness/max": float(lag)}


def data_notes(task: Task, first_step: bool) -> dict[str, float]:
    """What loading the data left out (file and dataset tasks), printed once and returned for
    the run's first metrics row."""
    stats: dict[str, float] = data_stats(task) if first_step else {}
    notes = {
        "data/duplicates_dropped": "duplicate rows dropped before the split",
        "data/long_prompts_dropped": "prompts over the length limit dropped",
        "data/eval_rows_unused": "held-out rows beyond task.n_eval (neither trained nor evaluated)",
    }
    for key, text in notes.items():
        if stats.get(key):
            note(f"note: {text}: {stats[key]}")
    return stats


def held_out(cfg: Config, task: Task) -> list[Problem]:
    """The problems evaluated (``eval.n_prompts`` of the task's held-out split), with a note
    when evaluation is asked for and the task has none."""
    problems = task.eval_problems()[: cfg.eval.n_prompts]
    if not problems and (cfg.eval.before or cfg.eval.after or cfg.eval.every):
        note(
            "note: the task has no held-out problems (task.eval_fraction, eval_split or n_eval): "
            "held-out evaluation is skipped"
        )
    return problems


def fmt_eval(result: dict[str, float]) -> str:
    name = "success" if "eval/greedy_turns_mean" in result else "accuracy"
    parts = [f"greedy {name} {result['eval/greedy_accuracy']:.1%}"]
    if "eval/sampled_accuracy" in result:
        parts.append(f"sampled {name} {result['eval/sampled_accuracy']:.1%}")
    if "eval/greedy_reward_mean" in result:  # judged by the reward (eval.judge: reward)
        parts.append(f"greedy mean reward {result['eval/greedy_reward_mean']:.3f}")
    parts.append(f"mean length {result['eval/greedy_length_mean']:.0f} tokens")
    if "eval/greedy_turns_mean" in result:  # agent episodes
        parts.append(f"{result['eval/greedy_turns_mean']:.1f} turns")
        parts.append(f"invalid actions {result['eval/greedy_tool_invalid_frac']:.1%}")
    return ", ".join(parts)
