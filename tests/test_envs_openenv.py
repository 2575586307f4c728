"""OpenEnv environments (openenv-core) through rlvr's environment protocol: two environments
served on 127.0.0.1 by the tests (tests/openenv_for_tests.py), reset/step mapped over OpenEnv's
WebSocket client, the action field read from the server's schema, 2-step runs evaluated with
rlvr eval on the tiny model, an MCP environment's tools called on the server, and a server
killed mid-episode (an environment fault)."""

from __future__ import annotations

import gc
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("openenv", reason="openenv-core is not installed (make test installs it)")

import httpx  # noqa: E402
from agents_for_tests import ScriptedReplies  # noqa: E402
from test_envs_episodes import (  # noqa: E402
    SMOL,
    _play,
    assert_tokens_are_the_template,
    assert_trains_and_evaluates,
)
from test_trainer import tiny_config  # noqa: E402

from rlvr.data import Problem  # noqa: E402
from rlvr.envs.base import EnvError  # noqa: E402
from rlvr.envs.episodes import Budget, Faults  # noqa: E402
from rlvr.envs.openenv import OpenEnvEnv, import_openenv_client, server_schema  # noqa: E402
from rlvr.models import load_tokenizer  # noqa: E402

TESTS = Path(__file__).parent
PROBLEM = Problem("p", "label", "")


