"""Judges: verdict parsers, the local judge's exact verdict probabilities, pairwise position
bias, rubrics, the cache, failures under on_error, `rlvr serve` with the openai client, and a
run rewarded by a judge served on 127.0.0.1 (2 steps, then resumed)."""

from __future__ import annotations

import json
import math
import socket
import string
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from test_docs import tiny_run
from test_trainer import assert_same_steps, step_rows, tiny_config

from rlvr.config import ConfigError, JudgeConfig, build_config
from rlvr.data import Problem
from rlvr.reward_models.chat_model import Generation, LocalChatModel
from rlvr.reward_models.judges import Judge
from rlvr.reward_models.verdicts import (
    expected_value,
    parse_boxed,
    parse_choice,
    parse_json_field,
    parse_number,
    parse_yes_no,
)
from rlvr.rewards import build_reward
from rlvr.rewards.judged import judge_fallback, judge_genrm, judge_score, master_key
from rlvr.rewards.pairwise import bradley_terry, judge_pairwise
from rlvr.rewards.probe import probe_judge
from rlvr.rewards.protocol import RewardError
from rlvr.rewards.rubric import rubric
from rlvr.trainer import train

PROBLEM = Problem("p0", "What is 2 + 3?", "5")


class Scripted:
    """A judge model answering from Python functions of the question text, counting calls."""

    name = "scripted"

    def __init__(
        self,
        reply: Callable[[str], str] = lambda q: "Yes",
        probs: Callable[[str, Sequence[str]], list[float]] | None = None,
    ) -> None:
        self.reply, self.probs, self.questions = reply, probs, 0

    def generate(self, chats, *, max_new_tokens, temperature=0.0, n=1, stop=()):
        self.questions += len(chats)
        return [[Generation(self.reply(c[-1]["content"]), 10, 2)] * n for c in chats]

    def choice_probs(self, chats, choices):
        self.questions += len(chats)
        return [self.probs(c[-1]["content"], choices) for c in chats]


def scripted_judge(**kwargs) -> tuple[Judge, Scripted]:
    model = Scripted(**kwargs)
    return Judge(JudgeConfig(model="scripted"), model), model


# ------------------------------------------------------------------------------- verdicts


def test_verdict_parsers_on_hand_written_replies():
    assert parse_yes_no("Let me check. 2+3=5, so yes.\nVerdict: Yes") == 1.0
    assert parse_yes_no("Yes, it looks fine at first, but no: the sum is wrong.") == 0.0
    assert parse_yes_no("Eyes nod; nobody knows") is None  # not standalone words
    assert parse_number("I'd give it 7 out of 10. Final score: 8/10") == 8.0
    assert parse_number("score -2.5") == -2.5
    assert parse_number("no digits here") is None
    assert parse_boxed(r"so the score is \boxed{9} (or \boxed{\frac{1}{2}}?) \boxed{6}") == 6.0
    assert parse_boxed(r"\boxed{unclosed 4") is None
    reply = 'First {"score": 2} then ```json\n{"score": 4, "ok": true}\n```'
    assert parse_json_field(reply, "score") == 4.0
    assert parse_json_field(reply, "ok") == 1.0
    assert parse_json_field('{"verdict": "yes"}', "verdict") == 1.0
    assert parse_json_field("{broken", "score") is None
    assert parse_choice("Response A is verbose, so B is better.", ["A", "B"]) == 1
    assert parse_choice("And Bob agrees", ["A", "B"]) is None
    assert expected_value([0.3, 0.1], [1.0, 0.0]) == pytest.approx(0.75)
    assert expected_value([0.0, 0.0], [1.0, 0.0]) is None


def test_master_keys_are_guarded_without_asking_the_judge():
    for key in ["", "   ", ":", "Solution", "Let's solve this problem step by step.", "解"]:
        assert master_key(key) is not None, key
    assert master_key("The answer is 5.") is None
    judge, model = scripted_judge(probs=lambda q, c: [0.9, 0.1])
    scores = judge_score([":", "It is 5."], PROBLEM, judge)
    assert [float(s) for s in scores] == [0.0, pytest.approx(0.9)]
    assert scores[0].events == ("judge/guarded",) and model.questions == 1


# ----------------------------------------------------------------------- the local judge


@pytest.fixture(scope="module")
def local() -> LocalChatModel:
    return LocalChatModel("tiny-random-llama")


