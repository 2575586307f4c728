"""TextArena adapter: whole scripted episodes, checked against textarena's own outputs."""

from __future__ import annotations

import random
import re
import sys

import pytest

ta = pytest.importorskip("textarena")

from rlvr.data.base import Problem  # noqa: E402
from rlvr.data.textarena import TextArenaTask  # noqa: E402
from rlvr.envs.base import EnvError, Environment, StepResult, load_environment_class  # noqa: E402
from rlvr.envs.registry import env_factory  # noqa: E402
from rlvr.envs.textarena import TextArenaEnv  # noqa: E402

GUESS = "GuessTheNumber-v0-raw"  # numbers 1..20, 10 turns
PROBLEM = Problem("textarena-test-0", "", "")


class Twin:
    """The same game played directly through textarena, for the expected texts and rewards."""

    def __init__(self, env_id: str, seed: int, **env_kwargs: object) -> None:
        self.env = ta.make(env_id, **env_kwargs)
        self.env.reset(num_players=1, seed=seed)

    def observation(self) -> object:
        return self.env.get_observation()[1]

    def step(self, action: str) -> tuple[bool, float | None]:
        done, _ = self.env.step(action)
        return done, (self.env.close()[0][0] if done else None)


def texts(observation: object) -> str:
    """A raw textarena observation's message texts without the player's own action, joined."""
    return "\n".join(
        text for _, text, kind in observation if kind != ta.ObservationType.PLAYER_ACTION
    )


def play_binary_search(env: TextArenaEnv, twin: Twin) -> list[StepResult]:
    """Binary search on 1..20 until the game ends; every turn checked against the twin."""
    results, lo, hi = [], 1, 20
    while True:
        guess = (lo + hi) // 2
        action = f"My guess is [{guess}]"
        result = env.step(action)
        twin_done, twin_reward = twin.step(action)
        results.append(result)
        assert result.terminated is twin_done and result.truncated is False
        if result.done:
            assert result.reward == twin_reward
            return results
        assert result.reward == 0.0 and result.info["action_valid"] is True
        [message] = result.messages
        assert message == {"role": "user", "content": texts(twin.observation())}
        hint = re.fullmatch(r"The target number is (higher|lower)\.", message["content"])
        assert hint is not None, message
        lo, hi = (guess + 1, hi) if hint[1] == "higher" else (lo, guess - 1)


def test_binary_search_wins_with_textarena_texts() -> None:
    env = TextArenaEnv(GUESS)
    assert isinstance(env, Environment)
    twin = Twin(GUESS, seed=7)
    first = env.reset(PROBLEM, seed=7)
    assert first == [{"role": "user", "content": texts(twin.observation())}]
    assert "guess the number between 1 and 20" in first[0]["content"]
    results = play_binary_search(env, twin)
    last = results[-1]
    assert 1 <= len(results) <= 5 and last.terminated and last.reward == 1.0
    assert last.messages == [] and last.info["action_valid"] is True
    assert last.info["reason"] == "Congratulations! You guessed the correct number."
    assert last.info["turn_count"] == len(results) and last.info["invalid_move"] is False
    with pytest.raises(EnvError, match="call reset"):
        env.step("[1]")


def test_turn_limit_loss_gets_textarena_partial_reward() -> None:
    env = TextArenaEnv(GUESS, max_turns=2)
    twin = Twin(GUESS, seed=1, max_turns=2)
    env.reset(PROBLEM, seed=1)
    secret = twin.env.state.game_state["game_number"]
    for guess in (n for n in range(1, 21) if n != secret):
        result = env.step(f"[{guess}]")
        done, reward = twin.step(f"[{guess}]")
        assert result.terminated is done
        if done:
            break
    assert result.reward == reward == pytest.approx(1 - abs(guess - secret) / 19)
    assert result.info["reason"].startswith("The turn limit has been reached")


def test_invalid_moves_are_flagged_then_end_the_game() -> None:
    env = TextArenaEnv(GUESS)
    env.reset(PROBLEM, seed=3)
    first = env.step("twelve")
    assert not first.done and first.reward == 0.0 and first.info["action_valid"] is False
    assert first.messages[0]["content"].startswith("You attempted an invalid move.")
    last = env.step("still no brackets")
    assert last.terminated and last.info["action_valid"] is False
    assert last.info["invalid_move"] is True and last.reward == 0.0


def test_wrapped_id_passes_the_wrappers_full_text() -> None:
    env, twin = TextArenaEnv("GuessTheNumber-v0"), Twin("GuessTheNumber-v0", seed=5)
    assert env.reset(PROBLEM, seed=5)[0]["content"] == twin.observation()
    result = env.step("[10]")
    assert twin.step("[10]") == (False, None) and not result.done
    assert result.messages[0]["content"] == twin.observation()
    assert "[Player] [10]" in result.messages[0]["content"]


