"""Verifiable rewards on real examples: math-verify equivalences, numbers, strings, multiple
choice, format tags, JSON Schema, BLEU/chrF, DAPO overlong, DLER truncation and RLSP's
exploration reward."""

from __future__ import annotations

import json

import pytest

from rlvr.answers import answer_span, extract_choice, normalize_text
from rlvr.data.base import Problem
from rlvr.rewards import CombinedReward
from rlvr.rewards.exploration import reasoning_length, rlsp_exploration
from rlvr.rewards.final_answer import exact_match, math_reward, multiple_choice, numeric
from rlvr.rewards.length import length_truncation, overlong_penalty, truncation_penalty
from rlvr.rewards.similarity import bleu_reward, chrf_reward, sentence_bleu
from rlvr.rewards.structure import (
    extract_json_text,
    format_reward,
    json_schema_reward,
    tags_in_order,
)


def _p(answer: str) -> Problem:
    return Problem("p1", "question", answer)


# --- math (math-verify) ---------------------------------------------------------------------


@pytest.mark.parametrize("gold", ["1/2", "0.5", r"\frac{1}{2}", r"\dfrac12"])
@pytest.mark.parametrize(
    "completion",
    [
        r"so the answer is \boxed{0.5}",
        r"\boxed{\frac{1}{2}}",
        "The answer is 1/2",
        r"$\frac{2}{4}$",
    ],
)
def test_math_half_in_every_notation(gold, completion):
    assert math_reward(completion, _p(gold)) == 1.0


@pytest.mark.parametrize(
    "gold, completion",
    [
        ("1/2", r"\boxed{0.6}"),
        ("1/2", r"\boxed{2}"),
        ("3", "I have no idea"),
        (r"\{1,2,3\}", r"\boxed{\{1,2\}}"),
        ("(0,1]", r"\boxed{[0,1]}"),
        ("(0,1]", r"\boxed{(0,1)}"),
    ],
)
def test_math_wrong_answers_score_zero(gold, completion):
    assert math_reward(completion, _p(gold)) == 0.0


def test_math_boxed_extraction_takes_the_box():
    text = r"First try 5. Actually 7 is wrong too. Final: \boxed{3}"
    assert math_reward(text, _p("3")) == 1.0
    assert math_reward(text, _p("5")) == 0.0


@pytest.mark.parametrize(
    "gold, completion",
    [
        (r"\{1,2,3\}", r"\boxed{\{3,2,1\}}"),
        ("(0,1]", r"\boxed{(0,1]}"),
        ("[2, \\infty)", r"\boxed{[2,\infty)}"),
        ("x^2+2x+1", r"\boxed{(x+1)^2}"),
        (r"\frac{\sqrt{2}}{2}", r"\boxed{\frac{1}{\sqrt{2}}}"),
    ],
)
def test_math_sets_intervals_and_expressions(gold, completion):
    assert math_reward(completion, _p(gold)) == 1.0


def test_math_unparsable_reference_is_an_error():
    with pytest.raises(ValueError, match="cannot parse the answer"):
        math_reward(r"\boxed{1}", _p(""))


def test_math_in_thread_workers_matches_main_thread():
    completions = [r"\boxed{0.5}", r"\boxed{1}", "1/2"]
    with CombinedReward([("math", 1.0)], max_workers=2) as reward:
        out = reward(completions, [_p(r"\frac{1}{2}")] * 3)
    assert out.total == [1.0, 0.0, 1.0]


# --- numbers and strings --------------------------------------------------------------------


def test_numeric_with_tolerance():
    assert numeric("Answer: 3.14159", _p("3.1416")) == 0.0
    assert numeric("Answer: 3.14159", _p("3.1416"), rel_tol=1e-4) == 1.0
    assert numeric("Answer: 1,234", _p("1234")) == 1.0


def test_answer_span_priorities():
    assert answer_span("<think>..</think><answer> Paris </answer>") == "Paris"
    assert answer_span(r"it is \boxed{Paris}") == "Paris"
    assert answer_span("blah\nThe answer is: Paris.\nBye") == "Paris."
    assert answer_span("  Paris ") == "Paris"


