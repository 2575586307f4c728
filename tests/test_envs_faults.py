"""Environment faults: every reset/step under a time limit (env.step_timeout_s); a hang, a crash
or malformed data ends that episode with a counted fault and a one-line message naming the
environment, problem and turn (env.on_error: end_episode), or stops the run (raise)."""

from __future__ import annotations

import re
import signal
import threading
import time

import pytest
from envs_for_tests import FaultyEnv
from test_envs_episodes import PROBLEMS, _play
from test_trainer import step_rows, tiny_config

from rlvr.config import build_config
from rlvr.data import Problem
from rlvr.envs.agent import counts, episode_metrics
from rlvr.envs.deadline import Deadline, call_with_deadline
from rlvr.envs.episodes import Budget, EnvFault, Faults
from rlvr.trainer import train


def test_a_hung_call_is_cut_short_on_the_main_thread_and_on_others():
    assert call_with_deadline(lambda: 41 + 1, 1.0) == 42
    with pytest.raises(ZeroDivisionError):
        call_with_deadline(lambda: 1 / 0, 1.0)

    def swallowing():  # catches Exception (not Deadline): still stopped
        try:
            time.sleep(30)
        except Exception:
            time.sleep(30)

    before = signal.getsignal(signal.SIGUSR2)
    start = time.monotonic()
    with pytest.raises(Deadline):
        call_with_deadline(swallowing, 0.3)
    assert time.monotonic() - start < 15  # stopped, not 2 x 30 s
    assert signal.getsignal(signal.SIGUSR2) == before  # the handler is put back

    def busy():  # pure Python, no system call to interrupt
        while True:
            pass

    with pytest.raises(Deadline):
        call_with_deadline(busy, 0.3)

    out: list[BaseException | int] = []

    def in_a_thread():
        try:
            out.append(call_with_deadline(lambda: time.sleep(30), 0.3))
        except BaseException as err:  # noqa: BLE001 - the test reads it
            out.append(err)
        out.append(call_with_deadline(lambda: 7, 1.0))

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join(10)
    assert isinstance(out[0], Deadline) and out[1] == 7


def test_signal_timed_checks_inside_an_environment_still_work():
    """math-verify times its parsing with SIGALRM (main thread only): an environment using it
    runs in place under the deadline, as it would without one."""
    from math_verify import parse, verify

    assert call_with_deadline(lambda: verify(parse("$\\frac{1}{2}$"), parse("0.5")), 5.0)


def _faulty(**kw):
    return lambda: FaultyEnv(**kw)


def test_a_hanging_step_ends_only_its_episode_with_a_one_line_message(smol_tok):
    end = smol_tok.convert_tokens_to_ids("<|im_end|>")
    actions = [[[end]] * 3 for _ in range(4)]  # 2 problems x 2 episodes, three turns each
    faults = Faults(timeout_s=0.3)
    start = time.monotonic()
    _, _, episodes = _play(
        smol_tok,
        actions,
        _faulty(fault="hang", at=2, problems=("p1",)),
        Budget(3, 512, 256),
        problems=PROBLEMS,
        n=2,
        faults=faults,
    )
    assert time.monotonic() - start < 30  # the time limit, not the 600-s hang
    ok, hung = episodes[:2], episodes[2:]
    assert all(e.fault is None and e.num_turns == 3 for e in ok)
    for e in hung:
        assert e.fault == (
            "env FaultyEnv, problem 'p1', turn 2: step() did not answer within 0.3 s "
            "(env.step_timeout_s)"
        )
        assert e.num_turns == 2 and e.turn_rewards[-1] == 0.0 and e.truncated
        assert "\n" not in e.fault
    assert counts(episodes)["env_faults"] == 2.0
    assert episode_metrics(counts(episodes))["episodes/env_faults"] == 2.0


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("raise", "step() raised ConnectionResetError: the game server went away"),
        ("nan", "step() gave reward nan; expected a finite number"),
    ],
)
def test_crashes_and_malformed_data_end_the_episode_or_stop_the_run(smol_tok, fault, message):
    end = smol_tok.convert_tokens_to_ids("<|im_end|>")
    actions = [[[end]] * 3 for _ in range(4)]
    make = _faulty(fault=fault, at=1, problems=("p0",))
    _, _, episodes = _play(smol_tok, actions, make, problems=PROBLEMS, n=2)
    assert [e.fault is not None for e in episodes] == [True, True, False, False]
    assert episodes[0].fault == f"env FaultyEnv, problem 'p0', turn 1: {message}"
    with pytest.raises(EnvFault, match=re.escape(f"problem 'p0', turn 1: {message}")):
        _play(smol_tok, actions, make, problems=PROBLEMS, n=2, faults=Faults(on_error="raise"))