def _serve(name: str) -> tuple[subprocess.Popen, str]:
    """``tests/openenv_for_tests.py NAME`` on a free port; returns the process and its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, str(TESTS / "openenv_for_tests.py"), name, str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the OpenEnv test server {name} did not start")


@pytest.fixture(scope="module")
def servers():
    procs = {name: _serve(name) for name in ("guess", "echo", "mcp")}
    yield {name: url for name, (_, url) in procs.items()}
    for proc, _ in procs.values():
        proc.kill()
        proc.wait()


def test_a_guessing_game_maps_over_the_websocket_session(servers):
    env = OpenEnvEnv(servers["guess"], system_prompt="Be brief.")
    assert env.action_field == "text" and env.observation_field == "prompt"  # from /schema
    first = env.reset(PROBLEM, seed=3)
    assert [m["role"] for m in first] == ["system", "user"]
    assert "number from 1 to 8" in first[1]["content"]
    rewards = []
    for guess in range(1, 9):  # the target is found by the fourth guess or the game ends
        step = env.step(f"\\boxed{{{guess}}}")
        rewards.append(step.reward)
        if step.terminated:
            break
    assert step.terminated and (rewards[-1] == 1.0 or len(rewards) == 4)
    assert step.messages == [] and env._client is None  # the session is closed at the end
    replay = OpenEnvEnv(servers["guess"])
    replay.reset(PROBLEM, seed=3)
    assert [replay.step(f"\\boxed{{{g}}}").reward for g in range(1, len(rewards) + 1)] == rewards


def test_the_echo_environment_and_what_cannot_be_mapped(servers):
    env = OpenEnvEnv(servers["echo"])
    assert env.action_field == "message" and env.observation_field == "echoed_message"
    env.reset(PROBLEM, seed=0)
    step = env.step("hello there")
    assert step.messages == [{"role": "user", "content": "hello there"}]
    assert step.reward == pytest.approx(11 / 20) and step.info["openenv"]["message_length"] == 11
    with pytest.raises(EnvError, match="has no field 'text'"):
        OpenEnvEnv(servers["echo"], action_field="text")
    with pytest.raises(EnvError, match="expected the URL of a running OpenEnv server"):
        OpenEnvEnv("localhost:8000")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(EnvError, match="is an OpenEnv server running there"):
        OpenEnvEnv(dead)


def test_an_mcp_environment_calls_its_tools_on_the_server(servers):
    env = OpenEnvEnv(servers["mcp"])
    assert env.mcp and env.observation_field == "prompt"  # CallToolAction in /schema
    assert [t.schema()["function"]["name"] for t in env.tools] == ["add", "submit"]
    assert env.tools[0].parameters["required"] == ["a", "b"]  # the server's input schema
    first = env.reset(PROBLEM, seed=3)
    a, b = (int(n) for n in first[0]["content"].split("?")[0].split()[-3::2])
    calls = (
        f'<tool_call>{{"name": "add", "arguments": {{"a": {a}, "b": {b}}}}}</tool_call>'
        '<tool_call>{"name": "mul", "arguments": {}}</tool_call><tool_call>{"name": '
    )
    step = env.step(calls)
    assert [m["content"] for m in step.messages] == [
        str(a + b),
        "Error: Unknown tool: 'mul'",
        "Error: tool call 3: <tool_call> is not closed by </tool_call>",
    ]
    assert {m["role"] for m in step.messages} == {"tool"} and not step.terminated
    assert (step.info["tool_calls"], step.info["tool_errors"], step.reward) == (3, 2, 0.0)
    step = env.step(
        f'<tool_call>{{"name": "submit", "arguments": {{"answer": {a + b}}}}}</tool_call>'
    )
    assert step.terminated and step.reward == 1.0 and step.info["action_valid"]
    env.reset(PROBLEM, seed=3)
    step = env.step("The answer is 42.")  # no call: the final answer ends the episode
    assert step.terminated and step.reward == 0.0 and step.messages == []


def test_an_openenv_episode_is_the_chat_template_of_its_conversation(servers):
    tok = load_tokenizer(SMOL)
    texts = ["\\boxed{1}", "\\boxed{2}", "\\boxed{3}", "\\boxed{4}"]
    ep = assert_tokens_are_the_template(tok, lambda: OpenEnvEnv(servers["guess"]), texts)
    assert ep.terminated and ep.messages[2]["content"] in ("Higher.", "Correct!")


@pytest.mark.parametrize("name", ["guess", "echo", "mcp"])
def test_an_openenv_env_trains_two_steps_and_is_evaluated(servers, tmp_path, name):
    run = tmp_path / "run"
    env_name = f"openenv:{servers[name]}"
    cfg = tiny_config(
        run,
        steps=2,
        task={"name": env_name, "n_eval": 2},
        env={"name": env_name, "max_turns": 3, "max_episode_tokens": 64},
    )
    cfg["reward"] = {}
    records = assert_trains_and_evaluates(cfg)
    roles = [m["role"] for m in json.loads(records[0]["transcript"])]
    assert roles.index("assistant") == roles.index("user") + 1  # after a system prompt or not


def _server_fails_before_the_second_step(servers, name: str, fail, timeout_s: float) -> list:
    """Two episodes of a group: the first on a server of its own, on which ``fail(proc)`` is
    done just before the episode's second step (an environment class called ``name``), the
    other on a live server. Returns the two episodes."""
    proc, url = _serve("echo")
    tok = load_tokenizer(SMOL)
    end = tok.convert_tokens_to_ids("<|im_end|>")

    def step(self, action_text):
        if self.url == url and getattr(self, "stepped", False):
            fail(proc)
        self.stepped = True
        return OpenEnvEnv.step(self, action_text)

    env_class = type(name, (OpenEnvEnv,), {"step": step})
    import_openenv_client()  # imported and the schemas fetched before: the limit is the steps'
    for u in (url, servers["echo"]):
        server_schema(u)
    urls = iter([url, servers["echo"]])
    try:
        _, _, episodes = _play(
            tok,
            [[[end]] * 3, [[end]] * 3],
            lambda: env_class(next(urls)),
            Budget(3, 512, 256),
            n=2,
            faults=Faults(timeout_s=timeout_s),
        )
    finally:
        if proc.poll() is None:  # not killed by ``fail``: thawed if frozen, then killed
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait()
    return episodes


def test_a_server_killed_mid_episode_is_an_environment_fault(servers):
    """The first episode's server killed before its second step: that episode ends with the
    fault (one line naming the environment, problem and turn), the other plays on."""

    def kill(proc):
        proc.kill()
        proc.wait()

    killed, alive = _server_fails_before_the_second_step(
        servers, "KilledBeforeItsSecondStep", kill, timeout_s=20
    )
    assert killed.num_turns == 2 and killed.truncated and killed.turn_rewards[-1] == 0.0
    assert killed.fault.startswith(
        "env KilledBeforeItsSecondStep, problem 'p0', turn 2: step() raised Connection"
    )
    assert "\n" not in killed.fault
    assert alive.fault is None and alive.num_turns == 2 and alive.terminated


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_a_server_that_stops_answering_mid_episode_times_out_as_an_environment_fault(
    servers, caplog
):
    """The server's process frozen (SIGSTOP) before the episode's second step: the connection
    stays open and nothing answers; the step ends at env.step_timeout_s with a one-line fault,
    the other episode of the group plays on. The cut-off session is dropped: no client event
    loop is left running with the step's task pending."""
    loops = {t for t in threading.enumerate() if t.name == "openenv-sync-client-loop"}
    start = time.monotonic()
    frozen, alive = _server_fails_before_the_second_step(
        servers,
        "FrozenBeforeItsSecondStep",
        lambda proc: os.kill(proc.pid, signal.SIGSTOP),
        timeout_s=1.0,
    )
    assert time.monotonic() - start < 30  # the time limit, not a hang
    assert frozen.num_turns == 2 and frozen.truncated and frozen.turn_rewards[-1] == 0.0
    assert frozen.fault == (
        "env FrozenBeforeItsSecondStep, problem 'p0', turn 2: step() did not answer within 1 s "
        "(env.step_timeout_s)"
    )
    assert alive.fault is None and alive.num_turns == 2 and alive.terminated
    gc.collect()  # a task still pending would be reported as destroyed now
    assert "Task was destroyed but it is pending" not in caplog.text
    assert {t for t in threading.enumerate() if t.name == "openenv-sync-client-loop"} <= loops


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_closing_a_session_whose_server_froze_is_bounded_and_leaves_nothing_running(caplog):
    """The server frozen between two calls (after its last answer): the session's polite close
    would wait on it; it gives up after CLOSE_WAIT_S and drops the session instead."""
    from rlvr.envs.openenv import CLOSE_WAIT_S

    proc, url = _serve("echo")
    loops = {t for t in threading.enumerate() if t.name == "openenv-sync-client-loop"}
    try:
        env = OpenEnvEnv(url)
        env.reset(Problem("p", "label", ""), seed=0)
        os.kill(proc.pid, signal.SIGSTOP)
        start = time.monotonic()
        env.close()
        assert time.monotonic() - start < CLOSE_WAIT_S + 3
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait()
    gc.collect()
    assert "Task was destroyed but it is pending" not in caplog.text
    assert {t for t in threading.enumerate() if t.name == "openenv-sync-client-loop"} <= loops


