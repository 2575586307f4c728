"""Agent episodes: token-exact chats, KV reuse across turns, budgets, tool errors, and
episodes in the trainer (one-turn episodes == today's GRPO, credit across turns, resume)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from test_trainer import COMPARED, tiny_config

from rlvr.config import build_config
from rlvr.data import Problem
from rlvr.envs import EnvError, StepResult
from rlvr.envs.agent import counts, episode_metrics
from rlvr.envs.chat import ChatRenderer, TemplateError
from rlvr.envs.episodes import Budget, Episode, EpisodeContext, Faults, run_episodes
from rlvr.envs.tool_env import ToolEnv
from rlvr.envs.tools import make_tool
from rlvr.logging import read_metrics
from rlvr.models import stop_token_ids
from rlvr.policy import completion_logprobs, make_batch
from rlvr.rollout import SamplingParams, TorchEngine
from rlvr.rollout.torch_engine import KVSession
from rlvr.rollout.turns import ReprefillSession, TurnSample
from rlvr.trainer import train

SMOL = "smollm2-135m-instruct"
PROBLEMS = [Problem("p0", "What is 6 * 7?", "42"), Problem("p1", "What is 2 + 3?", "5")]


class ScriptedSession:
    """A TurnSession that 'samples' scripted ids: ``actions[e][t]`` for episode e's turn t (cut
    to the turn's budget); records the budgets and observations it is given."""

    def __init__(self, actions: list[list[list[int]]]) -> None:
        self.actions, self.live, self.turn = actions, list(range(len(actions))), 0
        self.budgets: list[list[int]] = []
        self.observations: list[list[list[int]]] = []

    def sample(self, sampling, keys, budgets) -> TurnSample:
        self.budgets.append(list(budgets))
        full = [self.actions[e][self.turn] for e in self.live]
        ids = [a[:b] for a, b in zip(full, budgets, strict=True)]
        finished = [len(a) <= b for a, b in zip(full, budgets, strict=True)]
        return TurnSample(ids, [[-0.5] * len(x) for x in ids], finished, 0.0)

    def extend(self, keep, observations) -> None:
        self.live = [self.live[r] for r in keep]
        self.observations.append(observations)
        self.turn += 1

    def close(self) -> None:
        self.closed = True


class Script:
    """Answers every action with ``feedback[t]`` (a user message) and ends after ``turns``."""

    def __init__(self, turns: int = 3, feedback: str = "Result {t}.") -> None:
        self.turns, self.feedback = turns, feedback

    def reset(self, problem, seed):
        self.t = 0
        return problem.messages()

    def step(self, action_text):
        self.t += 1
        text = self.feedback.format(t=self.t)
        done = self.t >= self.turns
        return StepResult([{"role": "user", "content": text}], float(self.t), done, info={})


DEFAULT_BUDGET = Budget(4, 512, 256)


class Uneven(Script):
    """Observations whose length depends on the action (rows resume with different lengths)."""

    def step(self, action_text):
        result = super().step(action_text)
        result.messages[0]["content"] += " ok" * (len(action_text) % 5)
        return result


def _play(
    tok, actions, make_env, budget=DEFAULT_BUDGET, problems=PROBLEMS[:1], n=None, faults=None
):
    session = ScriptedSession(actions)
    renderer = ChatRenderer(tok, stop_token_ids=stop_token_ids(tok))
    renderer.check()
    sampling = SamplingParams(max_new_tokens=64, stop_token_ids=stop_token_ids(tok))
    n = n or len(actions) // len(problems)
    prompts, episodes = run_episodes(
        EpisodeContext(
            problems,
            n,
            sampling,
            torch.arange(len(actions)),
            [0] * len(problems),
            renderer,
            lambda ids: tok.decode(ids, skip_special_tokens=True),
            budget,
            faults or Faults(),
        ),
        lambda p, k: session,
        make_env,
    )
    return session, prompts, episodes