def test_exact_match_normalises():
    assert normalize_text("The  Eiffel Tower!") == "eiffel tower"
    assert normalize_text("U.S.A") == normalize_text("USA")
    assert exact_match("Answer: the Eiffel Tower.", _p("Eiffel Tower")) == 1.0
    assert exact_match(r"\boxed{\text{Paris}}", _p("paris")) == 1.0
    assert exact_match("Answer: London", _p("Paris")) == 0.0
    assert exact_match("Answer: NYC", _p("x"), answers=["New York", "NYC"]) == 1.0
    assert exact_match("", _p("")) == 0.0


@pytest.mark.parametrize(
    "text, letter",
    [
        ("Answer: C", "C"),
        ("The answer is (C).", "C"),
        (r"so \boxed{C}", "C"),
        (r"\boxed{\text{(D)}}", "D"),
        ("(B) is tempting, but (C)", "C"),
        ("**Answer:** **E**", "E"),
        ("B", "B"),
        ("A car is fast. Answer: a car", None),
        ("no letter here", None),
    ],
)
def test_extract_choice(text, letter):
    assert extract_choice(text) == letter


def test_multiple_choice_reward():
    assert multiple_choice("I think... Answer: (B)", _p("B")) == 1.0
    assert multiple_choice("I think... Answer: (B)", _p("(C)")) == 0.0
    assert multiple_choice(r"\boxed{b}", _p("B")) == 0.0  # letters are upper case
    with pytest.raises(ValueError, match="not a choice"):
        multiple_choice("Answer: A", _p("Paris"))


# --- format ---------------------------------------------------------------------------------


def test_format_default_is_the_answer_line_every_prompt_asks_for():
    assert format_reward("2 + 2 = 4\nAnswer: 4", _p("")) == 1.0
    assert format_reward("so\nFinal answer: 4\n\n", _p("")) == 1.0
    missing = format_reward("Answer: 4\nthat's all", _p(""))
    assert missing == 0.0 and "Answer: <answer>" in missing.reason
    assert format_reward("Answer:", _p("")) == 0.0


TAGS = ["think", "answer"]


def test_format_tags():
    good = "<think>2+2 is 4</think>\n<answer>4</answer>"
    assert format_reward(good, _p(""), tags=TAGS) == 1.0
    assert format_reward("<answer>4</answer><think>x</think>", _p(""), tags=TAGS) == 0.0
    missing = format_reward("<think>x</think>", _p(""), tags=TAGS)
    assert missing == 0.0 and "<answer> occurs 0 times" in missing.reason
    twice = "<think>a</think><think>b</think><answer>4</answer>"
    assert format_reward(twice, _p(""), tags=TAGS) == 0.0
    assert format_reward("Sure! " + good, _p(""), tags=TAGS) == 0.0
    assert format_reward("Sure! " + good, _p(""), tags=TAGS, strict=False) == 1.0
    assert tags_in_order("<a></b><b></a>", ["a", "b"]) is not None


def test_format_regex():
    pattern = r"<think>.*?</think>\s*Answer: \d+"
    assert format_reward("<think>x\ny</think> Answer: 42", _p(""), pattern=pattern) == 1.0
    assert format_reward("<think>x</think> Answer: forty", _p(""), pattern=pattern) == 0.0
    assert format_reward("hi <think>x</think> Answer: 4!", _p(""), pattern=pattern) == 0.0
    relaxed = format_reward("hi <think>x</think> Answer: 4!", _p(""), pattern=pattern, strict=False)
    assert relaxed == 1.0
    with pytest.raises(ValueError, match="invalid regular expression"):
        format_reward("x", _p(""), pattern="(unclosed")