def test_p_yes_is_the_softmax_of_the_judges_logits_at_the_verdict_position(local):
    question = [{"role": "user", "content": "Is 2 + 3 = 5? Answer Yes or No."}]
    text = local.tokenizer.apply_chat_template(question, add_generation_prompt=True, tokenize=False)
    ids = local.tokenizer(text, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = local.model(input_ids=torch.tensor([ids])).logits[0, -1]
    expected = torch.softmax(logits.double(), -1)
    yes, no = (
        local.tokenizer("Yes", add_special_tokens=False)["input_ids"][0],
        local.tokenizer("No", add_special_tokens=False)["input_ids"][0],
    )
    other = [{"role": "user", "content": "A longer question, so that the batch is padded: ok?"}]
    (p_yes, p_no), _ = local.choice_probs([question, other], ["Yes", "No"])
    assert p_yes == pytest.approx(expected[yes].item(), rel=1e-5)
    assert p_no == pytest.approx(expected[no].item(), rel=1e-5)
    judge = Judge(JudgeConfig(model="tiny-random-llama"), local)
    (score,) = judge_score(["5"], PROBLEM, judge, template="Is 2 + 3 = {completion}?")
    assert 0.0 < float(score) < 1.0 and score.reason.startswith("P(Yes)=")


def test_choices_sharing_a_first_token_are_refused(local):
    with pytest.raises(ValueError, match="begin with the same token"):
        local.choice_tokens(["Yes", "Yes!"])


def test_concurrent_callers_are_batched_together(local, monkeypatch):
    """Three callers of 2 chats each that arrive while a job runs go in the next job together:
    one prefill of 6 prompts, each caller getting its own replies."""
    chats = [[{"role": "user", "content": f"question {i}"}] for i in range(6)]
    alone = local.generate(chats, max_new_tokens=4)
    batches: list[int] = []
    prefill = local.engine.decoder.prefill

    def counted(ids, *args, **kwargs):
        batches.append(ids.shape[0])
        return prefill(ids, *args, **kwargs)

    monkeypatch.setattr(local.engine.decoder, "prefill", counted)
    results: list = [None] * 3
    threads = [
        threading.Thread(
            target=lambda k=k: results.__setitem__(
                k, local.generate(chats[2 * k : 2 * k + 2], max_new_tokens=4)
            )
        )
        for k in range(3)
    ]
    with _busy(local):  # the three callers queue meanwhile
        for t in threads:
            t.start()
            _wait_queued(local, 1 + threads.index(t))
    for t in threads:
        t.join()
    assert batches == [6]  # one forward batch for the three callers
    together = [g for pair in results for g in pair]
    assert [[g.ids for g in r] for r in together] == [[g.ids for g in r] for r in alone]


@contextmanager
def _busy(model: LocalChatModel) -> Iterator[None]:
    """The model kept busy by a job of its own (verdict probabilities held in their turn) until
    the block ends: callers queue meanwhile."""
    inside, release = threading.Event(), threading.Event()
    probs = model._next_token_probs

    def held(prompts):
        inside.set()
        assert release.wait(30)
        return probs(prompts)

    model._next_token_probs = held
    chat = [{"role": "user", "content": "hold"}]
    thread = threading.Thread(target=model.choice_probs, args=([chat], ["Yes", "No"]))
    thread.start()
    try:
        assert inside.wait(30), "the model never started the job"
        yield
    finally:
        release.set()
        thread.join()
        del model._next_token_probs


def _wait_queued(model: LocalChatModel, count: int) -> None:
    """Until ``count`` requests wait for the model."""
    deadline = time.monotonic() + 30
    while len(model._scheduler._queue) < count:
        assert time.monotonic() < deadline, "the callers never queued"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def sliced() -> LocalChatModel:
    """Turns of 2 tokens, at most 2 samples at once."""
    return LocalChatModel("tiny-random-llama", slice_tokens=2, max_batch=2)


def _callers(model: LocalChatModel, calls: list[dict]) -> tuple[list[threading.Thread], list]:
    """A thread per ``generate_ids`` call (its keywords; prompt [1, 2, 3]), started in order
    once the one before has queued; its replies or error in the list."""
    out: list = [None] * len(calls)

    def call(k: int) -> None:
        try:
            out[k] = model.generate_ids([[1, 2, 3]], **calls[k])
        except Exception as err:
            out[k] = err

    threads = [threading.Thread(target=call, args=(k,), daemon=True) for k in range(len(calls))]
    for k, t in enumerate(threads):
        t.start()
        _wait_queued(model, k + 1)
    return threads, out


def test_samples_live_across_jobs_stay_within_max_batch(sliced, monkeypatch):
    """max_batch 2: a job of 2 samples keeps their caches between its turns of 2 tokens, so a
    request for 1 sample that comes meanwhile starts once that job is over, not beside it."""
    calls: list[tuple[str, int]] = []
    decoder = sliced.engine.decoder
    prefill, resume = decoder.prefill, decoder.resume

    def prefilled(ids, mask, row_prompt):
        calls.append(("prefill", len(row_prompt)))
        return prefill(ids, mask, row_prompt)

    def resumed(histories, new_tokens):
        calls.append(("resume", len(histories)))
        return resume(histories, new_tokens)

    monkeypatch.setattr(decoder, "prefill", prefilled)
    monkeypatch.setattr(decoder, "resume", resumed)
    with _busy(sliced):
        threads, out = _callers(
            sliced, [{"max_new_tokens": 6, "n": 2}, {"max_new_tokens": 6, "n": 1}]
        )
    for t in threads:
        t.join()
    assert [len(r[0]) for r in out] == [2, 1]
    assert [len(g.ids) for r in out for g in r[0]] == [6, 6, 6]
    pair = [("prefill", 2), ("resume", 2), ("resume", 2)]  # 6 tokens in turns of 2
    single = [("prefill", 1), ("resume", 1), ("resume", 1)]
    assert calls == pair + single  # not started beside the pair


def test_a_judge_without_turns_decodes_with_the_engines_generate(local, monkeypatch):
    """slice_tokens None: a job is one call of the engine's generate, which keeps no sample's
    cache past its end (no export of every row's keys and values)."""

    def refuse(rows):
        raise AssertionError("a cache was exported")

    monkeypatch.setattr(local.engine.decoder, "export", refuse)
    ((a, b),) = local.generate_ids([[1, 2, 3]], max_new_tokens=4, temperature=1.0, n=2)
    assert len(a.ids) == len(b.ids) == 4


def test_a_caller_is_answered_once_its_own_request_is_done(sliced, monkeypatch):
    """Two requests in one job, the first answered at the first turn: its caller returns then,
    while the job goes on for the second."""
    from rlvr.reward_models import chat_model

    release = threading.Event()

    class FirstThenRest:
        """A job answering its first request at its first turn, the rest once released."""

        def __init__(self, chat, batch, sampling, n, slice_tokens):
            self.batch, self.turns = batch, 0

        def step(self) -> bool:
            self.turns += 1
            if self.turns == 1:
                self.batch[0].answer(["first"])
                return False
            assert release.wait(30)
            for r in self.batch[1:]:
                r.answer(["rest"])
            return True

    monkeypatch.setattr(chat_model, "_Decoding", FirstThenRest)
    try:
        with _busy(sliced):
            (first, second), out = _callers(sliced, [{"max_new_tokens": 4}] * 2)
        first.join(timeout=10)
        assert not first.is_alive() and out[0] == ["first"]  # while the job goes on
        assert second.is_alive()
    finally:
        release.set()
    second.join()
    assert out[1] == ["rest"]


def test_a_job_that_fails_to_start_answers_every_request_in_it(sliced, monkeypatch):
    """The error of making a job reaches each of its callers (none left waiting)."""
    from rlvr.reward_models import chat_model

    def fail(*args):
        raise RuntimeError("no memory for the job")

    monkeypatch.setattr(chat_model, "_Decoding", fail)
    with _busy(sliced):
        threads, out = _callers(sliced, [{"max_new_tokens": 4}] * 2)
    for t in threads:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in threads), "a caller was left waiting"
    assert all(isinstance(e, RuntimeError) and "no memory" in str(e) for e in out), out