def test_interleaved_games_keep_their_own_random_streams() -> None:
    """2048 spawns a random tile after every move: two interleaved episodes of one seed still
    match a game played alone, and the caller's ``random`` state is left untouched."""
    moves = ["[Left]", "[Up]", "[Right]", "[Down]"] * 2
    twin = Twin("2048-v0-raw", seed=11)
    twin_messages = [texts(twin.observation())]
    for move in moves:
        twin.step(move)
        twin_messages.append(texts(twin.observation()))
    random.seed(123)
    before = random.getstate()
    a, b = TextArenaEnv("2048-v0-raw"), TextArenaEnv("2048-v0-raw")
    assert a.reset(PROBLEM, seed=11) == b.reset(PROBLEM, seed=11)
    assert a.reset(PROBLEM, seed=11)[0]["content"] == twin_messages[0]
    steps_a, steps_b = [], []
    for move in moves:
        steps_a.append(a.step(move))
        random.random()  # the caller's own draws between the games' moves
        steps_b.append(b.step(move))
    assert [s.messages for s in steps_a] == [s.messages for s in steps_b]
    assert [s.messages[0]["content"] for s in steps_a] == twin_messages[1:]
    assert [s.anchor for s in steps_a] == [s.anchor for s in steps_b]
    assert len({s.anchor for s in steps_a}) > 1
    caller = random.Random()
    caller.setstate(before)
    for _ in moves:
        caller.random()
    assert random.getstate() == caller.getstate()


def test_errors_name_the_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(EnvError, match="no environment 'GuessTheNumbr-v0-raw'.*GuessTheNumber"):
        TextArenaEnv("GuessTheNumbr-v0-raw")
    with pytest.raises(EnvError, match="could not be made: TypeError"):
        TextArenaEnv(GUESS, no_such_option=1)
    with pytest.raises(EnvError, match="not a single-player game"):
        TextArenaEnv("TicTacToe-v0-raw").reset(PROBLEM, seed=0)
    with pytest.raises(EnvError, match="call reset"):
        TextArenaEnv(GUESS).step("[3]")
    monkeypatch.setitem(sys.modules, "textarena", None)
    with pytest.raises(EnvError, match=re.escape("pip install 'rlvr[envs]'")):
        TextArenaEnv(GUESS)


def test_the_runs_system_prompt_comes_first() -> None:
    task = TextArenaTask(GUESS, n_eval=1)
    make = env_factory("textarena", {"env_id": GUESS}, task, "Answer as [N].")
    first = make().reset(task.train_problem(0), seed=1)
    assert first[0] == {"role": "system", "content": "Answer as [N]."}
    assert first[1:] == TextArenaEnv(GUESS).reset(task.train_problem(0), seed=1)


def test_loadable_by_spec_and_task_labels() -> None:
    assert load_environment_class("rlvr.envs.textarena:TextArenaEnv") is TextArenaEnv
    task = TextArenaTask(GUESS, n_eval=3)
    assert task.name == f"textarena:{GUESS}"
    assert task.train_problem(17).id == f"textarena-{GUESS}-train-17"
    assert [p.id for p in task.eval_problems()] == [f"textarena-{GUESS}-eval-{i}" for i in range(3)]
    assert task.train_problem(17) == task.train_problem(17)
    assert task.score("[4]", task.train_problem(0)) == 0.0
    with pytest.raises(ValueError, match="n_eval"):
        TextArenaTask(GUESS, n_eval=-1)


def test_a_textarena_game_trains_through_the_config(tmp_path):
    """`env.name: textarena` with `task.name: textarena:<id>`: a run plays the game's episodes
    (several turns, the game's rewards) and checkpoints like any run."""
    from rlvr.config import build_config
    from rlvr.logging import read_metrics
    from rlvr.trainer import train

    cfg = {
        "model": {"name": "tiny-random-llama"},
        "task": {"name": f"textarena:{GUESS}", "n_eval": 2},
        "env": {"name": "textarena", "params": {"env_id": GUESS}, "max_turns": 3},
        "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 8},
        "train": {"steps": 1, "threads": 1, "autocast": "fp32"},
        "eval": {"before": False},
        "logging": {"run_dir": str(tmp_path / "run"), "progress": False, "tensorboard": False},
    }
    summary = train(build_config(cfg))
    row = next(r for r in read_metrics(tmp_path / "run") if "episodes/turns_mean" in r)
    assert row["episodes/turns_mean"] > 1.0
    assert "eval/greedy_turns_mean" in summary["after"]