class SumCallingEngine(ScriptedReplies):
    """Scripted replies for the sum server played by OpenEnv's harness: a call to a tool that
    does not exist, ``add`` on the prompt's numbers, then ``submit`` of what it returned."""

    def reply(self, text: str) -> str:
        done = text.count("<|im_start|>tool")
        if done == 0:
            return '<tool_call>\n{"name": "mul", "arguments": {"a": 1}}\n</tool_call>'
        if done == 1:
            a, b = re.findall(r"What is (\d+) \+ (\d+)\?", text)[-1]
            call = {"name": "add", "arguments": {"a": int(a), "b": int(b)}}
            return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
        total = re.findall(r"<\|im_start\|>tool\n(\d+)<\|im_end\|>", text)[-1]
        call = {"name": "submit", "arguments": {"answer": int(total)}}
        return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


def test_openenvs_own_harness_plays_an_mcp_environment_at_the_endpoint_token_exact(servers):
    """harness: openenv: OpenEnv's MCPHarnessAdapter runs the episode with its OpenAIClient at
    rlvr's recording endpoint; the tools go out as OpenAI tools, each call runs on the server
    (an unknown one answered with its error and counted), the episode ends when a tool result
    says done, with the environment's reward, and is the chat template of the conversation."""

    from agents_for_tests import episode_context

    from rlvr.envs.harness import play_recorded
    from rlvr.envs.openenv_harness import openenv_environment
    from rlvr.envs.parsers import tools_prompt

    tok = load_tokenizer(SMOL)
    engine = SumCallingEngine(tok)
    prompts, (ep,) = play_recorded(
        episode_context(tok, [PROBLEM], 1, Budget(4, 2048, 1024), 60, seed=3),
        engine,
        lambda: openenv_environment(servers["mcp"], harness="openenv"),
    )
    assert ep.fault is None and ep.num_turns == 3 and ep.reward == 1.0
    assert (ep.tool_calls, ep.tool_errors) == (3, 1)
    first = OpenEnvEnv(servers["mcp"]).reset(PROBLEM, seed=3)[0]["content"]
    a, b = (int(n) for n in re.findall(r"What is (\d+) \+ (\d+)\?", first)[0])
    system = tools_prompt(OpenEnvEnv(servers["mcp"]).tools, "hermes")
    chat = [
        {"role": "system", "content": system},
        {"role": "user", "content": first},
        {"role": "assistant", "content": engine.replies[0]},
        {"role": "tool", "content": "Error: unknown tool 'mul'; available tools: add, submit"},
        {"role": "assistant", "content": engine.replies[1]},
        {"role": "tool", "content": str(a + b)},
        {"role": "assistant", "content": engine.replies[2]},
    ]
    whole = tok(tok.apply_chat_template(chat, tokenize=False), add_special_tokens=False)
    newline = tok("\n", add_special_tokens=False)["input_ids"]
    assert prompts[0] + ep.completion_ids + newline == whole["input_ids"]
    assert sum(ep.action_mask) == sum(len(tok(r)["input_ids"]) + 1 for r in engine.replies)


def test_openenvs_harness_trains_two_steps_and_is_evaluated(servers, tmp_path):
    env_name = f"openenv:{servers['mcp']}"
    env = {"name": env_name, "params": {"harness": "openenv"}, "max_turns": 3}
    cfg = tiny_config(
        tmp_path / "run",
        steps=2,
        task={"name": env_name, "n_eval": 2},
        env={**env, "max_episode_tokens": 256},
    )
    cfg["reward"] = {"function": None}
    records = assert_trains_and_evaluates(cfg)
    assert json.loads(records[0]["transcript"])[-1]["role"] == "assistant"


def test_openenvs_harness_needs_an_mcp_environment(servers):
    from rlvr.envs.openenv_harness import openenv_environment

    with pytest.raises(EnvError, match="harness: openenv plays an MCP environment"):
        openenv_environment(servers["echo"], harness="openenv")
    with pytest.raises(EnvError, match="harness 'mcp'; expected one of \\('openenv',\\)"):
        openenv_environment(servers["mcp"], harness="mcp")
