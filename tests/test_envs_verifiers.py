"""verifiers tasksets (verifiers 0.4, v1) as rlvr tasks and environments: problems from the
taskset's tasks, rewards from its own reward functions on the trace its rollout would build,
two tasksets trained 2 steps (as a task, and as an environment) and evaluated with rlvr eval."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("verifiers.v1", reason="verifiers is not installed (make test installs it)")

from agents_for_tests import ScriptedReplies, episode_context  # noqa: E402
from test_envs_episodes import assert_tokens_are_the_template  # noqa: E402
from test_trainer import tiny_config  # noqa: E402

from rlvr.config import build_config  # noqa: E402
from rlvr.data import make_task  # noqa: E402
from rlvr.envs.base import EnvError  # noqa: E402
from rlvr.envs.verifiers_env import VerifiersEnv  # noqa: E402
from rlvr.errors import DataError  # noqa: E402
from rlvr.evaluation import evaluate  # noqa: E402
from rlvr.evaluation.harness import load_records  # noqa: E402
from rlvr.logging import read_metrics  # noqa: E402
from rlvr.trainer import train  # noqa: E402

SUMS, RUBRIC = "verifiers:vf_tasksets_for_tests", "verifiers:vf_rubric_for_tests"


def test_a_taskset_gives_problems_and_scores_with_its_own_rewards():
    task = make_task(SUMS, n_eval=4)
    held_out = task.eval_problems()
    assert [p.prompt.split(" Put")[0] for p in held_out[:2]] == ["What is 1 + 1?", "What is 1 + 2?"]
    assert task.train_problem(0).id == "verifiers-vf_tasksets_for_tests-4"
    assert task.train_problem(8) == task.train_problem(0)  # 12 tasks, 4 held out: cycled
    assert task.score("so \\boxed{2}", held_out[0]) == 1.0
    assert task.score("\\boxed{3}", held_out[0]) == 0.0
    rubric = make_task(RUBRIC, n_eval=4)
    long = "The sum is two, so my final answer is \\boxed{2}."
    assert rubric.rewards(long, rubric.eval_problems()[0]) == (1.0, {"correct": 1.0, "short": 0.0})
    assert rubric.rewards("\\boxed{2}", rubric.eval_problems()[0])[0] == 1.25  # weights 1, 0.25
    with pytest.raises(DataError, match="n_eval \\(12\\) must leave some to train on"):
        make_task(SUMS, n_eval=12)
    with pytest.raises(DataError, match="could not be loaded: ModuleNotFoundError"):
        make_task("verifiers:no_such_taskset", n_eval=1)


def test_the_environment_logs_each_reward_and_needs_its_taskset():
    task = make_task(RUBRIC, n_eval=4)
    env = VerifiersEnv("vf_rubric_for_tests", task, system_prompt="Be brief.")
    first = env.reset(task.eval_problems()[1], seed=0)
    assert [m["role"] for m in first] == ["system", "user"]
    step = env.step("\\boxed{3}")
    assert (step.reward, step.terminated, step.messages) == (1.25, True, [])
    assert step.info == {"verifiers_rewards": {"correct": 1.0, "short": 1.0}, "success": True}
    with pytest.raises(EnvError, match="call reset first"):
        env.step("\\boxed{3}")
    with pytest.raises(EnvError, match="set task.name: verifiers:vf_rubric_for_tests"):
        VerifiersEnv("vf_rubric_for_tests", make_task(SUMS, n_eval=4))


def test_a_verifiers_episode_is_the_chat_template_of_its_conversation(smol_tok):
    task = make_task(SUMS, n_eval=4)
    make = lambda: VerifiersEnv("vf_tasksets_for_tests", task)  # noqa: E731
    ep = assert_tokens_are_the_template(smol_tok, make, ["\\boxed{2}"], task.eval_problems()[0])
    assert ep.turn_rewards == [1.0] and ep.terminated


@pytest.mark.parametrize(("name", "as_env"), [(SUMS, False), (RUBRIC, True)])
def test_a_taskset_trains_two_steps_and_is_evaluated(tmp_path, name, as_env):
    run = tmp_path / "run"
    sections = {"task": {"name": name, "n_eval": 4}, "reward": {"function": None}}
    if as_env:
        sections["env"] = {"name": name, "max_turns": 1, "max_episode_tokens": 16}
    train(build_config(tiny_config(run, steps=2, **sections)))
    assert [r["step"] for r in read_metrics(run) if "policy/loss" in r] == [1, 2]
    summary = evaluate(run, n=2, k=[1, 2], progress=False)
    assert {"pass@1", "pass@2"} <= set(summary["metrics"])
    records = load_records(Path(summary["out_dir"]))
    assert len(records) == 2 * summary["n_prompts"]
    if as_env:
        assert json.loads(records[0]["transcript"])[-1]["role"] == "assistant"


GUESS = "verifiers:vf_guess_for_tests"
TOOLS = "verifiers:vf_tools_for_tests"


def test_a_taskset_that_plays_the_user_runs_its_own_episodes_at_the_endpoint(tiny):
    """harness: rlvr: the taskset's own environment answers each reply (three guesses: nothing
    the tiny model says is right), every call recorded at rlvr's endpoint and stitched: the
    episode holds three sampled replies and the environment's feedback between them."""
    import torch

    from rlvr.envs.episodes import Budget
    from rlvr.envs.harness import play_recorded
    from rlvr.envs.verifiers_env import verifiers_environment
    from rlvr.rollout import TorchEngine

    model, tok = tiny
    task = make_task(GUESS, n_eval=2)
    engine = TorchEngine(model, tok.pad_token_id, torch.float32)
    _, episodes = play_recorded(
        episode_context(
            tok, [task.train_problem(0)], 2, Budget(3, 2048, 1024), 60, max_new_tokens=6
        ),
        engine,
        lambda: verifiers_environment("vf_guess_for_tests", task, harness="rlvr"),
    )
    for ep in episodes:
        assert ep.fault is None and ep.num_turns == 3 and ep.reward == 0.0
        assert ep.infos[-1]["verifiers_rewards"] == {"solved": 0.0}
        actions = [i for i, m in zip(ep.completion_ids, ep.action_mask, strict=True) if m]
        assert len(actions) == sum(ep.action_mask) and 3 <= len(actions) <= 18
        between = [i for i, m in zip(ep.completion_ids, ep.action_mask, strict=True) if not m]
        assert tok.decode(between).count("Wrong, guess again.") == 2
    with pytest.raises(EnvError, match="harness 'null'"):
        verifiers_environment("vf_guess_for_tests", task, harness="null")