def test_a_hanging_reset_plays_the_group_prompt_once_and_a_dead_environment_stops(smol_tok):
    end = smol_tok.convert_tokens_to_ids("<|im_end|>")
    actions = [[[end]] * 3 for _ in range(2)]

    class OneHangs(FaultyEnv):
        made = 0

        def __init__(self):
            OneHangs.made += 1
            super().__init__(fault="reset" if OneHangs.made == 2 else "none", hang_s=30)

    _, prompts, episodes = _play(
        smol_tok, actions, OneHangs, Budget(3, 512, 256), faults=Faults(timeout_s=0.3)
    )
    assert episodes[0].fault is None and episodes[0].num_turns == 3
    late = episodes[1]
    assert late.fault.endswith("reset() did not answer within 0.3 s (env.step_timeout_s)")
    assert late.num_turns == 1 and late.turn_rewards == [0.0]
    assert late.messages[0] == episodes[0].messages[0]  # the group's prompt, then one action
    assert [m["role"] for m in late.messages] == ["user", "assistant"]
    # every reset hangs: nothing can start; every step raises: nothing to learn from
    with pytest.raises(EnvFault, match="no episode of this problem could start"):
        _play(smol_tok, actions, _faulty(fault="reset", hang_s=30), faults=Faults(timeout_s=0.2))
    with pytest.raises(EnvFault, match="every episode of this batch \\(2\\) ended in an env"):
        _play(smol_tok, actions, _faulty(fault="raise", at=1))


def test_calls_hanging_in_a_row_stop_the_run_as_a_dead_environment(smol_tok):
    end = smol_tok.convert_tokens_to_ids("<|im_end|>")
    problems = [Problem(f"p{i}", "Hi", "1") for i in range(5)]
    actions = [[[end]] * 3 for _ in range(10)]
    start = time.monotonic()
    with pytest.raises(EnvFault, match="the calls of 3 problems in a row ran out of time: the"):
        _play(
            smol_tok,
            actions,
            _faulty(fault="hang", at=1),
            problems=problems,
            n=2,
            faults=Faults(timeout_s=0.2),
        )
    assert time.monotonic() - start < 5  # six timeouts, not ten


def test_a_hung_environment_costs_a_group_about_two_time_limits_not_one_per_episode(
    smol_tok, capfd
):
    """Every call hangs (steps and closes), 3 problems x 4 episodes: a group's first step runs
    out of time in place, its other three together; the third problem's first timeout stops the
    run as a dead environment: 5 time limits, not 2G + 1 = 9 one after another (and the batch's
    12 closes, about 2 more, not 12 nor 2 per group), each timeout told at once."""

    class Hung(FaultyEnv):
        def close(self):
            time.sleep(30)

    end = smol_tok.convert_tokens_to_ids("<|im_end|>")
    problems = [Problem(f"p{i}", "Hi", "1") for i in range(3)]
    start = time.monotonic()
    with pytest.raises(EnvFault, match="the calls of 3 problems in a row ran out of time"):
        _play(
            smol_tok,
            [[[end]] * 3 for _ in range(12)],
            lambda: Hung(fault="hang", at=1),
            problems=problems,
            n=4,
            faults=Faults(timeout_s=0.5),
        )
    assert time.monotonic() - start < 8.5  # 7 x 0.5 s; before: (9 + 12) x 0.5 s
    told = capfd.readouterr().err.splitlines()
    line = "warning: env Hung, problem 'p0', turn 1: step() did not answer within 0.5 s"
    assert sum(t.startswith(line) for t in told) == 4


def test_a_run_with_a_hanging_environment_goes_on_and_counts_it(tmp_path, capfd):
    env = {  # the problems with an odd id hang at their second step
        "name": "envs_for_tests:FaultyEnv",
        "params": {"fault": "hang", "at": 2, "problems": ["1", "3", "5", "7", "9"]},
        "max_turns": 3,
        "max_episode_tokens": 60,
        "step_timeout_s": 0.5,
    }
    run = tmp_path / "run"
    train(build_config(tiny_config(run, steps=2, env=env, reward={"function": None})))
    rows = step_rows(run)
    faulted = [rows[s]["episodes/env_faults"] for s in (1, 2)]
    err = "".join(capfd.readouterr())  # the progress display's warnings
    assert sum(faulted) > 0  # problems with an odd id were drawn
    assert "episodes ended in an environment fault" in err
    assert "env FaultyEnv, problem '" in err and "did not answer within 0.5 s" in err
    assert all(f % 4 == 0 for f in faulted)  # whole groups (4 episodes each)
    with pytest.raises(EnvFault, match="turn 2: step\\(\\) did not answer within 0.5 s"):
        raising = {**env, "on_error": "raise", "params": {"fault": "hang", "at": 2}}
        train(
            build_config(
                tiny_config(tmp_path / "r2", steps=1, env=raising, reward={"function": None})
            )
        )
