"""Arithmetic and file tasks: determinism, disjoint splits, correct answers, loading errors."""

import hashlib
import json
import operator
import re

import datasets
import pytest

from rlvr.data import (
    DEFAULT_PROMPT_TEMPLATE,
    FILE_PROMPT_TEMPLATE,
    TASKS,
    ArithmeticTask,
    FileTask,
    Problem,
    make_task,
)
from rlvr.data.arithmetic import HELD_OUT_PERCENT, _evaluate, _render, is_held_out
from rlvr.errors import DataError

LEVELS = [1, 2, 3, 4, 5, 6]
QUESTION = re.compile(r"^What is (.+)\?\n")
BINARY = re.compile(r"(\d+) ([+\-*]) (\d+)")
OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul}
# Every expression of the two enumerable levels, in canonical form.
LEVEL1_ALL = {f"{a} + {b}" for a in range(10) for b in range(10)}
LEVEL2_ALL = {f"{a} {op} {b}" for op in "+-*" for a in range(10) for b in range(10)}


def expression(problem: Problem) -> str:
    """The expression string of an arithmetic problem's prompt."""
    m = QUESTION.match(problem.prompt)
    assert m, problem.prompt
    return m.group(1)


# ---------------------------------------------------------------- arithmetic


def test_prompt_uses_default_template() -> None:
    p = ArithmeticTask(level=2, seed=0).train_problem(0)
    expr = expression(p)
    assert p.prompt == DEFAULT_PROMPT_TEMPLATE.format(question=f"What is {expr}?")
    assert p.prompt.endswith("as 'Answer: <number>'.")
    assert p.id == "arith-L2-train-0"


def test_custom_template() -> None:
    p = ArithmeticTask(level=1, prompt_template="Q: {question} A:").train_problem(3)
    assert re.fullmatch(r"Q: What is \d \+ \d\? A:", p.prompt)


@pytest.mark.parametrize("level", LEVELS)
def test_determinism_by_seed(level: int) -> None:
    a, b, c = (ArithmeticTask(level=level, seed=s, n_eval=20) for s in (0, 0, 1))
    train_a = [a.train_problem(i) for i in range(50)]
    assert train_a == [b.train_problem(i) for i in range(50)]
    assert train_a != [c.train_problem(i) for i in range(50)]
    assert a.eval_problems() == b.eval_problems()
    assert a.eval_problems() != c.eval_problems()


def test_train_problem_is_pure_function_of_index() -> None:
    task = ArithmeticTask(level=3, seed=7)
    later = task.train_problem(1234)
    for i in range(20):
        task.train_problem(i)
    assert ArithmeticTask(level=3, seed=7).train_problem(1234) == later == task.train_problem(1234)


def test_is_held_out_is_sha256_mod_100() -> None:
    def bucket(e: str) -> int:
        return int.from_bytes(hashlib.sha256(e.encode()).digest(), "big") % 100

    assert bucket("0 + 0") == 17 and bucket("0 + 8") == 12 and bucket("0 + 1") == 92
    assert is_held_out("0 + 0", 30) and not is_held_out("0 + 0")  # default percent is 10
    assert is_held_out("0 + 8", 13) and not is_held_out("0 + 8", 12)
    assert not is_held_out("0 + 1", 92) and is_held_out("0 + 1", 93)
    exprs = sorted(LEVEL2_ALL)
    for e in exprs:
        assert is_held_out(e, 30) == (bucket(e) < 30)
        assert is_held_out(e) == (bucket(e) < 10)
    assert not any(is_held_out(e, 0) for e in exprs)
    assert all(is_held_out(e, 100) for e in exprs)
    # a larger percent holds out a superset
    assert {e for e in exprs if is_held_out(e, 10)} <= {e for e in exprs if is_held_out(e, 30)}


def test_held_out_percent_per_level() -> None:
    assert HELD_OUT_PERCENT == {1: 30, 2: 30, 3: 10, 4: 10, 5: 10, 6: 10, 7: 10, 8: 10}
    for level in LEVELS:
        task = ArithmeticTask(level=level, n_eval=1)
        assert task.held_out_percent == HELD_OUT_PERCENT[level]


@pytest.mark.parametrize("level", LEVELS)
def test_train_eval_disjoint(level: int) -> None:
    task = ArithmeticTask(level=level, seed=0)
    percent = HELD_OUT_PERCENT[level]
    train = {expression(task.train_problem(i)) for i in range(2000)}
    held = {expression(p) for p in task.eval_problems()}
    assert held and train
    assert not train & held
    assert all(is_held_out(e, percent) for e in held)
    assert not any(is_held_out(e, percent) for e in train)