def _ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def test_episode_tokens_are_the_chat_template_of_the_whole_conversation(smol_tok):
    tok, end = smol_tok, smol_tok.convert_tokens_to_ids("<|im_end|>")
    texts = ["Let me think.", "I will compute 6 * 7.", "Answer: 42"]
    plain = [_ids(tok, t) + [end] for t in texts]
    # "hello world" as h + ello + world: decodes to text whose own encoding is other ids
    unstable = tok.convert_tokens_to_ids(["h", "ello", "Ġworld"])
    assert _ids(tok, tok.decode(unstable)) != unstable
    odd = [plain[0], unstable + [end], plain[2]]
    _, prompts, (ep, ep_odd) = _play(tok, [plain, odd], Script)
    # the trainer's tokens are the template's rendering of the whole chat (its last message,
    # the feedback after the final action, follows no action and is not trained on)
    whole = tok.apply_chat_template(ep.messages[:-1], tokenize=False)
    assert prompts[0] + ep.completion_ids + _ids(tok, "\n") == _ids(tok, whole)
    # the loss mask covers exactly the sampled ids
    sampled = [i for i, m in zip(ep.completion_ids, ep.action_mask, strict=True) if m]
    assert sampled == [i for a in plain for i in a]
    assert sum(ep.action_mask) == sum(map(len, plain)) and ep.logprobs.count(-0.5) == sum(
        map(len, plain)
    )
    # a decode-unstable action survives untouched, between the same observations
    start = len(plain[0]) + ep_odd.action_mask[len(plain[0]) :].index(1)
    assert ep_odd.completion_ids[start : start + len(unstable) + 1] == unstable + [end]
    assert ep.turn_rewards == [1.0, 2.0, 3.0] and ep.terminated and not ep.truncated


def assert_tokens_are_the_template(tok, make_env, texts, problem=PROBLEMS[0]) -> Episode:
    """Play ``make_env``'s environment with the scripted actions ``texts`` (each ended with
    ``<|im_end|>``) and check the episode token for token: prompt + episode tokens are the chat
    template of the whole conversation up to the last action, and the loss mask covers exactly
    the sampled ids. Returns the episode (for the ecosystems' tests)."""
    end = tok.convert_tokens_to_ids("<|im_end|>")
    actions = [_ids(tok, t) + [end] for t in texts]
    _, prompts, (ep,) = _play(tok, [actions], make_env, Budget(len(texts), 1024, 512), [problem])
    last = max(i for i, m in enumerate(ep.messages) if m["role"] == "assistant")
    whole = tok.apply_chat_template(ep.messages[: last + 1], tokenize=False)
    assert prompts[0] + ep.completion_ids + _ids(tok, "\n") == _ids(tok, whole)
    sampled = [i for i, m in zip(ep.completion_ids, ep.action_mask, strict=True) if m]
    assert sampled == [i for a in actions[: ep.num_turns] for i in a]
    return ep


def assert_trains_and_evaluates(cfg: dict) -> list[dict]:
    """Train ``cfg`` (an agent run of 2 steps on the tiny model), then ``rlvr eval`` its latest
    checkpoint with 2 episodes per held-out problem: success, pass@k over episodes and turns are
    reported, and every episode's transcript is kept. Returns the eval's records."""
    from rlvr.evaluation import evaluate
    from rlvr.evaluation.harness import load_records

    run = Path(cfg["logging"]["run_dir"])
    train(build_config(cfg))
    assert [r["step"] for r in read_metrics(run) if "policy/loss" in r] == [1, 2]
    summary = evaluate(run, n=2, k=[1, 2], progress=False)
    assert {"pass@1", "pass@2", "turns_mean"} <= set(summary["metrics"])
    records = load_records(Path(summary["out_dir"]))
    assert len(records) == 2 * summary["n_prompts"]
    assert all(json.loads(r["transcript"]) for r in records)
    return records


def test_actions_without_their_stop_token_get_the_turn_closed_as_observation(smol_tok):
    tok = smol_tok
    actions = [[_ids(tok, "No stop token here"), _ids(tok, "Answer: 42")]]
    _, prompts, (ep,) = _play(tok, actions, lambda: Script(turns=2))
    whole = tok.apply_chat_template(ep.messages[:-1], tokenize=False)
    assert (
        prompts[0] + ep.completion_ids
        == _ids(tok, whole)[: len(prompts[0]) + len(ep.completion_ids)]
    )
    observation = [i for i, m in zip(ep.completion_ids, ep.action_mask, strict=True) if not m]
    assert tok.decode(observation).startswith("<|im_end|>\n<|im_start|>user\nResult 1.")


