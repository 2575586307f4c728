"""Agent programs that call the model themselves through an OpenAI client: rlvr serves the policy
at a recording endpoint and builds each episode from the recorded token ids; a program playing an
environment this way gives the episodes rlvr's own loop gives (token for token), history rewrites
are faults, and a program trains and is evaluated from a config."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from agents_for_tests import EnvAgent
from envs_for_tests import CountdownEnv
from openai import OpenAI
from test_envs_episodes import PROBLEMS, assert_trains_and_evaluates
from test_trainer import tiny_config

from rlvr.data import Problem
from rlvr.envs.base import EnvError
from rlvr.envs.chat import ChatRenderer
from rlvr.envs.episodes import Budget, EnvFault, EpisodeContext, Faults, run_episodes
from rlvr.envs.harness import AgentOutcome, RecordingEndpoint, play_recorded
from rlvr.envs.parsers import tools_prompt
from rlvr.envs.recorded import Call, Session, episode_from_calls
from rlvr.logging import read_metrics
from rlvr.models import stop_token_ids
from rlvr.rollout import SamplingParams, TorchEngine
from rlvr.rollout.torch_engine import open_session

BUDGET = Budget(3, 120, 64)


def _parts(tiny):
    model, tok = tiny
    engine = TorchEngine(model, tok.pad_token_id, torch.float32)
    renderer = ChatRenderer(tok, stop_token_ids=stop_token_ids(tok))
    sampling = SamplingParams(max_new_tokens=10, stop_token_ids=stop_token_ids(tok))

    def decode(ids):
        return tok.decode(ids, skip_special_tokens=True)

    return engine, renderer, sampling, decode


def _two_episodes(renderer, sampling, decode, timeout_s: float) -> EpisodeContext:
    """Two episodes of the first problem (streams 0 and 1, seed 0) under :data:`BUDGET`."""
    return EpisodeContext(
        PROBLEMS[:1], 2, sampling, torch.arange(2), [0], renderer, decode, BUDGET, Faults(timeout_s)
    )


def test_a_later_call_is_stitched_onto_the_sampled_ids(tiny):
    _, tok = tiny
    renderer = ChatRenderer(tok, stop_token_ids=stop_token_ids(tok))
    first = [{"role": "user", "content": "What is 2 + 3?"}]
    session = Session("s")
    prompt = session.prompt_for(first, renderer)
    assert prompt == renderer.prompt_ids(first)
    sampled = tok("odd tokens", add_special_tokens=False)["input_ids"]  # as the policy sampled
    session.record(Call(first, prompt, sampled, [-1.0] * len(sampled), False, "odd tokens"))
    history = [*first, {"role": "assistant", "content": "odd tokens"}]
    new = [{"role": "user", "content": "Go on."}]
    stitched = session.prompt_for([*history, *new], renderer)
    assert stitched == [*prompt, *sampled, *renderer.observation_ids(history, sampled, new)]
    with pytest.raises(EnvFault, match="do not continue the episode at message 1"):
        session.prompt_for([*first, {"role": "assistant", "content": "other"}, *new], renderer)
    with pytest.raises(EnvFault, match="no new message"):
        session.prompt_for(history, renderer)


@pytest.mark.parametrize("stream", [False, True])
def test_a_program_calling_the_endpoint_plays_the_episodes_rlvrs_loop_plays(tiny, stream):
    """CountdownEnv played by rlvr's episode loop, and by a program that calls the recording
    endpoint through the openai client (streamed or not): the same tokens, the same log-probs
    (1e-5), the same returns; the program's calls reuse the sampled ids."""
    engine, renderer, sampling, decode = _parts(tiny)
    keys = torch.arange(6) * 7919
    prompts, direct = run_episodes(
        EpisodeContext(PROBLEMS, 3, sampling, keys, [0, 0], renderer, decode, BUDGET),
        lambda p, n: open_session(engine, p, n),
        CountdownEnv,
    )
    recorded_prompts, recorded = play_recorded(
        EpisodeContext(
            PROBLEMS, 3, sampling, keys, [0, 0], renderer, decode, BUDGET, Faults(timeout_s=30)
        ),
        engine,
        lambda: EnvAgent(stream=stream),
    )
    assert recorded_prompts == prompts
    for a, b in zip(direct, recorded, strict=True):
        assert b.fault is None
        assert a.completion_ids == b.completion_ids and a.action_mask == b.action_mask
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-5
        assert a.reward == pytest.approx(b.reward) and a.num_turns == b.num_turns


