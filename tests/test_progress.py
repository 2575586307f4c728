"""The training progress display: plain lines in logs, a live line in a terminal, ETA and
elapsed time from step 1, and the "nothing is learning" warning."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from rlvr.progress import (
    ProgressDisplay,
    StallDetector,
    clock_text,
    first_action,
    mean_step_seconds,
    stall_message,
)

METRICS = {"reward/mean": 0.4123, "reward/accuracy": 0.375, "response/length_mean": 41.4}
SAMPLE = {
    "prompt": "What is 2 + 2? [bold]not markup[/bold]",
    "answer": "4",
    "completion": "The answer is 5.",
    "reward": 0.0,
    "terms": {"format": 0.0, "correctness": 0.0},
}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _plain_display(total: int = 30, start: int = 0, enabled: bool = True, width: int = 40):
    out, clock = io.StringIO(), FakeClock()
    console = Console(file=out, width=width)  # a StringIO is not a terminal: plain mode
    return ProgressDisplay(total, start, enabled, console=console, clock=clock), out, clock


def test_plain_lines_time_from_step_1_and_eta_from_step_2() -> None:
    p, out, clock = _plain_display()
    clock.now += 50  # model loading: not counted
    with p:
        p.phase("eval")  # the evaluation before training: not counted either
        clock.now += 20
        p.print("[dim]before training:[/] greedy accuracy 10.0%")
        for step, seconds in zip((1, 2, 3), (30.0, 12.0, 12.2), strict=True):
            p.phase("sampling")
            clock.now += seconds / 2
            p.phase("training")
            clock.now += seconds / 2
            p.update(step, METRICS)
    lines = out.getvalue().splitlines()
    assert lines == [
        "eval: started",
        "before training: greedy accuracy 10.0%",  # markup rendered away
        "eval: done in 0:00:20",
        # step 1 alone: its own time, no ETA yet
        "step 1/30 reward 0.412 acc 0.38 len 41 s/step 30.0 elapsed 0:00:30 eta -",
        # from step 2: mean step time without step 1 (12.0), times the 28 steps left
        "step 2/30 reward 0.412 acc 0.38 len 41 s/step 12.0 elapsed 0:00:42 eta 0:05:36",
        # (12.0 + 12.2) / 2 = 12.1 s/step x 27 steps = 326.7 s
        "step 3/30 reward 0.412 acc 0.38 len 41 s/step 12.1 elapsed 0:00:54 eta 0:05:27",
    ]  # one line each although the console is 40 columns wide: never wrapped


def test_resumed_run_counts_only_this_process() -> None:
    p, out, clock = _plain_display(total=30, start=20)
    with p:
        for step in (21, 22, 23):
            p.phase("sampling")
            clock.now += 100.0 if step == 21 else 10.0
            p.update(step, {})
            p.phase("checkpoint")  # a long phase: start and end lines
            clock.now += 5.0
    lines = out.getvalue().splitlines()
    assert lines[0] == "step 21/30 s/step 100.0 elapsed 0:01:40 eta -"
    assert lines[1:3] == ["checkpoint: started", "checkpoint: done in 0:00:05"]
    assert lines[3] == "step 22/30 s/step 15.0 elapsed 0:01:55 eta 0:02:00"  # 8 x 15 s
    assert lines[-2:] == ["checkpoint: started", "checkpoint: done in 0:00:05"]  # closed by exit


def test_disabled_display_prints_messages_only() -> None:
    p, out, clock = _plain_display(enabled=False)
    with p:
        p.phase("eval")
        p.phase("sampling")
        p.update(1, METRICS)
        p.print("hello")
        p.warn("careful")
    assert out.getvalue().splitlines() == ["hello", "warning: careful"]


def test_unknown_phase_is_refused() -> None:
    p, _, _ = _plain_display()
    with pytest.raises(ValueError, match="unknown phase 'rollout'.*sampling, scoring"):
        p.phase("rollout")


def test_terminal_shows_a_live_line_with_phase_and_fields() -> None:
    out, clock = io.StringIO(), FakeClock()
    console = Console(file=out, force_terminal=True, width=140)
    with ProgressDisplay(3, 0, True, console=console, clock=clock) as p:
        assert p.live is not None
        p.phase("sampling")
        clock.now += 4.0
        p.live.refresh()
        assert "sampling" in out.getvalue() and "step 0/3" in out.getvalue()
        p.update(1, METRICS)
        p.phase("sampling")
        clock.now += 6.0
        p.update(2, METRICS)
        p.warn("nothing [is] learning")
    assert "\x1b[" in out.getvalue()  # styled
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    for part in ("step 2/3", "reward 0.412", "acc 0.38", "len 41", "s/step 6.0", "eta 0:00:06"):
        assert part in text
    assert "elapsed 0:00:10" in text and "warning: nothing [is] learning" in text
    assert "step 1/3 reward" not in text  # no plain per-step lines in a terminal


def test_clock_and_step_time_helpers() -> None:
    assert clock_text(None) == "-" and clock_text(327.4) == "0:05:27"
    assert clock_text(3 * 3600 + 61) == "3:01:01"
    assert mean_step_seconds([], 0.0) is None
    assert mean_step_seconds([30.0], 0.0) == 30.0  # the first step alone
    assert mean_step_seconds([30.0, 42.0, 56.0], 0.0) == 13.0  # (12 + 14) / 2, step 1 left out


def test_stall_detector_fires_once_per_stall() -> None:
    flat = {"groups/zero_variance_frac": 1.0}
    learning = {"groups/zero_variance_frac": 0.5}
    detector = StallDetector(k=3)
    fired = [detector.observe(m) for m in [flat, flat, learning, flat, flat, flat, flat, flat]]
    assert fired == [False, False, False, False, False, True, False, False]
    fired = [detector.observe(m) for m in [learning, flat, flat, flat]]
    assert fired == [False, False, False, True]  # learned, then stalled again
    # Dynamic sampling drops equal-reward groups: no informative group in any draw is a stall.
    dapo = {"groups/zero_variance_frac": 0.0, "sampling/informative_frac": 0.0}
    assert [StallDetector(k=1).observe(m) for m in (dapo, {})] == [True, False]


def test_stall_message_shows_the_sample_and_its_reward_terms() -> None:
    text = stall_message(3, 0.0, SAMPLE)
    assert text.splitlines() == [
        "nothing is learning: every group's rewards are equal for 3 steps (reward 0.000); "
        "check the reward against a sample:",
        "  prompt: What is 2 + 2? [bold]not markup[/bold]",
        "  answer: 4",
        "  completion: The answer is 5.",
        "  reward: 0.000 (format 0.000, correctness 0.000)",
    ]
    long = stall_message(5, 1.0, {"prompt": "p\nq", "completion": "x" * 1000, "reward": 1.0})
    assert "  prompt: p\n    q" in long  # continuation lines indented
    assert "x" * 600 + "... (400 more chars)" in long
    assert long.endswith("  reward: 1.000")  # no terms logged: no breakdown


EPISODE = [  # a worked example in the prompt, then two actions of the policy
    {"role": "system", "content": "Use calc."},
    {"role": "user", "content": "What is 1 + 1?"},
    {"role": "assistant", "content": "Action: calc[1 + 1]"},
    {"role": "tool", "content": "2"},
    {"role": "assistant", "content": "Answer: 2"},
    {"role": "user", "content": "What is 3 * 5?"},
    {"role": "assistant", "content": "Action: calc[3 * 5]"},
    {"role": "tool", "content": "15"},
    {"role": "assistant", "content": "Answer: 16"},
    {"role": "user", "content": "Wrong."},
]


def test_an_agent_episode_is_told_apart_from_its_prompt_and_shown_whole() -> None:
    assert first_action(EPISODE, [0.0, 0.0]) == 6
    assert first_action(EPISODE, None) == 2 and first_action(EPISODE[:2], [0.0]) == 2
    text = stall_message(
        3,
        0.0,
        {
            "prompt": "What is 3 * 5?",
            "transcript": EPISODE,
            "turn_rewards": [0.0, 0.0],
            "completion": "Answer: 16",
            "reward": 0.0,
        },
    )
    assert "  episode: [turn 1, reward 0.000] Action: calc[3 * 5]\n    [tool] 15\n" in text
    assert "[turn 2, reward 0.000] Answer: 16\n    [user] Wrong." in text
    assert "calc[1 + 1]" not in text  # the worked example is the prompt's


def test_stall_check_warns_in_plain_output() -> None:
    p, out, _ = _plain_display(width=60)
    flat = {**METRICS, "reward/mean": 0.0, "groups/zero_variance_frac": 1.0}
    with p:
        assert [p.stall_check(flat, SAMPLE) for _ in range(4)] == [False, False, True, False]
    text = out.getvalue()
    assert text.count("warning: nothing is learning") == 1
    assert "equal for 3 steps (reward 0.000)" in text
    assert "[bold]not markup[/bold]" in text  # model/user text is not parsed as markup
    assert "\x1b[" not in text


def test_a_slow_start_up_phase_is_shown_while_it_runs_and_timed_a_quick_one_is_not(capsys):
    """rlvr.progress.startup: a phase still running after ``quiet_s`` prints its start, then
    its seconds when it ends; one that ends sooner prints nothing."""
    import time

    from rlvr.progress import startup

    with startup("loading the policy big", quiet_s=0.05):
        time.sleep(0.3)
        assert capsys.readouterr().err == "start: loading the policy big ...\n"  # while it runs
    end = capsys.readouterr().err
    assert end.startswith("start: loading the policy big: ") and end.endswith(" s\n")
    with startup("building the learner", quiet_s=5.0):
        pass
    assert capsys.readouterr().err == ""