def test_a_template_that_rewrites_earlier_turns_is_refused(smol_tok):
    class Rewriting:
        """Renders only the last two messages, like templates that drop past reasoning."""

        def __init__(self, tok):
            self.tok = tok

        def apply_chat_template(self, messages, **kwargs):
            return self.tok.apply_chat_template(messages[-2:], **kwargs)

        def __getattr__(self, name):
            return getattr(self.tok, name)

    renderer = ChatRenderer(Rewriting(smol_tok), stop_token_ids=stop_token_ids(smol_tok))
    with pytest.raises(TemplateError, match="not prefix-preserving"):
        renderer.check()


def test_budgets_truncate_and_count(smol_tok):
    tok, end = smol_tok, smol_tok.convert_tokens_to_ids("<|im_end|>")
    long_action = _ids(tok, " word" * 40) + [end]
    # max_turns: the environment would go on; the episode is cut after 2 actions
    _, _, (ep,) = _play(tok, [[[1, end]] * 5], lambda: Script(turns=9), Budget(2, 512, 256))
    assert ep.num_turns == 2 and ep.truncated and not ep.terminated
    assert ep.completion_ids[-1] == end  # the last observation is not appended
    # max_episode_tokens: each action may use what is left, then the episode ends
    session, _, (ep,) = _play(tok, [[long_action] * 3], lambda: Script(turns=9), Budget(4, 70, 256))
    assert session.budgets[0] == [64]  # rollout max_new_tokens caps the first
    assert session.budgets[1][0] == 70 - 41 - len(session.observations[0][0])
    assert ep.truncated and not ep.finished and len(ep.completion_ids) == 70
    # max_observation_tokens: a long observation is cut (marked) and counted
    long_feedback = "Result {t}: " + "blah " * 200
    _, _, (ep,) = _play(
        tok, [[[1, end]] * 3], lambda: Script(feedback=long_feedback), Budget(4, 2048, 40)
    )
    observation = [i for i, m in zip(ep.completion_ids, ep.action_mask, strict=True) if not m]
    assert ep.observations_cut == 2 and len(observation) <= 2 * 40
    assert "[truncated]" in ep.messages[2]["content"]


def _boom(x: int) -> int:
    """Raise always.

    Args:
        x: ignored.
    """
    raise RuntimeError("the tool broke")


def test_malformed_and_failing_tool_calls_are_counted_not_fatal(smol_tok):
    from rlvr.envs.calc import calc

    tok, end = smol_tok, smol_tok.convert_tokens_to_ids("<|im_end|>")
    texts = [
        "<tool_call>{not json</tool_call>",
        '<tool_call>{"name": "nope", "arguments": {}}</tool_call>',
        '<tool_call>{"name": "_boom", "arguments": {"x": 1}}</tool_call>',
        '<tool_call>{"name": "calc", "arguments": {"expression": "6 * 7"}}</tool_call>',
        "Answer: 42",
    ]
    tools = [make_tool(calc), make_tool(_boom)]
    actions = [[_ids(tok, t) + [end] for t in texts]]
    _, _, (ep,) = _play(tok, actions, lambda: ToolEnv(tools), Budget(6, 2048, 256))
    assert ep.tool_calls == 4 and ep.tool_errors == 3 and ep.invalid_actions == 3
    assert ep.turn_rewards == [0.0, 0.0, 0.0, 0.0, 1.0] and ep.terminated
    assert ep.messages[-3] == {"role": "tool", "content": "42"}
    assert "the tool broke" in ep.messages[6]["content"]
    metrics = episode_metrics(counts([ep]))
    assert metrics["tools/invalid_frac"] == pytest.approx(3 / 5)
    assert metrics["tools/errors"] == 3 and metrics["tools/calls"] == 4
    assert metrics["episodes/success_frac"] == 1.0