@pytest.mark.parametrize(("level", "everything"), [(1, LEVEL1_ALL), (2, LEVEL2_ALL)])
def test_small_levels_partition_all_expressions(level: int, everything: set[str]) -> None:
    # 2000 train draws cover every non-held-out expression; train and eval split the space.
    task = ArithmeticTask(level=level, seed=0, n_eval=1000)
    train = {expression(task.train_problem(i)) for i in range(2000)}
    held = {expression(p) for p in task.eval_problems()}
    assert train | held == everything
    assert not train & held


@pytest.mark.parametrize("level", LEVELS)
def test_answers_match_python_arithmetic(level: int) -> None:
    task = ArithmeticTask(level=level, seed=3)
    problems = [task.train_problem(i) for i in range(300)] + task.eval_problems()
    for p in problems:
        expr = expression(p)
        assert re.fullmatch(r"[\d+\-* ()]+", expr)
        assert p.answer == str(eval(expr))  # our own generated string: safe
        m = BINARY.fullmatch(expr)
        if level <= 4:  # one operation: check without eval, from the parsed operands
            assert m, expr
            a, op, b = m.groups()
            assert p.answer == str(OPERATORS[op](int(a), int(b)))
        else:
            assert m is None


def test_render_and_evaluate_concrete_trees() -> None:
    # Hand-computed text and values, including negatives, precedence and parentheses.
    cases = [
        (("+", 7, 8), "7 + 8", 15),
        (("-", 3, 9), "3 - 9", -6),
        (("*", 0, 7), "0 * 7", 0),
        (("*", 57, 8), "57 * 8", 456),
        (("-", 12, 87), "12 - 87", -75),
        (("+", 999, 999), "999 + 999", 1998),
        (("+", 3, ("*", 4, 7)), "3 + 4 * 7", 31),
        (("-", ("-", 20, 3), 5), "20 - 3 - 5", 12),
        (("-", 20, ("-", 3, 5)), "20 - (3 - 5)", 22),
        (("-", ("*", ("+", 5, 7), 3), 4), "(5 + 7) * 3 - 4", 32),
        (("*", 2, ("*", 3, 4)), "2 * 3 * 4", 24),
        (("-", 12, ("*", ("+", 3, 4), ("-", 2, 1))), "12 - (3 + 4) * (2 - 1)", 5),
    ]
    for tree, text, value in cases:
        assert _render(tree) == text
        assert _evaluate(tree) == value
        assert eval(text) == value


def test_level2_answers_enumerated() -> None:
    # Every level-2 expression the task emits has the right answer, checked by table.
    table = {
        f"{a} {op} {b}": str(fn(a, b))
        for op, fn in OPERATORS.items()
        for a in range(10)
        for b in range(10)
    }
    assert table["2 - 9"] == "-7" and table["6 * 7"] == "42" and table["0 + 0"] == "0"
    task = ArithmeticTask(level=2, seed=11, n_eval=1000)
    for p in [task.train_problem(i) for i in range(500)] + task.eval_problems():
        assert p.answer == table[expression(p)]


def test_level_shapes() -> None:
    def exprs(level: int) -> list[str]:
        task = ArithmeticTask(level=level, seed=0, n_eval=0)
        return [expression(task.train_problem(i)) for i in range(300)]

    assert all(re.fullmatch(r"\d \+ \d", e) for e in exprs(1))
    level2 = exprs(2)
    assert all(re.fullmatch(r"\d [+\-*] \d", e) for e in level2)
    assert {e.split()[1] for e in level2} == {"+", "-", "*"}
    level3 = exprs(3)
    assert all(re.fullmatch(r"[1-9]\d [+-] [1-9]\d", e) for e in level3)
    assert {e.split()[1] for e in level3} == {"+", "-"}
    level4 = exprs(4)
    assert all(re.fullmatch(r"[1-9]\d \* [2-9]|[1-9]\d\d \+ [1-9]\d\d", e) for e in level4)
    assert any("*" in e for e in level4) and any("+" in e for e in level4)
    for e in exprs(5):
        assert "(" not in e and len(re.findall(r" [+\-*] ", e)) == 2
        assert all(1 <= int(n) <= 20 for n in re.findall(r"\d+", e))
    for e in exprs(6):
        assert "(" in e and len(re.findall(r" [+\-*] ", e)) in (3, 4)
        assert all(1 <= int(n) <= 12 for n in re.findall(r"\d+", e))
    assert all(re.fullmatch(r"[1-9]\d\d \* [1-9]\d", e) for e in exprs(7))
    level8 = exprs(8)
    assert all(re.fullmatch(r"[1-9]\d\d \* [1-9]\d [+-] [1-9]\d\d", e) for e in level8)
    assert {e.split()[3] for e in level8} == {"+", "-"}