# ---------------------------------------------------------------------- reward kinds


def test_pairwise_order_swapping_removes_a_planted_position_bias():
    """The judge prefers the longer reply by its length difference, plus a strong bias for
    whichever reply it sees first; asked in both orders, the bias cancels."""

    def probs(question: str, choices: Sequence[str]) -> list[float]:
        a = question.split("Response A:\n")[1].split("\n\nResponse B:")[0]
        b = question.split("Response B:\n")[1].split("\n\nWhich")[0]
        p_first = 1 / (1 + math.exp(-(2.0 + 0.5 * (len(a) - len(b)))))
        return [p_first, 1 - p_first]

    judge, _ = scripted_judge(probs=probs)
    group = ["aaaa", "aa", "aaa"]  # true order: 0 > 2 > 1
    one_order = judge_pairwise(group, PROBLEM, judge, both_orders=False)
    both = judge_pairwise(group, PROBLEM, judge)
    # one order: the first-shown reply wins every pair, whatever its length
    assert one_order[1] > one_order[2]
    assert both[0] > both[2] > both[1]

    def q(d: float) -> float:  # the preference for a reply d characters longer, both orders
        return (1 / (1 + math.exp(-(2 + 0.5 * d))) + 1 - 1 / (1 + math.exp(-(2 - 0.5 * d)))) / 2

    assert float(both[0]) == pytest.approx((q(2) + q(1)) / 2)
    assert float(both[1]) == pytest.approx((q(-2) + q(-1)) / 2)
    bt = judge_pairwise(group, PROBLEM, judge, scoring="bradley_terry")
    assert bt[0] > bt[2] > bt[1] and sum(bt) == pytest.approx(0.0, abs=1e-6)


