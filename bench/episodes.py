"""Agent episodes: each episode's KV cache kept across turns vs the whole history prefilled
again every turn, side by side in one process.

The job's episodes (configs/agent_calculator.yaml's environment and SmolLM2-135M-Instruct by
default, or configs/agent_guess_number.yaml's with ``--config``) are played twice from the same
streams:
- ``kv``: the torch engine's ``KVSession``, where a turn runs only its new tokens;
- ``reprefill``: ``ReprefillSession`` over the same engine's ``generate``, where every turn
  prefills prompt + all earlier turns. This is what an engine without a kept cache does, and
  what rlvr did for a multi-turn chat before;
- ``endpoint``: a program plays the same environment by calling the policy through the openai
  client at rlvr's recording endpoint (:mod:`rlvr.envs.harness`, what an outside agent harness
  gets): HTTP, JSON and the stitching of every call, each call prefilled whole.

Both sessions draw every episode from the same streams, in fp32. Their logits agree up to
rounding (the tests check 1e-5 on a tiny model), so almost every episode is the same token for
token; a sample that falls at a near-tie can part. The share of identical episodes is
reported, and so is the speed ratio both in wall time and in sampled tokens per second. The
re-prefill also prefills each of a group's G prompts apart, where the kept cache prefills a
prompt once per group. Time is the median of ``--repeats`` runs, after one warm-up run each.
Writes bench/results/episodes-{device}.json.

Usage: python bench/episodes.py [--config configs/agent_calculator.yaml] [--problems 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import yaml

from rlvr.config import build_config
from rlvr.data import build_task
from rlvr.envs.agent import build_agent, episode_seed
from rlvr.envs.episodes import EpisodeContext, Faults, run_episodes
from rlvr.envs.harness import AgentOutcome, play_recorded
from rlvr.models import load_model, load_tokenizer, stop_token_ids
from rlvr.rollout import SamplingParams, TorchEngine, describe_device
from rlvr.rollout.streams import group_keys, stream_key
from rlvr.rollout.torch_engine import KVSession
from rlvr.rollout.turns import ReprefillSession

BENCH = Path(__file__).parent
SESSIONS = {"kv": KVSession, "reprefill": ReprefillSession, "endpoint": None}


class EnvProgram:
    """Plays an rlvr environment by calling the model at the endpoint (any agent loop does)."""

    def __init__(self, make_env, max_turns: int) -> None:
        self.make_env, self.max_turns = make_env, max_turns

    def play(self, problem, seed, endpoint):
        from openai import OpenAI

        client = OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)
        env = self.make_env()
        messages = env.reset(problem, seed)
        total = 0.0
        for _ in range(self.max_turns):
            reply = client.chat.completions.create(model=endpoint.model, messages=messages)
            messages = [
                *messages,
                {"role": "assistant", "content": reply.choices[0].message.content},
            ]
            result = env.step(messages[-1]["content"])
            total += result.reward
            if result.done:
                break
            messages += result.messages
        return AgentOutcome(total)


def play(agent, engine, session, problems, n, sampling):
    """One batch of episodes; (seconds, episodes)."""
    keys = group_keys(stream_key(7), len(problems), n)
    seeds = [episode_seed(p) for p in problems]
    start = time.perf_counter()
    ctx = EpisodeContext(
        problems, n, sampling, keys, seeds, agent.renderer, agent.decode, agent.budget, Faults()
    )
    if session is None:
        program = lambda: EnvProgram(agent.make_env, agent.budget.max_turns)  # noqa: E731
        _, episodes = play_recorded(ctx, engine, program)
        return time.perf_counter() - start, episodes
    _, episodes = run_episodes(ctx, lambda prompts, k: session(engine, prompts, k), agent.make_env)
    return time.perf_counter() - start, episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="configs/agent_calculator.yaml")
    parser.add_argument("--problems", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cfg = build_config(yaml.safe_load(Path(args.config).read_text()))
    tokenizer = load_tokenizer(cfg.model.name)
    policy = load_model(cfg.model.name, torch.float32)
    engine = TorchEngine(policy, tokenizer.pad_token_id, torch.float32)
    task = build_task(cfg.task)
    agent = build_agent(cfg, task, tokenizer)
    problems = [task.train_problem(i) for i in range(args.problems)]
    n = cfg.rollout.group_size
    sampling = SamplingParams(
        temperature=cfg.rollout.temperature,
        max_new_tokens=cfg.rollout.max_new_tokens,
        stop_token_ids=stop_token_ids(tokenizer),
    )
    results, tokens = {}, {}
    for name, session in SESSIONS.items():
        play(agent, engine, session, problems, n, sampling)  # warm-up
        runs = [play(agent, engine, session, problems, n, sampling) for _ in range(args.repeats)]
        episodes = runs[0][1]
        tokens[name] = [e.completion_ids for e in episodes]
        sampled = sum(sum(e.action_mask) for e in episodes)
        seconds = statistics.median(r[0] for r in runs)
        results[name] = {
            "seconds_median": seconds,
            "sampled_tokens": sampled,
            "sampled_tokens_per_s": sampled / seconds,
            "turns_mean": sum(e.num_turns for e in episodes) / len(episodes),
            "episode_tokens_mean": sum(len(e.completion_ids) for e in episodes) / len(episodes),
        }
        print(name, json.dumps(results[name]))
    pairs = list(zip(tokens["kv"], tokens["reprefill"], strict=True))
    same = sum(a == b for a, b in pairs) / len(pairs)
    speedup = results["reprefill"]["seconds_median"] / results["kv"]["seconds_median"]
    rate = results["kv"]["sampled_tokens_per_s"] / results["reprefill"]["sampled_tokens_per_s"]
    served = list(zip(tokens["reprefill"], tokens["endpoint"], strict=True))
    same_served = sum(a == b for a, b in served) / len(served)
    endpoint_cost = results["endpoint"]["seconds_median"] / results["reprefill"]["seconds_median"]
    out = {
        "device": describe_device("cpu"),
        "config": args.config,
        "episodes": len(problems) * n,
        "dtype": "fp32",
        "identical_episodes_frac": same,
        "kv_speedup_over_reprefill": speedup,
        "kv_tokens_per_s_over_reprefill": rate,
        "endpoint_identical_to_reprefill_frac": same_served,
        "endpoint_seconds_over_reprefill": endpoint_cost,
        "runs": results,
    }
    print(
        f"kv cache kept across turns: {speedup:.2f}x the re-prefill's speed ({rate:.2f}x in "
        f"sampled tokens/s); identical episodes: {same:.0%}"
    )
    print(
        f"a program at the recording endpoint: {endpoint_cost:.2f}x the re-prefill's time; "
        f"episodes identical to it: {same_served:.0%}"
    )
    path = BENCH / "results" / "episodes-cpu.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
