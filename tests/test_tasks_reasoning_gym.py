"""reasoning-gym adapter: splits, prompts, scoring through the dataset's own verifier."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from rlvr.config import ConfigError, build_config
from rlvr.data import TASKS, Problem, make_task
from rlvr.data.reasoning_gym import ReasoningGymTask, extract_final_answer


def test_extract_final_answer() -> None:
    assert extract_final_answer("work\nAnswer: 42") == "42"
    assert extract_final_answer("Answer: **blue whale**.") == "blue whale"
    assert extract_final_answer("<answer> [1, 2, 3] </answer>\nAnswer: 7") == "[1, 2, 3]"
    assert extract_final_answer("Answer:\n\n  -17  \n") == "-17"
    assert extract_final_answer("so\n\nthe sum is 12\n\n") == "the sum is 12"
    assert extract_final_answer("wait...") == "wait..."
    assert extract_final_answer("") is None and extract_final_answer(" \n ") is None


def test_missing_package_names_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)
    with pytest.raises(ImportError, match="pip install reasoning-gym"):
        ReasoningGymTask("chain_sum")


def test_registry_and_config_names() -> None:
    assert "reasoning_gym:<name>" in TASKS
    cfg = build_config(
        {"task": {"name": "reasoning_gym:chain_sum", "dataset_kwargs": {"min_terms": 2}}}
    )
    assert cfg.task.name == "reasoning_gym:chain_sum" and cfg.task.dataset_kwargs == {
        "min_terms": 2
    }
    with pytest.raises(ConfigError, match="reasoning_gym:NAME"):
        build_config({"task": {"name": "reasoning_gym:"}})
    with pytest.raises(ConfigError, match=r"dataset_kwargs only applies to reasoning_gym"):
        build_config({"task": {"name": "arithmetic", "dataset_kwargs": {"min_terms": 2}}})
    with pytest.raises(ConfigError, match=r"dataset_kwargs cannot set \['seed'\]"):
        build_config({"task": {"name": "reasoning_gym:chain_sum", "dataset_kwargs": {"seed": 1}}})


needs_rg = pytest.mark.skipif(
    importlib.util.find_spec("reasoning_gym") is None, reason="reasoning-gym is not installed"
)


def _question(task: ReasoningGymTask, problem: Problem) -> str:
    return task.entry(problem)["question"]


@needs_rg
@pytest.mark.parametrize("dataset", ["chain_sum", "basic_arithmetic"])
def test_splits_deterministic_and_disjoint(dataset: str) -> None:
    task = make_task(f"reasoning_gym:{dataset}", seed=5, n_eval=30, size=300)
    assert isinstance(task, ReasoningGymTask) and task.name == f"reasoning_gym:{dataset}"
    again = ReasoningGymTask(dataset, seed=5, n_eval=30, size=300)
    train = [task.train_problem(i) for i in range(400)]  # more than one epoch
    assert train == [again.train_problem(i) for i in range(400)]
    assert task.eval_problems() == again.eval_problems() and len(task.eval_problems()) == 30
    held = {_question(task, p) for p in task.eval_problems()}
    assert len(held) == 30
    assert not {_question(task, p) for p in train} & held
    first = train[0]
    entry = task.entry(first)
    assert first.answer == str(entry["answer"]) and entry["question"] in first.prompt
    assert first.prompt.endswith("'Answer: <answer>'.")
    assert first.id.startswith(f"rg-{dataset}-train-")
    other = ReasoningGymTask(dataset, seed=6, n_eval=1, size=300)
    assert [other.train_problem(i) for i in range(20)] != train[:20]


@needs_rg
def test_training_skips_held_out_questions_in_a_small_space() -> None:
    # Two one-digit terms: at most 100 distinct sums, so the eval and train streams collide.
    options = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
    task = ReasoningGymTask("chain_sum", seed=0, n_eval=40, size=200, **options)
    held = {_question(task, p) for p in task.eval_problems()}
    assert len(held) == len(task.eval_problems()) > 0
    train_questions = {_question(task, task.train_problem(i)) for i in range(200)}
    assert train_questions and not train_questions & held
    assert all(task.entry(p)["metadata"]["num_terms"] == 2 for p in task.eval_problems())


@needs_rg
def test_score_uses_dataset_verifier() -> None:
    task = ReasoningGymTask("chain_sum", seed=1, n_eval=5, size=50)
    problem = task.eval_problems()[0]
    right, wrong = problem.answer, str(int(problem.answer) + 1)
    assert task.score(f"Adding up...\nAnswer: {right}", problem) == 1.0
    assert task.score(f"<answer>{right}</answer>", problem) == 1.0
    assert task.score(f"the terms\n{right}", problem) == 1.0
    assert task.score(f"Answer: {wrong}", problem) == 0.0
    assert task.score("", problem) == 0.0
    train = task.train_problem(3)
    assert task.score(f"Answer: {train.answer}", train) == 1.0
    # A fresh task (e.g. rebuilt to rescore an eval directory) regenerates items from the ids.
    rebuilt = ReasoningGymTask("chain_sum", seed=1, n_eval=5, size=50)
    assert rebuilt.score(f"Answer: {right}", problem) == 1.0
    assert rebuilt.score(f"Answer: {train.answer}", train) == 1.0
    with pytest.raises(ValueError, match="does not come from task reasoning_gym:chain_sum"):
        task.score("Answer: 1", Problem("arith-L1-eval-0", "q", "1"))


@needs_rg
def test_errors_name_what_is_accepted() -> None:
    with pytest.raises(ValueError, match=r"unknown reasoning-gym dataset 'nope'.*chain_sum"):
        make_task("reasoning_gym:nope")
    with pytest.raises(ValueError, match=r"no option\(s\) \['colour'\].*min_terms"):
        make_task("reasoning_gym:chain_sum", colour="red")
    with pytest.raises(ValueError, match="rejected"):
        make_task("reasoning_gym:chain_sum", min_terms=3, max_terms=2)
    with pytest.raises(ValueError, match="size must be >= 1"):
        ReasoningGymTask("chain_sum", size=0)


@needs_rg
def test_build_task_from_config() -> None:
    from rlvr.data import build_task

    cfg = build_config(
        {
            "task": {
                "name": "reasoning_gym:chain_sum",
                "n_eval": 3,
                "size": 20,
                "seed": 2,
                "dataset_kwargs": {"min_terms": 3, "max_terms": 3},
            }
        }
    )
    task = build_task(cfg.task)
    assert isinstance(task, ReasoningGymTask) and task.size == 20 and task.seed == 2
    assert len(task.eval_problems()) == 3
    assert task.entry(task.train_problem(0))["metadata"]["num_terms"] == 3


@needs_rg
def test_evaluation_shows_exactly_the_answer_it_scores() -> None:
    from rlvr.evaluation.harness import score_records

    task = ReasoningGymTask("chain_sum", seed=1, n_eval=2, size=50)
    problem = task.eval_problems()[0]
    right = problem.answer
    # Right answers as small models write them; each used to be shown as `right` by the numeric
    # extraction but scored on the raw text ("$-78$", "The sum is \boxed{-78}") below 1.
    completions = [
        f"Adding up...\nAnswer: {right}",
        f"Answer: ${right}$",
        f"The sum is \\boxed{{{right}}}.",
        f"**Answer:** `{right}`.",
        f"So the total is\n\n{right}",
        f"step one\nthe sum is {right}",  # no marker: the last line is the answer, as scored
        "",
    ]
    records = score_records(task, [problem], [completions], [[1] * 7], [[True] * 7])
    shown = [r["extracted_answer"] for r in records]
    assert shown[:5] == [right] * 5 and [r["score"] for r in records[:5]] == [1.0] * 5
    assert all(r["correct"] for r in records[:5])
    assert shown[5] == f"the sum is {right}" and 0 < records[5]["score"] < 1
    assert shown[6] is None and records[6]["score"] == 0.0
    # The invariant: the score is the dataset verifier's score of the string shown.
    dataset = task._source("eval")
    for r in records:
        expected = dataset.score_answer(answer=r["extracted_answer"], entry=task.entry(problem))
        assert r["score"] == pytest.approx(min(1.0, max(0.0, expected)))


def test_extract_final_answer_unwraps_math_and_boxes() -> None:
    assert extract_final_answer("Answer: $-78$") == "-78"
    assert extract_final_answer("Answer: \\(12\\).") == "12"
    assert extract_final_answer("so \\boxed{\\frac{1}{2}} it is") == "\\frac{1}{2}"
    assert extract_final_answer("\\boxed{a} or \\boxed{b}") == "b"
    assert extract_final_answer("Answer: \\boxed{x} and \\boxed{y}") == "\\boxed{x} and \\boxed{y}"
    assert extract_final_answer("Answer: [1, 2, 3]") == "[1, 2, 3]"