def test_bradley_terry_recovers_the_log_odds_of_a_pair():
    s = bradley_terry(torch.tensor([[0.5, 0.75], [0.25, 0.5]]), l2=1e-9)
    assert (s[0] - s[1]).item() == pytest.approx(math.log(3), rel=1e-4)


def test_rubric_weights_and_per_criterion_scores_are_logged():
    judge, _ = scripted_judge(probs=lambda q, c: [0.8, 0.2] if "polite" in q else [0.1, 0.9])
    criteria = [
        {"criterion": "is polite", "weight": 2, "label": "polite"},
        {"criterion": "mentions the sum", "check": "contains", "value": "5", "label": "sum"},
        {"criterion": "short", "check": "max_words", "value": 3, "label": "short"},
        {
            "criterion": "no shouting",
            "check": "regex",
            "value": "[A-Z]{4}",
            "weight": -1,
            "label": "shouting",
        },
    ]
    out = rubric(["It is 5", "FIVE IS THE ANSWER OK"], PROBLEM, criteria=criteria, judge=judge)
    # (2 * 0.8 + 1 + 1 - 0) / 4 and (2 * 0.8 + 0 + 0 - 1) / 4
    assert [float(x) for x in out] == [pytest.approx(0.9), pytest.approx(0.15)]
    assert out[0].parts == {"polite": pytest.approx(0.8), "sum": 1.0, "short": 1.0, "shouting": 0.0}
    reward = build_reward(
        None, terms=[{"name": rubric, "params": {"criteria": criteria, "judge": judge}}]
    )
    breakdown = reward(["It is 5", "FIVE IS THE ANSWER OK"], [PROBLEM, PROBLEM])
    metrics = breakdown.metrics()
    assert metrics["reward/rubric/polite"] == pytest.approx(0.8)
    assert metrics["reward/rubric/shouting"] == pytest.approx(0.5)
    # the judged criterion of both completions, answered by the cache of the call above
    assert metrics["judge/calls"] == 0.0 and metrics["judge/cache_hits"] == 2.0
    assert "time/judge" in metrics
    reward.close()


def test_rubric_criteria_come_from_the_problems_answer():
    problem = Problem("w", "Describe a lamp.", '[{"check": "min_words", "value": 2}, "is vivid"]')
    judge, _ = scripted_judge(probs=lambda q, c: [1.0, 0.0])
    assert [float(x) for x in rubric(["A warm lamp", "Lamp"], problem, judge=judge)] == [1.0, 0.5]
    with pytest.raises(ValueError, match="list of criteria"):
        rubric(["x"], PROBLEM)


def test_the_cache_answers_repeated_questions():
    judge, model = scripted_judge(probs=lambda q, c: [0.7, 0.3])
    first = judge_score(["It is 5", "It is 5", "It is 6"], PROBLEM, judge)
    assert model.questions == 2 and first[0].usage["judge/cache_hits"] == 1.0
    again = judge_score(["It is 6"], PROBLEM, judge)
    assert model.questions == 2 and again[0].usage["judge/cache_hits"] == 1.0
    uncached = Judge(JudgeConfig(model="scripted", cache=False), model)
    judge_score(["It is 6"], PROBLEM, uncached)
    assert model.questions == 3
    small = Judge(JudgeConfig(model="scripted", cache_size=2), model)
    judge_score(["a b", "c d", "e f"], PROBLEM, small)  # "a b" is dropped, the others kept
    judge_score(["e f", "c d"], PROBLEM, small)
    assert model.questions == 6
    judge_score(["a b"], PROBLEM, small)
    assert model.questions == 7


def test_generative_judge_keeps_its_reasoning_and_unparsed_verdicts_fail():
    judge, _ = scripted_judge(reply=lambda q: "2 + 3 is 5, matching. Verdict: Yes")
    (score,) = judge_genrm(["5"], PROBLEM, judge)
    assert float(score) == 1.0 and score.reason.startswith("2 + 3 is 5")
    mute, _ = scripted_judge(reply=lambda q: "hmm")
    with pytest.raises(ValueError, match="no yes_no verdict"):
        judge_genrm(["5"], PROBLEM, mute)
    assert float(judge_genrm(["5"], PROBLEM, mute, unparsed=0.25)[0]) == 0.25


def test_fallback_asks_the_judge_only_where_the_verifier_cannot_read_an_answer():
    judge, model = scripted_judge(probs=lambda q, c: [0.9, 0.1])
    out = judge_fallback(["Answer: 5", "\\boxed{6}", "five, I believe"], PROBLEM, judge)
    assert [float(x) for x in out] == [1.0, 0.0, pytest.approx(0.9)]
    assert [x.events for x in out] == [
        ("judge/fallback/verifier",),
        ("judge/fallback/verifier",),
        ("judge/fallback/judge",),
    ]
    assert model.questions == 1