def test_kv_reuse_across_turns_equals_a_full_prefill(tiny):
    """The torch engine keeps each episode's cache across turns; the log-probs equal those of
    prefilling the whole history again each turn, and the trainer's forward (1e-5, fp32)."""
    model, tok = tiny
    engine = TorchEngine(model, tok.pad_token_id, torch.float32)
    renderer = ChatRenderer(tok, stop_token_ids=stop_token_ids(tok))
    # many stop ids: actions end at different steps, so rows leave the batch at different
    # times and resume with histories of different lengths (left padding)
    stops = (*stop_token_ids(tok), *range(100, 140))
    sampling = SamplingParams(max_new_tokens=10, stop_token_ids=stops)
    keys = torch.arange(6) * 7919

    def play(session_type):
        return run_episodes(
            EpisodeContext(
                PROBLEMS,
                3,
                sampling,
                keys,
                [0, 0],
                renderer,
                lambda ids: tok.decode(ids, skip_special_tokens=True),
                Budget(3, 200, 64),
            ),
            lambda prompts, n: session_type(engine, prompts, n),
            lambda: Uneven(turns=3),
        )

    prompts, kv = play(KVSession)
    _, full = play(ReprefillSession)
    assert [e.completion_ids for e in kv] == [e.completion_ids for e in full]
    assert all(e.num_turns == 3 for e in kv)
    assert len({sum(e.action_mask) for e in kv}) > 2 and any(e.finished for e in kv)
    for a, b in zip(kv, full, strict=True):
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-5
    batch = make_batch(
        prompts,
        [e.completion_ids for e in kv],
        tok.pad_token_id,
        [0, 0, 0, 1, 1, 1],
        [e.action_mask for e in kv],
    )
    with torch.no_grad():
        logp, _ = completion_logprobs(model, batch, 1.0, False)
    sampled = torch.zeros_like(logp)
    for i, e in enumerate(kv):
        sampled[i, : len(e.logprobs)] = torch.tensor(e.logprobs)
    mask = batch.action_mask.bool()
    assert (logp - sampled)[mask].abs().max() < 1e-5


# --- episodes in the trainer --------------------------------------------------------------------


def _steps(run_dir: Path) -> dict[int, dict]:
    return {r["step"]: r for r in read_metrics(run_dir) if "policy/loss" in r}


def test_one_turn_episodes_reproduce_grpo_exactly(tmp_path):
    plain = tiny_config(tmp_path / "plain", steps=2, checkpoint={"every": 0})
    env = tiny_config(
        tmp_path / "env",
        steps=2,
        checkpoint={"every": 0},
        env={"name": "envs_for_tests:LetterEnv", "max_episode_tokens": 12},
        reward={"function": None},  # the environment rewards: letter_fraction, as above
    )
    train(build_config(plain))
    train(build_config(env))
    a, b = _steps(tmp_path / "plain"), _steps(tmp_path / "env")
    for step in (1, 2):
        for key in COMPARED:
            assert a[step][key] == b[step][key], (step, key)
    assert b[1]["episodes/turns_mean"] == 1.0 and a[1]["policy/loss"] != 0.0


def test_gigpo_agent_run_resumes_exactly(tmp_path):
    """Three-turn episodes with turn-level credit; a run stopped after step 2 and resumed logs
    the uninterrupted run's step 3."""
    sections = {
        "env": {"name": "envs_for_tests:CountdownEnv", "max_turns": 3, "max_episode_tokens": 60},
        "algorithm": {"credit": "gigpo", "credit_gamma": 0.9},
        "train": {"lr_schedule": "constant", "warmup_steps": 0},
        "reward": {"function": None},
    }
    train(build_config(tiny_config(tmp_path / "ref", steps=3, **sections)))
    train(build_config(tiny_config(tmp_path / "run", steps=2, **sections)))
    train(build_config(tiny_config(tmp_path / "run", steps=3, **sections)), resume=tmp_path / "run")
    a, b = _steps(tmp_path / "ref"), _steps(tmp_path / "run")
    for step in (1, 2, 3):
        for key in (*COMPARED, "episodes/turns_mean", "tools/invalid_frac"):
            assert a[step][key] == b[step][key], (step, key)
    assert a[3]["episodes/turns_mean"] > 1.0 and a[3]["policy/loss"] != 0.0


