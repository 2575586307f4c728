"""Answer extraction, number parsing and the numeric reward."""

import pytest

from rlvr.rewards import extract_answer, numeric_match, numeric_reward, parse_number


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is 71.", "71"),
        ("\\boxed{71}", "71"),
        ("Answer: 1,234", "1,234"),
        ("so 12 - 5 = 7\n\nAnswer: 7", "7"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("Answer: -3", "-3"),
        ("The difference is -25, so\nAnswer: -25", "-25"),
        ("I have no idea.", None),
        ("", None),
        ("First 23 + 48 = 71. Then 71 * 2 = 142", "142"),
        ("23 + 48 = 71\nFinal answer: 71", "71"),
        ("Final Answer: The final answer is $\\boxed{42}$. I hope it is correct.", "42"),
        ("**Answer:** 71", "71"),
        ("Answer:\n\n  56", "56"),
        ("answer: 3.5 apples", "3.5"),
        ("The answer is 3/4 of the pie.", "3/4"),
        ("Answer: \\frac{3}{4}", "\\frac{3}{4}"),
        ("Answer: seventy-one.", "seventy-one"),
        ("We get \\boxed{12} first, then correct it: \\boxed{13}. Answer: 99", "13"),
        ("\\boxed{}\nAnswer: 8", "8"),
        ("Answer: 5\nWait, recheck. The answer is 6", "6"),
        ("10-3 gives", "3"),
        ("x = (-4)", "-4"),
        ("Total: $1,234.50", "1,234.50"),
        ("Let me answer this. 5 + 3 = 8", "8"),
    ],
)
def test_extract_answer(text: str, expected: str | None) -> None:
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    ("s", "expected"),
    [
        ("1,234", 1234.0),
        ("-3.5", -3.5),
        ("3/4", 0.75),
        ("\\frac{3}{4}", 0.75),
        ("\\dfrac{-1}{4}", -0.25),
        ("-\\frac{1}{2}", -0.5),
        ("$42$", 42.0),
        ("42.", 42.0),
        (" 71 ", 71.0),
        ("+5", 5.0),
        ("1,234,567.25", 1234567.25),
        ("abc", None),
        ("", None),
        ("nan", None),
        ("inf", None),
        ("1/0", None),
        ("12,34", None),
        ("4 apples", None),
    ],
)
def test_parse_number(s: str, expected: float | None) -> None:
    assert parse_number(s) == expected


@pytest.mark.parametrize(
    ("completion", "answer", "expected"),
    [
        ("23 + 48 = 71\nAnswer: 71", "71", True),
        ("Answer: 71.0", "71", True),
        ("Answer: 70", "71", False),
        ("The answer is 1,234.", "1234", True),
        ("\\boxed{\\frac{1}{2}}", "0.5", True),
        ("Answer: 1/3", "0.3333333333", True),
        ("Answer: -25", "-25", True),
        ("Answer: 25", "-25", False),
        ("no number here", "7", False),
        ("Answer: Paris", "Paris", True),
        ("Answer: Paris", "London", False),
    ],
)
def test_numeric_match(completion: str, answer: str, expected: bool) -> None:
    assert numeric_match(completion, answer) is expected


def test_numeric_match_tolerance() -> None:
    assert not numeric_match("Answer: 1.001", "1")
    assert numeric_match("Answer: 1.001", "1", rel_tol=1e-2)


def test_numeric_reward_is_binary() -> None:
    assert numeric_reward("Answer: 7", "7") == 1.0
    assert numeric_reward("Answer: 8", "7") == 0.0
    assert numeric_reward("", "7") == 0.0