# --- JSON Schema ----------------------------------------------------------------------------

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def test_json_schema_valid_from_fenced_block_and_problem_answer():
    text = 'Here you go:\n```json\n{"name": "Ada", "age": 36, "tags": ["math"]}\n```\nDone.'
    assert json_schema_reward(text, _p(json.dumps(PERSON))) == 1.0
    assert json_schema_reward('{"name": "Ada", "age": 36}', _p(""), schema=PERSON) == 1.0
    assert extract_json_text("```\n[1]\n```") == "[1]"


@pytest.mark.parametrize(
    "text, why",
    [
        ('{"name": "Ada", "age": 36', "invalid JSON"),
        ("```json\n{'name': 'Ada'}\n```", "invalid JSON"),
        ("", "invalid JSON"),
        ('{"name": "Ada"}', "'age' is a required property"),
        ('{"name": "Ada", "age": -1}', "schema violation at age"),
        ('{"name": "Ada", "age": "36"}', "is not of type 'integer'"),
        ('{"name": "Ada", "age": 3, "x": 1}', "Additional properties"),
        ('{"name": "Ada", "age": 3, "tags": [1]}', "schema violation at tags/0"),
        ("[" * 100000 + "]" * 100000, "invalid JSON"),
    ],
)
def test_json_schema_failures_score_zero_with_reason(text, why):
    score = json_schema_reward(text, _p(""), schema=PERSON)
    assert score == 0.0
    assert why in score.reason


def test_json_schema_bad_schema_is_an_error():
    with pytest.raises(ValueError, match="invalid JSON Schema"):
        json_schema_reward("{}", _p(""), schema={"type": "no-such-type"})
    with pytest.raises(ValueError, match="answer is not valid JSON"):
        json_schema_reward("{}", _p("not json"))


def test_json_schema_per_sample_field():
    with CombinedReward([("json_schema", 1.0)]) as reward:
        out = reward(
            ['{"a": 1}', '{"a": 1}'],
            [_p("")] * 2,
            schema=[{"required": ["a"]}, {"required": ["b"]}],
        )
    assert out.total == [1.0, 0.0]


# --- BLEU / chrF ----------------------------------------------------------------------------


def test_bleu_and_chrf_sanity():
    ref = "The quick brown fox jumps over the lazy dog."
    assert bleu_reward(ref, _p(ref)) == pytest.approx(1.0)
    assert chrf_reward(ref, _p(ref)) == pytest.approx(1.0)
    assert bleu_reward("Quantum chromodynamics explains gluons.", _p(ref)) < 0.05
    assert chrf_reward("Quantum chromodynamics explains gluons.", _p(ref)) < 0.2
    close = bleu_reward("The quick brown fox jumped over the lazy dog.", _p(ref))
    assert 0.3 < close < 1.0
    assert sentence_bleu("hi", ["hi"]) == pytest.approx(1.0)


def test_bleu_multiple_references_and_think_stripping():
    refs = ["Paris is the capital of France.", "The capital of France is Paris."]
    text = "<think>hmm, France...</think>The capital of France is Paris."
    assert bleu_reward(text, _p("unused"), references=refs) == pytest.approx(1.0)
    assert bleu_reward(text, _p("unused"), references=refs, strip_think=False) < 1.0
    with pytest.raises(ValueError, match="non-empty list"):
        bleu_reward("x", _p("y"), references=[])


# --- length ---------------------------------------------------------------------------------


def test_dapo_overlong_penalty():
    # L_max = 20, L_cache = 4: free up to 16, linear to -1 at 20, -1 beyond
    assert overlong_penalty(10, 20, 4) == 0.0
    assert overlong_penalty(16, 20, 4) == 0.0
    assert overlong_penalty(17, 20, 4) == pytest.approx(-0.25)
    assert overlong_penalty(18, 20, 4) == pytest.approx(-0.5)
    assert overlong_penalty(20, 20, 4) == pytest.approx(-1.0)
    assert overlong_penalty(21, 20, 4) == -1.0
    assert overlong_penalty(21, 20, 0) == -1.0 and overlong_penalty(20, 20, 0) == 0.0
    with pytest.raises(ValueError, match="cache_length"):
        overlong_penalty(1, 20, 30)