def test_a_taskset_played_by_its_own_environment_trains_from_a_config(tmp_path):
    run = tmp_path / "run"
    env = {"name": GUESS, "params": {"harness": "rlvr"}, "max_turns": 3, "max_episode_tokens": 512}
    cfg = tiny_config(run, steps=2, task={"name": GUESS, "n_eval": 2}, env=env)
    cfg["reward"] = {"function": None}
    train(build_config(cfg))
    rows = read_metrics(run)
    assert [r["step"] for r in rows if "policy/loss" in r] == [1, 2]
    assert rows[0]["episodes/turns_mean"] == 3.0
    summary = evaluate(run, n=2, k=[1, 2], progress=False)  # its episodes again, held out
    assert {"pass@1", "pass@2"} <= set(summary["metrics"])
    records = load_records(Path(summary["out_dir"]))
    assert len(records) == 2 * summary["n_prompts"] and all(r["turns"] == 3 for r in records)
    roles = [m["role"] for m in json.loads(records[0]["transcript"])]
    assert roles.count("assistant") == 3 and roles.count("user") >= 3  # the env's user turns
    assert "verifiers_rewards" in records[0]["step_infos"]


class ToolCallingEngine(ScriptedReplies):
    """Scripted replies for the tools taskset: a call to a tool that does not exist, a call to
    the task's MCP ``add`` tool with the prompt's numbers, then the boxed result it returned."""

    def reply(self, text: str) -> str:
        done = text.count("<|im_start|>tool")
        if done == 0:
            return '<tool_call>\n{"name": "mul", "arguments": {"a": 1}}\n</tool_call>'
        if done == 1:  # the tool raises on this one
            call = {"name": "calc_toolset_add", "arguments": {"a": -1, "b": 1}}
            return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
        if done == 2:
            a, b = re.findall(r"compute (\d+) \+ (\d+)", text)[-1]
            call = {"name": "calc_toolset_add", "arguments": {"a": int(a), "b": int(b)}}
            return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
        result = re.findall(r"<\|im_start\|>tool\n(\d+)<\|im_end\|>", text)[-1]
        return f"\\boxed{{{result}}}"