def test_an_igpo_agent_run_rewards_information_gain_and_resumes_exactly(tmp_path):
    """credit: igpo from YAML keys: the player adds each turn's information gain (the policy's
    probability of the reference answer, rlvr.trainer.rollouts.InformationGain) to the turn
    rewards the learner normalises; the logged turn rewards are the environment's plus the
    gains, and a run stopped after step 1 and resumed logs the uninterrupted run's step 2."""
    from rlvr.algorithms.credit import information_gain_rewards
    from rlvr.trainer.rollouts import InformationGain, MultiTurn

    sections = {
        "env": {"name": "envs_for_tests:CountdownEnv", "max_turns": 3, "max_episode_tokens": 60},
        "algorithm": {"credit": {"name": "igpo"}},
        "train": {"lr_schedule": "constant", "warmup_steps": 0},
        "reward": {"function": None},
    }
    train(build_config(tiny_config(tmp_path / "ref", steps=2, **sections)))
    train(build_config(tiny_config(tmp_path / "run", steps=1, **sections)))
    train(build_config(tiny_config(tmp_path / "run", steps=2, **sections)), resume=tmp_path / "run")
    a, b = _steps(tmp_path / "ref"), _steps(tmp_path / "run")
    for step in (1, 2):
        for key in (*COMPARED, "episodes/turns_mean"):
            assert a[step][key] == b[step][key], (step, key)
    assert a[2]["episodes/turns_mean"] > 1.0 and a[2]["policy/loss"] != 0.0
    rows = [json.loads(x) for x in (tmp_path / "ref" / "samples.jsonl").read_text().splitlines()]
    assert any(len(r["turn_rewards"]) > 1 for r in rows)

    class Played:  # two episodes of one problem, as an agent gives them
        branching = None

        def play(self, engine, problems, n, sampling, keys):
            said = [{"role": "assistant", "content": "Answer: 7"}]
            one = Episode([5, 6, 7, 8, 9, 10], [1, 1, 0, 0, 1, 1], [0.0] * 6, [0.25, 1.0])
            two = Episode([5, 6], [1, 1], [0.0, 0.0], [0.5])
            one.messages, two.messages = said, said
            return [[1, 2, 3]], [one, two]

    class Gain(InformationGain):
        def __init__(self):
            pass

        def __call__(self, prompts, groups, episodes, problems):
            assert prompts == [[1, 2, 3]] and groups == [0, 0] and problems[0].answer == "7"
            return information_gain_rewards([e.turn_rewards for e in episodes], [[0.1, 0.3], [0.4]])

    played = MultiTurn(Played(), Gain()).play(None, [Problem("p", "q", "7")], 2, None, None)
    assert played.turn_rewards[0] == pytest.approx([0.45, 1.0]) and played.turn_rewards[1] == [0.5]
    assert played.breakdown.total == pytest.approx([1.25, 0.5])  # the environment's returns