def test_a_program_that_rewrites_its_history_or_fails_is_a_fault(tiny):
    from agents_for_tests import RewritingAgent

    engine, renderer, sampling, decode = _parts(tiny)

    class Failing(EnvAgent):
        def play(self, problem, seed, endpoint):
            raise RuntimeError("the harness crashed")

    made = iter([RewritingAgent(), EnvAgent()])
    _, episodes = play_recorded(
        _two_episodes(renderer, sampling, decode, 30),
        engine,
        lambda: next(made),
    )
    rewriting, fine = episodes
    assert rewriting.fault.startswith("agent RewritingAgent, problem 'p0', turn 1: play() raised")
    assert "do not continue the episode" in rewriting.fault
    assert rewriting.num_turns == 1 and rewriting.reward == 0.0 and rewriting.truncated
    assert fine.fault is None
    made = iter([Failing(), EnvAgent()])
    _, episodes = play_recorded(
        _two_episodes(renderer, sampling, decode, 30),
        engine,
        lambda: next(made),
    )
    assert episodes[0].fault == (
        "agent Failing, problem 'p0', turn 1: play() raised RuntimeError: the harness crashed"
    )
    assert (
        episodes[0].num_turns == 1 and episodes[0].action_mask[0] == 1
    )  # one action, group prompt
    with pytest.raises(EnvFault, match="the harness crashed"):
        play_recorded(
            _two_episodes(renderer, sampling, decode, 30),
            engine,
            Failing,
        )


def test_a_program_that_hangs_after_a_call_ends_at_the_time_limit_naming_its_turn(tiny):
    import threading
    import time

    engine, renderer, sampling, decode = _parts(tiny)
    release = threading.Event()

    class Hanging(EnvAgent):
        def play(self, problem, seed, endpoint):
            client = OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)
            messages = self.env.reset(problem, seed)
            client.chat.completions.create(model=endpoint.model, messages=messages)
            release.wait(60)  # stuck on its tool, say: no call, no return
            return AgentOutcome(1.0)

    made = iter([Hanging(), EnvAgent()])
    start = time.monotonic()
    try:
        _, (hung, fine) = play_recorded(
            _two_episodes(renderer, sampling, decode, 3.0),
            engine,
            lambda: next(made),
        )
    finally:
        release.set()
    assert time.monotonic() - start < 30
    assert hung.fault == (
        "agent Hanging, problem 'p0', turn 1: no call to the model and no return within 3 s "
        "(env.step_timeout_s)"
    )
    assert hung.num_turns == 1 and hung.truncated and hung.reward == 0.0
    assert fine.fault is None


@pytest.mark.parametrize(
    ("outcome", "message"),
    [
        (None, "play() returned NoneType, not an AgentOutcome"),
        (AgentOutcome(float("nan")), "play() gave reward nan; expected a finite number"),
        (AgentOutcome(1.0, ["turns"]), "play() gave info ['turns']; expected a dict"),
        (AgentOutcome(1.0, {"tool_errors": -1}), "info['tool_errors'] = -1; expected a count"),
    ],
)
def test_a_malformed_outcome_is_the_episodes_fault(tiny, outcome, message):
    engine, renderer, sampling, decode = _parts(tiny)

    class Malformed(EnvAgent):
        def play(self, problem, seed, endpoint):
            super().play(problem, seed, endpoint)
            return outcome

    made = iter([Malformed(), EnvAgent()])
    _, (bad, fine) = play_recorded(
        _two_episodes(renderer, sampling, decode, 30),
        engine,
        lambda: next(made),
    )
    assert bad.fault.startswith("agent Malformed, problem 'p0', turn ") and message in bad.fault
    assert bad.reward == 0.0 and bad.truncated and fine.fault is None


def test_a_program_reports_its_failed_tool_calls():
    from rlvr.envs.harness import _Episode, _episodes

    user = [{"role": "user", "content": "q"}]
    e = _Episode(Session("s"), torch.zeros(()), BUDGET, "agent A, problem 'p0'")
    e.session.record(Call(user, [1, 2], [3], [-0.1], True, "a", [("t", {})] * 3))
    e.returned, e.outcome = True, AgentOutcome(1.0, {"tool_errors": 2})
    _, (ep,) = _episodes([e], PROBLEMS[:1], 1, Faults())
    assert (ep.tool_calls, ep.tool_errors, ep.reward, ep.fault) == (3, 2, 1.0, None)


