"""SkyRL-gym environments (skyrl-gym) through rlvr's environment protocol: a row's extras from the
problem (its answer as ground truth, or its JSON object), observations and rewards mapped,
text2sql on a local sqlite database, unknown ids named, and 2-step runs evaluated with rlvr eval
on the tiny model."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

pytest.importorskip("skyrl_gym", reason="skyrl-gym is not installed (make test installs it)")

from test_envs_episodes import (  # noqa: E402
    assert_tokens_are_the_template,
    assert_trains_and_evaluates,
)
from test_trainer import tiny_config  # noqa: E402

from rlvr.data import Problem  # noqa: E402
from rlvr.envs.base import EnvError  # noqa: E402
from rlvr.envs.skyrl import SkyRLGymEnv, problem_extras  # noqa: E402

GSM8K_TEMPLATE = "{question}\nGive the final answer on the last line as '#### <number>'."


def test_a_problem_answer_is_the_rows_ground_truth_or_its_json_extras():
    extras = problem_extras(Problem("p", "q", "72"), {"max_turns": 3})
    assert extras["reward_spec"] == {"ground_truth": "72"} and extras["max_turns"] == 3
    assert extras["reward_model"] == {"ground_truth": "72"}  # AIME reads this one
    row = {"db_id": "shop", "reward_spec": {"ground_truth": "SELECT 1"}}
    assert problem_extras(Problem("p", "q", json.dumps(row)), {"data": "spider"}) == {
        "data": "spider",
        **row,
    }


def test_one_turn_and_multi_turn_envs_map_rewards_and_observations():
    problem = Problem("p", "Natalia sold 48 clips, then half as many. How many?", "72")
    env = SkyRLGymEnv("gsm8k", system_prompt="Be brief.")
    first = env.reset(problem, seed=0)
    assert [m["role"] for m in first] == ["system", "user"] and "Natalia" in first[1]["content"]
    step = env.step("48 + 24 = 72\n#### 72")
    assert (step.messages, step.reward, step.terminated, step.truncated) == ([], 1.0, True, False)
    assert step.info["skyrl_metrics"] == {}
    with pytest.raises(EnvError, match="call reset first"):
        env.step("#### 72")
    env = SkyRLGymEnv("gsm8k_multi_turn", extras={"max_turns": 3})
    env.reset(problem, seed=0)
    step = env.step("I think #### 70")
    assert not step.terminated and step.reward == pytest.approx(0.2 / 3)  # format credit
    assert step.messages[0]["role"] == "user" and "#### ANSWER" in step.messages[0]["content"]
    step = env.step("#### 72")
    assert step.terminated and step.reward == 1.0 and step.info["skyrl_metrics"] == {"steps": 2}


def test_a_skyrl_episode_is_the_chat_template_of_its_conversation(smol_tok):
    problem = Problem("p", "What is 70 + 2?", "72")
    make = lambda: SkyRLGymEnv("gsm8k_multi_turn", extras={"max_turns": 3})  # noqa: E731
    ep = assert_tokens_are_the_template(smol_tok, make, ["#### 70", "#### 72"], problem)
    assert ep.turn_rewards == [pytest.approx(0.2 / 3), 1.0] and ep.terminated


def _spider(root: Path) -> Path:
    """A one-table spider-layout database: ``root/spider/database/shop/shop.sqlite``."""
    folder = root / "spider" / "database" / "shop"
    folder.mkdir(parents=True)
    db = sqlite3.connect(folder / "shop.sqlite")
    db.execute("CREATE TABLE items (name TEXT, price REAL)")
    db.executemany("INSERT INTO items VALUES (?, ?)", [("a", 1.0), ("b", 3.0), ("c", 5.0)])
    db.commit()
    db.close()
    return root


def test_text2sql_runs_queries_on_a_local_database(tmp_path):
    row = {
        "db_id": "shop",
        "data": "spider",
        "reward_spec": {"ground_truth": "SELECT name FROM items WHERE price >= 3"},
        "max_turns": 4,
    }
    env = SkyRLGymEnv("text2sql", env_config={"db_path": str(_spider(tmp_path))})
    env.reset(Problem("q1", "Names of items costing more than 2?", json.dumps(row)), seed=0)
    step = env.step("<think>look</think><sql>SELECT name FROM items WHERE price > 2</sql>")
    assert not step.terminated and "b" in step.messages[0]["content"]  # the query's result
    assert (step.info["tool_calls"], step.info["action_valid"]) == (1, True)  # a tool ran
    step = env.step("<think>ok</think><solution>SELECT name FROM items WHERE price > 2</solution>")
    assert step.terminated and step.reward == 1.0
    env.reset(Problem("q1", "Names of items costing more than 2?", json.dumps(row)), seed=0)
    step = env.step("no sql block")  # text2sql's tool runs on no query and says it is invalid
    assert (step.info["tool_calls"], step.info["action_valid"]) == (0, False)
    assert "action is invalid" in step.messages[0]["content"]


def test_a_tool_environments_calls_and_unreadable_actions_are_counted():
    env = SkyRLGymEnv("searchcode", extras={"max_turns": 3})
    env.reset(Problem("p", "What is 6 * 7?", "42"), seed=0)
    step = env.step("<tool><python>print(6 * 7)</python></tool>")
    assert "42" in step.messages[0]["content"]
    assert (step.info["tool_calls"], step.info["action_valid"]) == (1, True)
    step = env.step("I will just think.")  # no <tool> block and no <solution>
    assert (step.info["tool_calls"], step.info["action_valid"]) == (0, False)
    assert "No <tool>" in step.messages[0]["content"] and not step.terminated


def test_unknown_ids_and_rows_it_cannot_use_are_named():
    with pytest.raises(EnvError, match="SkyRL-gym has no environment 'gsm8k_multiturn'.*gsm8k"):
        SkyRLGymEnv("gsm8k_multiturn")
    env = SkyRLGymEnv("text2sql", env_config={"db_path": "/nonexistent"})
    row = {"db_id": "x", "data": "spider", "reward_spec": {"ground_truth": "SELECT 1"}}
    with pytest.raises(EnvError, match="problem 'q'.*FileNotFoundError: Database file not found"):
        env.reset(Problem("q", "?", json.dumps(row)), seed=0)


@pytest.mark.parametrize("env_id", ["gsm8k", "gsm8k_multi_turn"])
def test_a_skyrl_env_trains_two_steps_and_is_evaluated(tmp_path, env_id):
    run = tmp_path / "run"
    cfg = tiny_config(
        run,
        steps=2,
        task={"name": "arithmetic", "level": 1, "n_eval": 4, "prompt_template": GSM8K_TEMPLATE},
        env={
            "name": f"skyrl_gym:{env_id}",
            "params": {"extras": {"max_turns": 2}},
            "max_turns": 2,
            "max_episode_tokens": 64,
        },
    )
    cfg["reward"] = {}
    assert_trains_and_evaluates(cfg)