@pytest.mark.parametrize("level", [3, 4, 5, 6, 7, 8])
def test_eval_size_and_uniqueness(level: int) -> None:
    task = ArithmeticTask(level=level, seed=0, n_eval=150)
    problems = task.eval_problems()
    assert len(problems) == 150
    assert len({expression(p) for p in problems}) == 150
    assert [p.id for p in problems] == [f"arith-L{level}-eval-{i}" for i in range(150)]
    assert task.eval_problems() == problems


def test_level1_eval_is_exhausted() -> None:
    held = {e for e in LEVEL1_ALL if is_held_out(e, 30)}
    assert len(LEVEL1_ALL) == 100
    assert len(held) == 33
    assert {"0 + 0", "0 + 8", "1 + 0", "9 + 9"} <= held
    assert not {"0 + 1", "0 + 2", "1 + 1"} & held
    task = ArithmeticTask(level=1, seed=0, n_eval=200)
    problems = task.eval_problems()
    assert {expression(p) for p in problems} == held
    assert len(problems) == len(held)
    assert [p.id for p in problems] == [f"arith-L1-eval-{i}" for i in range(33)]


def test_level2_eval_is_exhausted() -> None:
    held = {e for e in LEVEL2_ALL if is_held_out(e, 30)}
    assert len(LEVEL2_ALL) == 300
    assert len(held) == 88
    task = ArithmeticTask(level=2, seed=0, n_eval=200)
    problems = task.eval_problems()
    assert {expression(p) for p in problems} == held
    assert len(problems) == 88
    assert {expression(p).split()[1] for p in problems} == {"+", "-", "*"}
    # a smaller n_eval takes a prefix-sized subset of the same held-out set
    few = ArithmeticTask(level=2, seed=0, n_eval=20).eval_problems()
    assert len(few) == 20 and {expression(p) for p in few} <= held


def test_score_uses_numeric_reward() -> None:
    task = ArithmeticTask(level=2, seed=0)
    p = task.train_problem(0)
    assert task.score(f"Let me compute.\nAnswer: {p.answer}", p) == 1.0
    assert task.score(f"\\boxed{{{int(p.answer) + 1}}}", p) == 0.0
    assert task.score("I don't know", p) == 0.0


def test_arithmetic_errors() -> None:
    with pytest.raises(ValueError, match=r"level must be one of \[1, 2, 3, 4, 5, 6, 7, 8\], got 9"):
        ArithmeticTask(level=9)
    with pytest.raises(ValueError, match="level"):
        ArithmeticTask(level=0)
    with pytest.raises(ValueError, match="n_eval"):
        ArithmeticTask(level=1, n_eval=-1)
    with pytest.raises(ValueError, match="index"):
        ArithmeticTask(level=1).train_problem(-1)


# ---------------------------------------------------------------- files


