"""GEM environments (gem-llm) through rlvr's environment protocol: reset/step mapped (reward,
terminated, truncated, the next-move suffix), unknown ids named with close matches, GEM's
logging set-up undone, and 2-step runs (a game, a reasoning-gym task) evaluated with rlvr eval on
the tiny model."""

from __future__ import annotations

import json
import logging

import pytest

pytest.importorskip("gem", reason="gem-llm is not installed (make test installs it)")

from test_envs_episodes import (  # noqa: E402
    assert_tokens_are_the_template,
    assert_trains_and_evaluates,
)
from test_trainer import tiny_config  # noqa: E402

from rlvr.config import ConfigError, build_config  # noqa: E402
from rlvr.data import Problem  # noqa: E402
from rlvr.envs.base import EnvError  # noqa: E402
from rlvr.envs.gem import GemEnv  # noqa: E402
from rlvr.envs.registry import env_factory  # noqa: E402

GAME = "game:GuessTheNumber-v0-easy"
PROBLEM = Problem("p", "label", "")


def test_a_game_maps_observations_rewards_and_flags():
    env = GemEnv(GAME)
    first = env.reset(PROBLEM, seed=3)
    assert first[0]["role"] == "user" and "Guess The Number" in first[0]["content"]
    step = env.step("\\boxed{5}")
    assert step.messages[0]["content"].endswith("Enter your next guess.")  # GEM's suffix
    assert (step.reward, step.terminated, step.truncated) == (0.0, False, False)
    replay = GemEnv(GAME)
    replay.reset(PROBLEM, seed=3)
    assert replay.step("\\boxed{5}").messages == step.messages  # the seed names the game
    for guess in ("\\boxed{1}", "\\boxed{2}", "\\boxed{3}"):
        step = env.step(guess)
    assert step.terminated and not step.truncated and 0.0 <= step.reward <= 1.0
    with pytest.raises(EnvError, match="no episode in progress"):
        env.step("\\boxed{4}")


def test_a_move_gem_cannot_parse_is_an_invalid_action():
    env = GemEnv(GAME)
    env.reset(PROBLEM, seed=3)
    step = env.step("I would guess five.")  # no \boxed{N}: GEM's format-error reward, -0.1
    assert step.reward == pytest.approx(-0.1) and step.info["action_valid"] is False
    env.reset(PROBLEM, seed=3)
    assert "action_valid" not in env.step("\\boxed{5}").info  # a move GEM read
    task = GemEnv("rg:basic_arithmetic")  # no format-error reward: a wrong answer scores 0
    task.reset(PROBLEM, seed=0)
    assert "action_valid" not in task.step("I would say five.").info


def test_the_runs_system_prompt_comes_first():
    make = env_factory(f"gem:{GAME}", {}, None, "Reply as \\boxed{N}.")
    first = make().reset(PROBLEM, seed=3)
    assert first[0] == {"role": "system", "content": "Reply as \\boxed{N}."}
    assert first[1:] == GemEnv(GAME).reset(PROBLEM, seed=3)  # GEM's own first message


def test_a_gem_episode_is_the_chat_template_of_its_conversation(smol_tok):
    texts = ["\\boxed{5}", "\\boxed{3}", "\\boxed{7}"]
    ep = assert_tokens_are_the_template(smol_tok, lambda: GemEnv(GAME), texts, PROBLEM)
    assert ep.num_turns >= 1 and "Enter your next guess." in ep.messages[2]["content"]


def test_a_single_turn_task_terminates_without_truncation():
    env = GemEnv("rg:basic_arithmetic")
    (question,) = env.reset(PROBLEM, seed=0)
    assert question["content"] == "Calculate ( -( -7 * -3 ) )."
    step = env.step("\\boxed{-21}")
    assert (step.messages, step.reward, step.terminated, step.truncated) == ([], 1.0, True, False)


def test_gems_tool_wrappers_run_tools_and_count_calls_and_errors():
    env = GemEnv("rg:basic_arithmetic", wrappers="python_tool_no_int_reward")
    (question,) = env.reset(PROBLEM, seed=0)
    assert "<python>" in question["content"]  # GEM's tool instructions follow the question
    step = env.step("<python>print(-7 * -3)</python>")
    assert step.messages == [{"role": "user", "content": "Code execution result: 21\n\n"}]
    assert (step.info["tool_calls"], step.info["tool_errors"], step.terminated) == (1, 0, False)
    step = env.step("<python>1 / 0</python>")  # the tool ran and failed
    assert (step.info["tool_calls"], step.info["tool_errors"]) == (1, 1)
    assert step.info["action_valid"] is False
    assert "ZeroDivisionError" in step.messages[0]["content"]
    step = env.step("\\boxed{-21}")  # no tool: the environment's own step
    assert (step.info["tool_calls"], step.info["tool_errors"]) == (0, 0)
    assert (step.reward, step.terminated) == (1.0, True)
    env.reset(PROBLEM, seed=0)  # counts restart with the episode
    assert env.step("<python>print(1)</python>").info["tool_calls"] == 1


def test_a_config_names_gems_tool_wrapper_in_env_params():
    make = env_factory("gem:rg:basic_arithmetic", {"wrappers": ["python_tool"]}, None, None)
    env = make()
    env.reset(PROBLEM, seed=0)
    step = env.step("<python>print(-7 * -3)</python>")
    assert (step.info["tool_calls"], step.info["tool_errors"]) == (1, 0)
    assert step.reward == pytest.approx(0.3)  # python_tool's own rewards: 0.05 + 0.25 a call


def test_only_gems_tool_wrappers_are_taken():
    with pytest.raises(EnvError, match="'concat_chat' cannot be used .*re-renders.*python_tool"):
        GemEnv(GAME, wrappers=["concat_chat"])
    with pytest.raises(EnvError, match="give one tool wrapper"):
        GemEnv(GAME, wrappers="python_tool,search_tool")
    with pytest.raises(EnvError, match="'pythontool' cannot be used \\(GEM has no such"):
        GemEnv(GAME, wrappers="pythontool")


def test_unknown_ids_are_named_with_close_matches_and_logging_is_left_alone():
    level, handlers = logging.getLogger().level, list(logging.getLogger().handlers)
    with pytest.raises(EnvError, match="close matches: game:GuessTheNumber-v0"):
        GemEnv("game:GuessTheNumber-v0")
    assert logging.getLogger().level == level and logging.getLogger().handlers == handlers


@pytest.mark.parametrize("env_id", [GAME, "rg:basic_arithmetic"])
def test_a_gem_env_trains_two_steps_and_is_evaluated(tmp_path, env_id):
    run = tmp_path / "run"
    cfg = tiny_config(
        run,
        steps=2,
        task={"name": f"gem:{env_id}", "n_eval": 2},
        env={"name": f"gem:{env_id}", "max_turns": 4, "max_episode_tokens": 96},
    )
    cfg["reward"] = {}
    records = assert_trains_and_evaluates(cfg)
    assert json.loads(records[0]["transcript"])[1]["role"] == "assistant"
    bad = dict(cfg, env={"name": "gem:game:Mastermind-v0-easy"})
    with pytest.raises(ConfigError, match="the same id"):
        build_config(bad)