def test_a_program_trains_from_a_config_and_is_evaluated(tmp_path):
    env = {"name": "agents_for_tests:EnvAgent", "max_turns": 3, "max_episode_tokens": 60}
    cfg = tiny_config(tmp_path / "run", steps=2, env=env, reward={"function": None})
    records = assert_trains_and_evaluates(cfg)
    assert json.loads(records[0]["transcript"])[1]["role"] == "assistant"
    assert any(r.get("episodes/turns_mean", 0) > 1 for r in read_metrics(tmp_path / "run"))


class ScriptedEngine:
    """Replies with a calc tool call until the prompt holds the tool's result, then answers."""

    def __init__(self, tok) -> None:
        self.tok = tok
        end = tok.convert_tokens_to_ids("<|im_end|>")
        call = '<tool_call>\n{"name": "calc", "arguments": {"expression": "6 * 7"}}\n</tool_call>'
        self.call = tok(call, add_special_tokens=False)["input_ids"] + [end]
        self.answer = tok("Answer: 42", add_special_tokens=False)["input_ids"] + [end]

    def generate(self, prompts, n, sampling, keys):
        from rlvr.rollout.base import Rollout

        ids = [self.answer if "42" in self.tok.decode(p[-12:]) else self.call for p in prompts]
        return Rollout(prompts, ids, [[-0.5] * len(x) for x in ids], [True] * len(ids), 1)


def test_native_tool_calls_go_out_as_tool_calls_and_come_back_token_exact(smol_tok):
    """A program calling with OpenAI ``tools``: the tools are described in the system prompt
    (SmolLM2's template ignores ``tools``), the reply's <tool_call> block goes out as
    ``tool_calls``, the program's ``tool`` message comes back as observation tokens, and the
    episode is the chat template of the whole conversation with the sampled calls."""
    from agents_for_tests import CALC, ToolCallingAgent, episode_context

    tok = smol_tok
    engine = ScriptedEngine(tok)
    problem = Problem("p", "What is 6 * 7?", "42")
    prompts, (ep,) = play_recorded(
        episode_context(tok, [problem], 1, BUDGET, 30),
        engine,
        ToolCallingAgent,
    )
    assert ep.fault is None and ep.num_turns == 2 and ep.reward == 1.0
    assert (ep.tool_calls, ep.tool_errors) == (1, 0)  # the call the endpoint read out
    described = tools_prompt([make_tool_from(CALC)], "hermes")
    chat = [
        {"role": "system", "content": described},
        {"role": "user", "content": "What is 6 * 7?"},
        {"role": "assistant", "content": tok.decode(engine.call[:-1])},
        {"role": "tool", "content": "42"},
        {"role": "assistant", "content": "Answer: 42"},
    ]
    whole = tok.apply_chat_template(chat, tokenize=False)
    assert (
        prompts[0] + ep.completion_ids + tok("\n", add_special_tokens=False)["input_ids"]
        == (tok(whole, add_special_tokens=False)["input_ids"])
    )
    assert sum(ep.action_mask) == len(engine.call) + len(engine.answer)


def test_a_recorded_episode_counts_the_calls_read_out_and_the_unreadable_blocks():
    user = [{"role": "user", "content": "q"}]
    calls = [
        Call(user, [1, 2], [3, 4], [-0.1, -0.2], True, "a", [("calc", {"e": "1"})] * 2),
        Call(user, [1, 2, 3, 4, 5], [6], [-0.3], True, "b", [], tool_errors=1),
        Call(user, [1, 2, 3, 4, 5, 6, 7], [8], [-0.4], True, "c"),
    ]
    ep = episode_from_calls(calls, 1.0, {})
    assert (ep.tool_calls, ep.tool_errors, ep.invalid_actions, ep.num_turns) == (3, 1, 1, 3)
    assert ep.turn_rewards == [0.0, 0.0, 1.0]


def make_tool_from(schema):
    from rlvr.envs.tools import Tool

    f = schema["function"]
    return Tool(f["name"], f["description"], f["parameters"], fn=lambda **kw: None)


def test_the_endpoint_without_fastapi_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # `import uvicorn` raises ImportError
    with pytest.raises(EnvError, match=r"needs fastapi and uvicorn \(uvicorn is missing\).*serve"):
        RecordingEndpoint(renderer=None, decode=str)