def test_probe_reports_false_positive_and_negative_rates():
    """A judge that accepts anything ending in a period: the probe finds the keys it takes."""
    judge, _ = scripted_judge(
        probs=lambda q, c: (
            [0.9, 0.1] if q.split("Response:\n")[1].split("\n")[0].endswith(".") else [0.1, 0.9]
        )
    )
    from rlvr.data.arithmetic import ArithmeticTask

    report = probe_judge(ArithmeticTask(level=1, n_eval=4), "judge_score", {"judge": judge}, n=4)
    assert report.master_keys.total == 40
    assert (
        report.master_keys.hits == 4 * 3
    )  # ".", "Let's solve ... step.", "The answer is correct."
    assert report.wrong_accepted.rate == 1.0
    assert report.bare_reference_accepted.rate == 0.0
    assert any("master keys accepted" in line for line in report.lines())


# ------------------------------------------------------------------- failures, on_error


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def _silent_server(first_503: bool = False) -> Iterator[int]:
    """A TCP server on a free port (yielded) that never answers, except, with ``first_503``,
    its first request: read whole and answered 503 (a client retries it after a backoff)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def answer_503(conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, body = data.split(b"\r\n\r\n", 1)
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(body) < length:
            body += conn.recv(65536)
        conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn = server.accept()[0]
            except TimeoutError:
                continue
            if first_503 and not held:
                answer_503(conn)
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


@pytest.fixture
def hanging_server():
    """A TCP server that accepts and never answers."""
    with _silent_server() as port:
        yield port


def _http_terms(port: int, timeout_s: float = 5.0) -> dict:
    return {
        "judges": {
            "remote": {
                "engine": "http",
                "model": "judge",
                "base_url": f"http://127.0.0.1:{port}/v1",
                "timeout_s": timeout_s,
                "retries": 1,
            }
        },
        "terms": [{"name": "judge_score", "params": {"judge": "remote"}}],
    }


def _reward(section: dict, on_error: str):
    from rlvr.rewards.base import config_terms

    cfg = build_config({"reward": {**section, "on_error": on_error}})
    return build_reward(None, terms=config_terms(cfg.reward), on_error=on_error, timeout_s=30)


def test_a_failing_endpoint_follows_on_error():
    section = _http_terms(_dead_port())
    with _reward(section, "zero") as reward:
        breakdown = reward(["It is 5"], [PROBLEM])
    assert breakdown.total == [0.0] and breakdown.errors == {"judge_score": 1}
    assert breakdown.metrics()["judge/failures"] == 1.0
    assert "APIConnectionError" in breakdown.reasons["judge_score"][0]
    with _reward(section, "raise") as reward, pytest.raises(RewardError, match="judge_score"):
        reward(["It is 5"], [PROBLEM])


def test_a_judge_that_does_not_answer_times_out(hanging_server):
    start = time.perf_counter()
    with _reward(_http_terms(hanging_server, timeout_s=0.5), "zero") as reward:
        breakdown = reward(["It is 5"], [PROBLEM])
    assert breakdown.errors == {"judge_score": 1}
    assert "Timeout" in breakdown.reasons["judge_score"][0]
    assert time.perf_counter() - start < 20  # 2 tries of 0.5 s and the client's backoff


def test_a_judge_timing_out_at_start_up_names_the_check_and_the_settings(hanging_server):
    from rlvr.data.arithmetic import ArithmeticTask
    from rlvr.reward_models.http_model import JudgeError
    from rlvr.rewards.probe import probe_terms
    from rlvr.rewards.protocol import RewardConfigError

    section = _http_terms(hanging_server, timeout_s=0.5)
    with _reward(section, "zero") as reward, pytest.raises(RewardConfigError) as info:
        reward.check(PROBLEM)
    message = str(info.value)
    assert message.startswith("start-up check of reward 'judge_score' failed")
    assert "APITimeoutError: no answer within timeout_s = 0.5 s on each of 2 tries" in message
    assert "timeout_s or retries (reward.judges)" in message and "reward.on_error" in message
    assert "a reward is f(completion" not in message  # the reward protocol: not the problem
    cfg = build_config({"reward": section})
    with pytest.raises(JudgeError) as info:
        probe_terms(cfg.reward, ArithmeticTask(level=1, n_eval=2), n=1, threshold=0.5)
    message = str(info.value)
    assert message.startswith("judge probe of 'judge_score' (start-up, before step 1")
    assert "on each of 2 tries (retries=1): 1." in message  # 1.0 s and a little
    assert " s in all; raise the judge's timeout_s or retries" in message


def test_an_unreachable_judge_at_start_up_is_not_told_how_to_write_a_reward():
    with _reward(_http_terms(_dead_port()), "raise") as reward, pytest.raises(Exception) as info:
        reward.check(PROBLEM)
    message = str(info.value)
    assert "APIConnectionError: Connection error after 2 tries" in message
    assert "is its server up at base_url?" in message
    assert "a reward is f(completion" not in message  # the reward protocol: not the problem


def test_a_judge_that_stops_answering_fails_after_timeout_times_tries_naming_it(hanging_server):
    """4 chats, 2 at a time, at an endpoint that never answers: the first two fail after
    timeout_s x (retries + 1) (no backoff after a timeout), the two queued are not sent, and the
    error names the endpoint, its tries and the time they took."""
    from rlvr.reward_models.http_model import HttpChatModel, JudgeError

    url = f"http://127.0.0.1:{hanging_server}/v1"
    judge = HttpChatModel(url, "judge", max_concurrency=2, timeout_s=0.3, retries=2)
    chats = [[{"role": "user", "content": f"question {i}"}] for i in range(4)]
    start = time.perf_counter()
    with pytest.raises(JudgeError) as info:
        judge.generate(chats, max_new_tokens=4)
    took = time.perf_counter() - start
    assert 0.9 <= took < 3.0, took  # before: about 4 s (backoffs, the queued ones too)
    assert str(info.value).startswith(f"judge 'judge' at {url}: APITimeoutError: ")
    assert "no answer within timeout_s = 0.3 s on each of 3 tries (retries=2): " in str(info.value)


@pytest.fixture
def failing_then_hanging_server():
    """A TCP server whose first request is answered 503 (retried after a backoff) and whose
    later ones are never answered."""
    with _silent_server(first_503=True) as port:
        yield port


def test_a_timeout_after_a_retried_failure_states_the_tries_and_the_time_they_took(
    failing_then_hanging_server,
):
    """A 503 (then a 0.5 s backoff) and a timeout of 0.3 s: the error says one of two tries
    timed out and the 0.8 s they took, not timeout_s x (retries + 1) = 0.6 s."""
    from rlvr.reward_models.http_model import HttpChatModel, JudgeError

    url = f"http://127.0.0.1:{failing_then_hanging_server}/v1"
    judge = HttpChatModel(url, "judge", timeout_s=0.3, retries=1)
    with pytest.raises(JudgeError) as info:
        judge.generate([[{"role": "user", "content": "question"}]], max_new_tokens=4)
    message = str(info.value)
    assert (
        "APITimeoutError: no answer within timeout_s = 0.3 s on 1 of 2 tries (retries=1), the "
        "others failing otherwise (then a backoff): "
    ) in message, message
    took = float(message.split("(then a backoff): ")[1].split(" s in all")[0])
    assert 0.8 <= took < 10.0, message


def test_a_reward_time_limit_cutting_its_judge_short_names_the_endpoint(hanging_server):
    """reward.timeout_s (0.3 s) shorter than the judge's wait (0.5 s x 2 tries): the reward's
    timeout names the judge's endpoint and the formula of its wait."""
    from rlvr.rewards.base import config_terms

    cfg = build_config({"reward": _http_terms(hanging_server, timeout_s=0.5)})
    with (
        build_reward(None, terms=config_terms(cfg.reward), timeout_s=0.3) as reward,
        pytest.raises(RewardError) as info,
    ):
        reward(["It is 5"], [PROBLEM])
    assert (
        f"timed out after 0.3s (reward.timeout_s), before its judge at "
        f"http://127.0.0.1:{hanging_server}/v1 answered or failed (each request to it is "
        "waited for up to timeout_s x (retries + 1) = 0.5 s x 2 = 1 s, once one of its "
        "max_concurrency = 8 slots is free): raise reward.timeout_s above that"
    ) in str(info.value)