def test_agent_runs_log_evaluate_and_report_whole_episodes(tmp_path):
    """samples.jsonl rows carry the transcript and turn rewards; rlvr eval plays episodes
    (success, pass@k, turns, tool validity; transcripts in samples.parquet); the report shows
    every turn of an episode with its reward."""
    from rlvr.evaluation import evaluate
    from rlvr.evaluation.harness import load_records
    from rlvr.evaluation.report import build_report

    env = {"name": "envs_for_tests:CountdownEnv", "max_turns": 3, "max_episode_tokens": 60}
    run = tmp_path / "run"
    train(build_config(tiny_config(run, steps=1, env=env, reward={"function": None})))
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert rows and all(len(r["turn_rewards"]) >= 1 for r in rows)
    # each step's info as the environment gave it (CountdownEnv: its anchor, the action's validity)
    assert all(len(r["step_infos"]) == len(r["turn_rewards"]) for r in rows)
    first = rows[0]["step_infos"][0]
    assert first["anchor"] == 1 and isinstance(first["action_valid"], bool)
    assert [m["role"] for m in rows[0]["transcript"][:2]] == ["user", "assistant"]
    summary = evaluate(run, n=2, k=[1, 2], progress=False)
    metrics = summary["metrics"]
    assert {"pass@2", "turns_mean", "tool_invalid_frac", "reward_mean"} <= set(metrics)
    assert 1.0 <= metrics["turns_mean"] <= 3.0
    records = load_records(Path(summary["out_dir"]))
    assert len(records) == 2 * summary["n_prompts"]
    assert json.loads(records[0]["transcript"])[1]["role"] == "assistant"
    infos = json.loads(records[0]["step_infos"])
    assert len(infos) == records[0]["turns"] and infos[0]["anchor"] == 1
    # an eval dir written before step_infos existed still loads
    import pyarrow.parquet as pq

    samples = Path(summary["out_dir"]) / "samples.parquet"
    pq.write_table(pq.read_table(samples).drop_columns(["step_infos"]), samples)
    assert "step_infos" not in load_records(Path(summary["out_dir"]))[0]
    html = build_report(run)
    assert "assistant, turn 1, reward" in html and "turns left." in html


def test_agent_configs_that_would_mislead_are_refused(tmp_path):
    base = tiny_config(tmp_path / "run", env={"name": "calculator"})  # keeps the reward function
    with pytest.raises(ValueError, match="rewarded by its environment"):
        build_config(base)
    with pytest.raises(ValueError, match="env.name: textarena"):
        build_config({"task": {"name": "textarena:GuessTheNumber-v0-raw"}})
    with pytest.raises(ValueError, match="set env.name"):
        build_config({"algorithm": {"credit": "gigpo"}})
    with pytest.raises(ValueError, match="overlong"):
        from rlvr.trainer.build import resolve_algorithm

        resolve_algorithm(
            build_config(
                {"env": {"name": "calculator"}, "algorithm": {"preset": "dapo", "credit": "gigpo"}}
            )
        )


def test_environments_that_break_the_protocol_are_named(smol_tok):
    class BadReset(Script):
        def reset(self, problem, seed):
            return "What is 6 * 7?"

    class BadInfo(Script):
        def step(self, action_text):
            return StepResult([], 1.0, True, info={"tool_calls": "two"})

    end = smol_tok.convert_tokens_to_ids("<|im_end|>")
    with pytest.raises(EnvError, match="BadReset.*reset\\(\\) gave messages"):
        _play(smol_tok, [[[end]]], BadReset)
    with pytest.raises(EnvError, match="BadInfo.*tool_calls"):
        _play(smol_tok, [[[end]]], BadInfo)


def test_tools_go_through_the_template_when_it_renders_them(smol_tok):
    """A template that renders `tools` gets the schemas; one that ignores them (SmolLM2's) gets
    the tools described in the system prompt instead."""
    import copy

    from rlvr.envs.calc import calc
    from rlvr.envs.parsers import tools_prompt

    tool = make_tool(calc)
    plain = ChatRenderer(smol_tok, [tool.schema()], tools_prompt([tool], "hermes"))
    assert not plain.native_tools
    first = plain.first_messages([{"role": "user", "content": "Hi"}])
    assert first[0]["role"] == "system" and "calc(expression: string)" in first[0]["content"]
    aware = copy.deepcopy(smol_tok)
    aware.chat_template = (
        "{% if tools %}<|im_start|>system\nTools: {{ tools | map(attribute='function.name') "
        "| join(', ') }}<|im_end|>\n{% endif %}" + smol_tok.chat_template
    )
    native = ChatRenderer(aware, [tool.schema()], tools_prompt([tool], "hermes"))
    assert native.native_tools
    assert native.first_messages([{"role": "user", "content": "Hi"}])[0]["role"] == "user"
    assert "Tools: calc" in native.render([{"role": "user", "content": "Hi"}], True)
    native.check("tool")