def test_a_taskset_with_mcp_tools_calls_them_on_their_server_token_exact(smol_tok, monkeypatch):
    """harness: rlvr with a task's MCP toolset (verifiers starts its server for the episode):
    the tools go out with each call, each tool call runs on the server (an unknown one is
    answered with the error), the results come back as tool messages, and the episode is the
    chat template of the whole conversation with the sampled replies."""

    from rlvr.envs.episodes import Budget
    from rlvr.envs.harness import play_recorded
    from rlvr.envs.verifiers_env import verifiers_environment

    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))  # the toolset's server module
    tok, task = smol_tok, make_task(TOOLS, n_eval=2)
    engine = ToolCallingEngine(tok)
    problem = task.train_problem(0)
    prompts, (ep,) = play_recorded(
        episode_context(tok, [problem], 1, Budget(4, 2048, 1024), 60),
        engine,
        lambda: verifiers_environment("vf_tools_for_tests", task, harness="rlvr"),
    )
    assert ep.fault is None and ep.num_turns == 4 and ep.reward == 1.0
    assert ep.infos[-1]["verifiers_rewards"] == {"correct": 1.0}
    assert (ep.tool_calls, ep.tool_errors) == (3, 2)  # 'mul' unknown, 'add' raising, 'add'
    a, b = (int(n) for n in re.findall(r"compute (\d+) \+ (\d+)", problem.prompt)[0])
    system = tok.decode(prompts[0]).split("<|im_start|>system\n")[1].split("<|im_end|>")[0]
    assert "calc_toolset_add(a: integer, b: integer): Add two non-negative integers." in system
    raised = re.findall(
        r"<\|im_start\|>tool\n(Error: [^<]*)<\|im_end\|>", tok.decode(ep.completion_ids)
    )
    assert raised[1] == "Error: Error executing tool add"  # is_error kept (its text masked)
    chat = [
        {"role": "system", "content": system},
        {"role": "user", "content": problem.prompt},
        {"role": "assistant", "content": engine.replies[0]},
        {"role": "tool", "content": "Error: unknown tool 'mul'; available tools: calc_toolset_add"},
        {"role": "assistant", "content": engine.replies[1]},
        {"role": "tool", "content": raised[1]},
        {"role": "assistant", "content": engine.replies[2]},
        {"role": "tool", "content": str(a + b)},
        {"role": "assistant", "content": f"\\boxed{{{a + b}}}"},
    ]
    whole = tok(tok.apply_chat_template(chat, tokenize=False), add_special_tokens=False)
    newline = tok("\n", add_special_tokens=False)["input_ids"]
    assert prompts[0] + ep.completion_ids + newline == whole["input_ids"]
    sampled = [i for i, m in zip(ep.completion_ids, ep.action_mask, strict=True) if m]
    assert tok.decode(sampled).count("<tool_call>") == 3