def test_dapo_overlong_added_to_task_reward():
    specs = [("exact_match", 1.0), ("overlong", 1.0, {"max_length": 20, "cache_length": 4})]
    with CombinedReward(specs) as reward:
        out = reward(["Answer: 42"] * 3, [_p("42")] * 3, num_tokens=[10, 18, 25])
    assert out.components["overlong"] == [0.0, -0.5, -1.0]
    assert out.total == [1.0, 0.5, 0.0]


def test_dler_truncation_penalty():
    assert truncation_penalty(1.0, 100, 100) == 1.0
    assert truncation_penalty(1.0, 101, 100) == 0.0
    assert length_truncation(r"\boxed{0.5}", _p("1/2"), num_tokens=50, max_tokens=64) == 1.0
    assert length_truncation(r"\boxed{0.5}", _p("1/2"), num_tokens=65, max_tokens=64) == 0.0
    inner = {"reward": "exact_match", "reward_params": {"answers": ["x"]}}
    assert length_truncation("Answer: x", _p("y"), num_tokens=5, max_tokens=8, **inner) == 1.0
    with CombinedReward([("length_truncation", 1.0, {"max_tokens": 64})]) as reward:
        out = reward([r"\boxed{3}", r"\boxed{3}"], [_p("3")] * 2, num_tokens=[10, 100])
    assert out.total == [1.0, 0.0]


def test_rlsp_rewards_the_reasoning_before_the_box_for_right_and_wrong_answers():
    """L = characters before the first \\boxed{ / 4: 800 characters of reasoning are L = 200,
    so -1000 / 200 = -5 whatever the answer; 4000 give -1; 100 characters (L = 25, -40) hit the
    floor -10; without a box the whole text counts. Beside the verifier (weights 1 and 1) the
    total is outcome - C / L, their server's reward."""
    long, short = "x" * 796 + r" so \boxed{4}", "y" * 100 + r"\boxed{4}"
    assert reasoning_length(long) == 200 and reasoning_length("z" * 40) == 10
    assert rlsp_exploration(long, _p("4")) == -5.0
    assert rlsp_exploration("w" * 4000 + r"\boxed{5}", _p("4")) == -1.0
    assert (
        rlsp_exploration(short, _p("4")) == -10.0
        and rlsp_exploration(r"\boxed{4}", _p("4")) == -10.0
    )
    assert rlsp_exploration(long, _p("4"), c=0.0) == 0.0
    with pytest.raises(ValueError, match="c must be >= 0"):
        rlsp_exploration(long, _p("4"), c=-1.0)
    terms = [("math", 1.0, {}), ("rlsp_exploration", 1.0, {"c": 1000.0})]
    with CombinedReward(terms) as reward:
        out = reward([long, long.replace("{4}", "{5}")], [_p("4"), _p("4")])
    assert out.total == [1.0 - 5.0, -5.0]


def test_rlsps_reward_trains_from_yaml_beside_the_verifier(tmp_path):
    """``reward.terms: [task, rlsp_exploration]`` on the tiny model: each logged sample's reward
    is its verdict plus max(-C / L, -10), and the term's mean is logged."""
    from test_trainer import tiny_config

    from rlvr.config import build_config
    from rlvr.trainer import train

    cfg = tiny_config(tmp_path / "run", steps=1)
    cfg["reward"] = {
        "terms": [{"name": "task"}, {"name": "rlsp_exploration", "params": {"c": 20.0}}]
    }
    cfg["logging"]["samples_per_step"] = 8
    train(build_config(cfg))
    rows = [json.loads(x) for x in (tmp_path / "run/samples.jsonl").read_text().splitlines()]
    assert len(rows) == 8
    for row in rows:
        explore = rlsp_exploration(row["completion"], _p(row["answer"]), c=20.0)
        assert row["terms"]["rlsp_exploration"] == pytest.approx(explore)
        assert row["reward"] == pytest.approx(row["terms"]["task"] + explore)
    assert any(row["terms"]["rlsp_exploration"] > -10.0 for row in rows)