def test_step_infos_become_json_data_whatever_the_environment_put_in_them():
    import numpy as np

    from rlvr.envs.base import plain

    class Opaque:
        def __str__(self) -> str:
            return "opaque"

    info = {"pair": (1, np.float32(2.5)), 3: Opaque(), "t": torch.tensor(4), "ok": True, "n": None}
    assert plain(info) == {"pair": [1, 2.5], "3": "opaque", "t": 4, "ok": True, "n": None}
    assert plain(np.arange(3)) == str(np.arange(3))  # not a scalar: its text
    json.dumps(plain(info))


def test_distillation_scores_the_actions_of_agent_episodes(tmp_path):
    """On-policy distillation on multi-turn episodes: the learner's teacher scores the whole
    episode, and each action token's advantage is -(sampler - teacher); the observations the
    environment wrote get none."""
    import contextlib

    from rlvr.models import load_model
    from rlvr.trainer.backends.local import build

    env = {"name": "envs_for_tests:CountdownEnv", "max_turns": 3, "max_episode_tokens": 60}
    cfg = tiny_config(tmp_path / "run", env=env, reward={"function": None})
    cfg["algorithm"] = {"preset": "on_policy_distillation"}
    cfg["model"]["teacher"] = "tiny-random-qwen2"  # the same byte vocabulary
    cfg["rollout"]["dtype"] = "fp32"
    with contextlib.ExitStack() as stack:
        parts = build(build_config(cfg), None, stack)
        data, _ = parts.collector.collect(1)
        step = parts.learners.prepare(data)
    teacher = load_model("tiny-random-qwen2")
    i = max(range(len(data)), key=lambda k: len(data.completion_ids[k]))
    actions = torch.tensor(data.action_mask[i], dtype=torch.bool)
    assert not actions.all()  # an observation between two actions
    batch = make_batch([data.prompt_ids[int(data.group_ids[i])]], [data.completion_ids[i]], 0)
    with torch.no_grad():
        taught, _ = completion_logprobs(teacher, batch)
    want = -(torch.tensor(data.sampler_logprobs[i]) - taught[0]) * actions
    got = step.advantages[i, : len(actions)].cpu()
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    assert got[actions].abs().max() > 0.01 and not got[~actions].any()


# --- tree rollouts at turn boundaries (Tree-GRPO) ----------------------------------------------


def _tree_episodes(tiny, session_type, branching, keys, n=1):
    model, tok = tiny
    engine = TorchEngine(model, tok.pad_token_id, torch.float32)
    renderer = ChatRenderer(tok, stop_token_ids=stop_token_ids(tok))
    sampling = SamplingParams(max_new_tokens=6, stop_token_ids=stop_token_ids(tok))
    return run_episodes(
        EpisodeContext(
            PROBLEMS,
            n,
            sampling,
            keys,
            [0, 0],
            renderer,
            lambda ids: tok.decode(ids, skip_special_tokens=True),
            Budget(3, 200, 64),
            branching=branching,
        ),
        lambda prompts, k: session_type(engine, prompts, k),
        lambda: Uneven(turns=3),
    )


