"""The questions judges are asked: the judge rewards' default templates
(:mod:`rlvr.rewards.judged`) and the pairwise one of :mod:`rlvr.reward_models.judge_task`. Fields:
``{prompt}`` (the problem's prompt), ``{reference}`` (its reference answer), ``{completion}``
(the response judged); the pairwise question has ``{a}`` and ``{b}`` instead of ``{completion}``.
"""

POINTWISE_TEMPLATE = (
    "Here is a question and a response to it.\n\n"
    "Question:\n{prompt}\n\n"
    "Reference answer: {reference}\n\n"
    "Response:\n{completion}\n\n"
    "Is the response correct and does it answer the question? Answer Yes or No."
)
"""The default ``judge_score`` question (fields ``{prompt}``, ``{completion}``, ``{reference}``:
``problem.prompt``, the completion, ``problem.answer``)."""

GENRM_TEMPLATE = (
    "Here is a question and a response to it.\n\n"
    "Question:\n{prompt}\n\n"
    "Reference answer: {reference}\n\n"
    "Response:\n{completion}\n\n"
    "Think step by step about whether the response is correct. Then end with one line: "
    '"Verdict: Yes" if it is correct, "Verdict: No" if it is not.'
)
"""The default ``judge_genrm`` question: reasoning first, then the verdict."""

PAIRWISE_TEMPLATE = (
    "Here is a question and two responses to it.\n\n"
    "Question:\n{prompt}\n\n"
    "Reference answer: {reference}\n\n"
    "Response A:\n{a}\n\n"
    "Response B:\n{b}\n\n"
    "Which response is correct? Answer A or B."
)
"""The pairwise question (J1's form): which of two responses is correct."""