def test_a_reward_time_limit_cutting_an_inline_judge_short_names_its_wait(hanging_server):
    """A judge given inline (params.judge a mapping, not a reward.judges name) has its defaults
    filled: the timeout names its wait (retries: 2 by default), not a KeyError on retries."""
    url = f"http://127.0.0.1:{hanging_server}/v1"
    inline = {"engine": "http", "model": "judge", "base_url": url, "timeout_s": 0.5}
    terms = [{"name": "judge_score", "params": {"judge": inline}}]
    with (
        build_reward(None, terms=terms, timeout_s=0.3) as reward,
        pytest.raises(RewardError) as info,
    ):
        reward(["It is 5"], [PROBLEM])
    assert "timeout_s x (retries + 1) = 0.5 s x 3 = 1.5 s, once one of its" in str(info.value)


def test_a_term_naming_an_undefined_judge_is_a_config_error():
    with pytest.raises(ConfigError, match="names judge 'nope'"):
        build_config({"reward": {"terms": [{"name": "judge_score", "params": {"judge": "nope"}}]}})
    with pytest.raises(ConfigError, match="needs base_url"):
        build_config({"reward": {"judges": {"j": {"engine": "http", "model": "m"}}}})


# ------------------------------------------------------------------------- rlvr serve


@contextmanager
def serving(model: LocalChatModel, **app_options) -> Iterator[int]:
    """``model`` served by `rlvr serve`'s app (``create_app(model, "tiny", **app_options)``) in a
    thread, on a free port of 127.0.0.1 (yielded)."""
    import uvicorn

    from rlvr.serve import create_app

    app = create_app(model, "tiny", **app_options)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.05)
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join()