def test_turn_level_trees_fork_episodes_with_their_environments(tiny):
    """Branch factor 2 after turns 1 and 2: 4 leaves per tree, sharing their first turns
    (action and observation), each with its own copy of the environment (its turn counter, so
    its rewards 1, 2, 3); the first leaf is the unbranched episode of the tree's stream; the
    kept caches (KV) and re-prefilled histories give the same episodes."""
    from rlvr.envs.episodes import TurnBranching

    model, tok = tiny
    keys = torch.tensor([11, 23])
    prompts, kv = _tree_episodes(tiny, KVSession, TurnBranching(2, 2), keys)
    _, full = _tree_episodes(tiny, ReprefillSession, TurnBranching(2, 2), keys)
    _, flat = _tree_episodes(tiny, KVSession, None, keys)
    assert [e.group for e in kv] == [0] * 4 + [1] * 4
    assert [e.completion_ids for e in kv] == [e.completion_ids for e in full]
    for a, b in zip(kv, full, strict=True):
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-5
    assert all(e.turn_rewards == [1.0, 2.0, 3.0] for e in kv)  # environments copied, not shared
    assert kv[0].completion_ids == flat[0].completion_ids  # child 0 keeps the stream
    assert kv[4].completion_ids == flat[1].completion_ids
    for tree in (kv[:4], kv[4:]):
        first = tree[0].segments.count(tree[0].segments[0])  # turn 1's action + observation
        assert len({tuple(e.completion_ids[:first]) for e in tree}) == 1
        assert len({tuple(e.completion_ids) for e in tree}) == 4
        paths = [list(dict.fromkeys(e.segments)) for e in tree]
        assert [p[:2] for p in paths] == [[0, 1], [0, 1], [0, 2], [0, 2]]  # labelled as they close
        assert len({p[2] for p in paths}) == 4
    batch = make_batch(
        prompts,
        [e.completion_ids for e in kv],
        tok.pad_token_id,
        [e.group for e in kv],
        [e.action_mask for e in kv],
    )
    with torch.no_grad():
        logp, _ = completion_logprobs(model, batch, 1.0, False)
    sampled = torch.zeros_like(logp)
    for i, e in enumerate(kv):
        sampled[i, : len(e.logprobs)] = torch.tensor(e.logprobs)
    assert (logp - sampled)[batch.action_mask.bool()].abs().max() < 1e-5


class Locked(Script):
    """An environment holding a lock: not deep-copyable, no fork()."""

    def reset(self, problem, seed):
        import threading

        self.lock = threading.Lock()
        return super().reset(problem, seed)


def test_an_environment_that_cannot_be_copied_is_a_fault_at_the_branch_point(smol_tok):
    from rlvr.envs.episodes import TurnBranching

    session = ScriptedSession([[[5, 6], [7, 8]]])
    renderer = ChatRenderer(smol_tok, stop_token_ids=stop_token_ids(smol_tok))
    ctx = EpisodeContext(
        PROBLEMS[:1],
        1,
        SamplingParams(max_new_tokens=4),
        torch.arange(1),
        [0],
        renderer,
        lambda ids: smol_tok.decode(ids, skip_special_tokens=True),
        DEFAULT_BUDGET,
        branching=TurnBranching(2, 1),
    )
    with pytest.raises(EnvError, match="Locked.*fork.*raised TypeError.*give it a fork"):
        run_episodes(
            dataclasses.replace(ctx, faults=Faults(on_error="raise")),
            lambda p, k: session,
            lambda: Locked(turns=3),
        )
    # on_error: end_episode (the default): the copy's episode plays one action and ends with
    # the fault, rewarded 0; the original goes on
    session = ScriptedSession([[[5, 6], [7, 8], [9, 10]]])
    _, episodes = run_episodes(ctx, lambda p, k: session, lambda: Locked(turns=3))
    assert [e.fault is None for e in episodes] == [True, False]
    assert "fork()/deepcopy raised TypeError" in episodes[1].fault
    assert episodes[0].turn_rewards == [1.0, 2.0, 3.0] and episodes[1].turn_rewards == [1.0, 0.0]


def test_a_turn_level_tree_run_trains_and_resumes_exactly(tmp_path):
    sections = {
        "env": {"name": "envs_for_tests:CountdownEnv", "max_turns": 3, "max_episode_tokens": 60},
        "rollout": {"group_size": 2, "tree": {"branching": "turns", "depth": 1}},
        "algorithm": {"advantage": {"name": "tree_grpo"}},
        "train": {"lr_schedule": "constant", "warmup_steps": 0},
        "reward": {"function": None},
    }
    train(build_config(tiny_config(tmp_path / "ref", steps=3, **sections)))
    train(build_config(tiny_config(tmp_path / "run", steps=2, **sections)))
    train(build_config(tiny_config(tmp_path / "run", steps=3, **sections)), resume=tmp_path / "run")
    a, b = _steps(tmp_path / "ref"), _steps(tmp_path / "run")
    for step in (1, 2, 3):
        for key in (*COMPARED, "tree/leaves_per_prompt", "tokens/generated"):
            assert a[step][key] == b[step][key], (step, key)
    assert a[1]["tree/leaves_per_prompt"] > 2 and a[3]["policy/grad_norm"] > 0