def write_jsonl(path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def qa_rows(n: int) -> list[dict]:
    return [{"question": f"What is {i} + 1?", "solution": i + 1} for i in range(n)]


def test_file_task_jsonl_with_column_mapping(tmp_path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", qa_rows(20))
    task = FileTask(
        path, prompt_column="question", answer_column="solution", prompt_template="Q: {question}"
    )
    assert task.name == "file"
    evals = task.eval_problems()
    assert len(evals) == 2  # round(0.1 * 20)
    train = [task.train_problem(i) for i in range(18)]
    rows = {int(p.id.rsplit("-", 1)[1]) for p in train}
    held = {int(p.id.rsplit("-", 1)[1]) for p in evals}
    assert rows | held == set(range(20)) and not rows & held
    p = train[0]
    row = int(p.id.rsplit("-", 1)[1])
    assert p == Problem(f"file-train-{row}", f"Q: What is {row} + 1?", str(row + 1))
    assert task.score(f"Answer: {row + 1}", p) == 1.0
    assert task.score(f"Answer: {row + 2}", p) == 0.0


def test_file_task_epochs_and_determinism(tmp_path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", qa_rows(10))
    task = FileTask(path, "question", "solution", eval_fraction=0.2, seed=5)
    ids = [task.train_problem(i).id for i in range(24)]
    assert len(set(ids[:8])) == 8 and set(ids[:8]) == set(ids[8:16])  # each epoch: every row once
    assert ids[:8] != ids[8:16]  # reshuffled per epoch
    other = FileTask(path, "question", "solution", eval_fraction=0.2, seed=5)
    assert [other.train_problem(i).id for i in reversed(range(24))] == ids[::-1]
    assert other.eval_problems() == task.eval_problems()
    reseeded = FileTask(path, "question", "solution", eval_fraction=0.2, seed=6)
    assert [reseeded.train_problem(i).id for i in range(24)] != ids


def test_file_task_n_eval_and_no_eval(tmp_path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", qa_rows(40))
    task = FileTask(path, "question", "solution", eval_fraction=0.25, n_eval=3)
    assert len(task.eval_problems()) == 3
    train = {task.train_problem(i).id for i in range(30)}
    assert len(train) == 30  # the 7 held-out rows beyond n_eval are not trained on
    assert not FileTask(path, "question", "solution", eval_fraction=0.0).eval_problems()


def test_file_task_csv_split_column(tmp_path) -> None:
    path = tmp_path / "d.csv"
    path.write_text(
        "prompt,answer,split\n"
        "What is 1 + 1?,2,train\n"
        "What is 2 + 2?,4,test\n"
        "What is 3 + 3?,6,train\n"
        "What is 4 + 4?,8,Validation\n"
        "What is 5 + 5?,10,eval\n"
    )
    task = FileTask(str(path), split_column="split", prompt_template="{question}")
    assert [(p.id, p.prompt, p.answer) for p in task.eval_problems()] == [
        ("file-eval-1", "What is 2 + 2?", "4"),
        ("file-eval-3", "What is 4 + 4?", "8"),
        ("file-eval-4", "What is 5 + 5?", "10"),
    ]
    assert {task.train_problem(i).answer for i in range(4)} == {"2", "6"}


def test_file_task_parquet(tmp_path) -> None:
    path = str(tmp_path / "d.parquet")
    datasets.Dataset.from_dict({"prompt": ["a", "b", "c"], "answer": [1.5, 2, 3]}).to_parquet(path)
    task = FileTask(path, eval_fraction=0.0)
    assert sorted(task.train_problem(i).answer for i in range(3)) == ["1.5", "2.0", "3.0"]
    assert task.score("Answer: 2", Problem("x", "b", "2.0")) == 1.0


def test_make_task(tmp_path) -> None:
    assert {"arithmetic", "file", "countdown"} <= set(TASKS)
    task = make_task("arithmetic", level=6, seed=1)
    assert isinstance(task, ArithmeticTask) and task.level == 6
    path = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "p", "answer": "1"}] * 3)
    assert isinstance(make_task("file", path=path), FileTask)
    with pytest.raises(ValueError, match=r"'gsm9k'.*arithmetic, file"):
        make_task("gsm9k")


def test_file_task_default_prompt_asks_for_the_answer_line(tmp_path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "Capital of France?", "answer": "Paris"}])
    task = FileTask(path, eval_fraction=0.0)
    problem = task.train_problem(0)
    assert problem.prompt == FILE_PROMPT_TEMPLATE.format(question="Capital of France?")
    assert problem.prompt.endswith("give the final answer on the last line as 'Answer: <answer>'.")
    plain = FileTask(path, eval_fraction=0.0, prompt_template="{question}")
    assert plain.train_problem(0).prompt == "Capital of France?"


def test_file_task_errors(tmp_path) -> None:
    missing = str(tmp_path / "nope.jsonl")
    with pytest.raises(DataError, match=re.escape(missing)):
        FileTask(missing)
    txt = tmp_path / "d.txt"
    txt.write_text("hello\n")
    with pytest.raises(DataError, match=r"'\.txt'.*\.jsonl, \.json, \.csv, \.parquet"):
        FileTask(str(txt))
    path = write_jsonl(tmp_path / "d.jsonl", qa_rows(5))
    with pytest.raises(DataError, match=r"column 'prompt' not found.*question, solution"):
        FileTask(path)
    with pytest.raises(DataError, match=r"'split' not found.*available"):
        FileTask(path, "question", "solution", split_column="split")
    rows = qa_rows(5)
    rows[3]["question"] = "  "
    with pytest.raises(DataError, match=r"e\.jsonl, line 4, column 'question' is empty"):
        FileTask(write_jsonl(tmp_path / "e.jsonl", rows), "question", "solution")
    rows = [{"prompt": "p", "answer": "1"}, {"prompt": "q", "answer": None}]
    with pytest.raises(DataError, match=r"f\.jsonl, line 2, column 'answer': missing \(null\)"):
        FileTask(write_jsonl(tmp_path / "f.jsonl", rows))
    with pytest.raises(ValueError, match="eval_fraction"):
        FileTask(path, "question", "solution", eval_fraction=1.0)