@pytest.fixture(scope="module")
def served(local):
    """The tiny model served by `rlvr serve`'s app on a free port of 127.0.0.1."""
    with serving(local) as port:
        yield f"http://127.0.0.1:{port}/v1"


def test_the_openai_client_works_against_rlvr_serve(served, local):
    import openai

    client = openai.OpenAI(base_url=served, api_key="EMPTY")
    assert [m.id for m in client.models.list().data] == ["tiny"]
    answer = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "Say hi"}],
        max_tokens=5,
        temperature=0.0,
        logprobs=True,
        top_logprobs=3,
    )
    choice = answer.choices[0]
    ids = choice.model_extra["token_ids"]
    assert answer.usage.completion_tokens == len(ids) <= 5
    assert choice.message.content == local.decode(ids)
    prompt = answer.model_extra["prompt_token_ids"]
    assert prompt == local.encode([{"role": "user", "content": "Say hi"}])
    own, top = local.reply_logprobs(prompt, ids, 3)
    content = choice.logprobs.content
    assert [c.logprob for c in content] == pytest.approx(own, abs=1e-5)
    assert content[0].top_logprobs[0].logprob == pytest.approx(top[0][0][1], abs=1e-5)
    greedy = client.completions.create(model="tiny", prompt=prompt, max_tokens=5, temperature=0)
    assert greedy.choices[0].model_extra["token_ids"] == ids  # same greedy tokens from ids
    with pytest.raises(openai.BadRequestError, match="stream is not supported"):
        client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "x"}], stream=True
        )
    with pytest.raises(openai.BadRequestError, match="needs a role"):
        client.chat.completions.create(model="tiny", messages=[{"role": "robot", "content": "x"}])
    with pytest.raises(openai.BadRequestError, match="not served here"):
        client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "x"}])


def test_a_judge_at_rlvr_serve_reads_the_verdict_probabilities_of_the_local_model(served, local):
    """Choices among the endpoint's top 20 tokens (the random tiny model ranks no Yes/No there)
    read the local model's probabilities exactly; a choice outside them reads 0."""
    from rlvr.reward_models.http_model import TOP_LOGPROBS, HttpChatModel

    remote = HttpChatModel(served, "tiny")
    chat = [{"role": "user", "content": "Is 5 odd? Answer Yes or No."}]
    with torch.no_grad():
        logits = local.model(input_ids=torch.tensor([local.encode(chat)])).logits[0, -1]
    ranked = torch.softmax(logits.double(), -1).argsort(descending=True).tolist()
    texts = [local.decode([t]) for t in ranked]
    listed = [x.strip() for x in texts[:TOP_LOGPROBS]]

    def usable(rank: int) -> bool:  # spells its own token, and no other listed token strips to it
        text = texts[rank].strip()
        ids = local.tokenizer(texts[rank], add_special_tokens=False)["input_ids"]
        return bool(text) and ids == [ranked[rank]] and listed.count(text) == (rank < TOP_LOGPROBS)

    inside = [texts[r] for r in range(TOP_LOGPROBS) if usable(r)][:3]
    outside = next(texts[r] for r in range(len(ranked) - 1, TOP_LOGPROBS, -1) if usable(r))
    assert len(inside) == 3, texts[:TOP_LOGPROBS]
    (http_probs,) = remote.choice_probs([chat], [*inside, outside])
    (local_probs,) = local.choice_probs([chat], [*inside, outside])
    assert all(p > 0 for p in local_probs)
    assert http_probs[:3] == pytest.approx(local_probs[:3], rel=1e-4)
    assert http_probs[3] == 0.0  # the endpoint lists only its top 20 tokens


def test_a_served_judges_token_usage_is_counted_for_verdict_probabilities(served, local):
    from rlvr.reward_models.http_model import HttpChatModel

    judge = Judge(JudgeConfig(model="tiny"), HttpChatModel(served, "tiny"))
    chat = [{"role": "user", "content": "Is 5 odd? Answer Yes or No."}]
    _, usage = judge.probabilities([chat], ["Yes", "No"])
    assert (usage.calls, usage.prompt_tokens, usage.completion_tokens) == (
        1,
        len(local.encode(chat)),
        1,
    )
    assert usage.metrics()["judge/prompt_tokens"] == len(local.encode(chat))


def test_a_run_rewarded_by_a_served_judge_trains_and_resumes(served, tmp_path):
    """A judge behind `rlvr serve` scores the samples by the expectation of its verdict's
    first token over 26 letters (the random tiny model ranks no Yes/No in its top 20): 4 steps
    straight against 2 steps then a resume to 4."""
    letters = {c: i / 25 for i, c in enumerate(string.ascii_lowercase)}

    def config(run_dir: Path, steps: int) -> dict:
        cfg = tiny_config(run_dir, steps=steps)
        cfg["reward"] = {
            "judges": {"tiny": {"engine": "http", "model": "tiny", "base_url": served}},
            "terms": [
                {
                    "name": "judge_score",
                    "params": {
                        "judge": "tiny",
                        "template": "Is this polite: {completion}",
                        "choices": letters,
                        "unparsed": 0.0,
                    },
                }
            ],
        }
        return cfg

    straight = tmp_path / "straight"
    train(build_config(config(straight, 4)))
    resumed = tmp_path / "resumed"
    train(build_config(config(resumed, 2)))
    train(build_config(config(resumed, 4)), resume=resumed)
    a, b = step_rows(straight), step_rows(resumed)
    assert_same_steps(a, b)
    sample = json.loads((straight / "samples.jsonl").read_text().splitlines()[0])
    assert sample["reasons"]["judge_score"].startswith("P(a)=")  # the verdict, kept
    probe = json.loads((straight / "judge_probe.json").read_text())[0]
    assert probe["master_keys_accepted"]["total"] == 20  # 10 keys x 2 problems
    assert a[1]["judge/calls"] + a[1]["judge/cache_hits"] == 8  # 2 prompts x 4 samples
    assert a[1]["reward/judge_score/mean"] > 0


def test_the_writing_config_trains_with_its_rubric_and_judge(tmp_path, monkeypatch):
    """configs/judge_writing.yaml as shipped, on the tiny model (policy and judge), 2 steps:
    every criterion of the rubric is logged, the judge's usage too, and the start-up probe."""
    from rlvr.config import load_config
    from rlvr.logging import read_metrics

    root = Path(__file__).resolve().parent.parent
    monkeypatch.chdir(root)
    overrides = [
        *tiny_run(tmp_path / "run"),
        "reward.judges.smol.model=tiny-random-llama",
        "eval.after=true",
        "eval.n_prompts=2",
        "eval.max_new_tokens=8",
    ]
    train(load_config(root / "configs" / "judge_writing.yaml", overrides))
    (final,) = [r for r in read_metrics(tmp_path / "run") if "eval/greedy_accuracy" in r]
    # held-out rubric satisfaction, per criterion, judged as in training (eval.judge: reward)
    assert 0.0 <= final["eval/greedy_reward/rubric/persuasive"] <= 1.0
    assert final["eval/greedy_reward/rubric/word_limit"] in (0.0, 0.5, 1.0)
    assert 0.0 <= final["eval/sampled_reward/rubric/fluent"] <= 1.0
    rows = [r for r in read_metrics(tmp_path / "run") if "policy/loss" in r]
    assert [r["step"] for r in rows] == [1, 2]
    for label in ("names_product", "mentions_feature", "word_limit", "persuasive", "fluent"):
        assert 0.0 <= rows[0][f"reward/rubric/{label}"] <= 1.0, label
    assert rows[0]["judge/calls"] + rows[0]["judge/cache_hits"] == 4 * 2  # 4 samples x 2 judged
    assert (tmp_path / "run" / "judge_probe.json").is_file()


def test_separation_is_the_share_of_correct_wrong_pairs_ranked_right():
    from rlvr.rewards.probe import ProbeRate, ProbeReport

    rows = [("correct", "", 0.8), ("correct", "", 0.4), ("wrong", "", 0.4), ("wrong", "", 0.2)]
    rate = ProbeRate(0, 0)
    report = ProbeReport("j", 0.5, rate, rate, rate, rate, rows)
    assert report.separation == pytest.approx((1 + 1 + 0.5 + 1) / 4)
    assert ProbeReport("j", 0.5, rate, rate, rate, rate, rows[:2]).separation is None


def test_rlvr_serve_from_the_command_line(tmp_path):
    """`rlvr serve MODEL --port 0` prints its URL once it listens and answers there."""
    import subprocess
    import urllib.request

    from cli_forkserver import rlvr_command

    with subprocess.Popen(
        [*rlvr_command(), "serve", "tiny-random-llama", "--port", "0", "--name", "tiny"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as process:
        try:
            line = process.stdout.readline()
            assert "serving tiny at" in line, line
            url = line.split(" at ")[1].split()[0]
            with urllib.request.urlopen(f"{url}/models", timeout=30) as answer:
                assert json.loads(answer.read())["data"][0]["id"] == "tiny"
        finally:
            process.terminate()
    bad = subprocess.run(
        [*rlvr_command(), "serve", "tiny-random-llama", "--dtype", "int3"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "fp32, bf16 or fp16" in bad.stderr
