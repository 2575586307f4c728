"""Rows to problems: chat-format prompts, templates over a row's columns, duplicates dropped
before the held-out split."""

import json
import re

import datasets
import pytest

from rlvr.data import FileTask, Problem, data_stats
from rlvr.data.rows import PreparedRow, deduplicate
from rlvr.errors import DataError
from rlvr.models import byte_tokenizer, encode_messages


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


SYSTEM = {"role": "system", "content": "Answer tersely."}


def chat(*turns: tuple[str, str]) -> list[dict[str, str]]:
    return [{"role": role, "content": content} for role, content in turns]


# ---------------------------------------------------------------- chat-format prompts


def test_chat_rows_keep_their_messages_and_render_with_the_chat_template(tmp_path):
    rows = [
        {"messages": [SYSTEM, {"role": "user", "content": "2 + 2?"}], "answer": 4},
        {
            "messages": chat(("user", "1 + 1?"), ("assistant", "Answer: 2"), ("user", "3 + 3?")),
            "answer": 6,
        },
        {"messages": "5 + 5?", "answer": 10},  # plain text rows may sit beside chat rows
    ]
    path = write_jsonl(tmp_path / "chat.jsonl", rows)
    task = FileTask(
        path, prompt_column="messages", eval_fraction=0.0, prompt_template="Q: {question}"
    )
    problems = {p.answer: p for p in (task.train_problem(i) for i in range(3))}
    system_turn = problems["4"]
    assert system_turn.prompt == "Q: 2 + 2?"  # readable text: the last user message
    assert system_turn.chat == (("system", "Answer tersely."), ("user", "Q: 2 + 2?"))
    # the row's own system turn wins over the config's system prompt
    assert system_turn.messages("Be verbose.") == [SYSTEM, {"role": "user", "content": "Q: 2 + 2?"}]
    few_shot = problems["6"]
    assert few_shot.messages("Be verbose.") == [
        {"role": "system", "content": "Be verbose."},
        *chat(("user", "1 + 1?"), ("assistant", "Answer: 2"), ("user", "Q: 3 + 3?")),
    ]
    assert problems["10"].chat is None and problems["10"].messages() == chat(("user", "Q: 5 + 5?"))
    tokenizer = byte_tokenizer()
    text = tokenizer.decode(encode_messages(tokenizer, system_turn.messages()))
    assert text == (
        "<|im_start|>system\nAnswer tersely.<|im_end|>\n<|im_start|>user\nQ: 2 + 2?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_chat_column_in_parquet_and_problems_stay_picklable(tmp_path):
    import pickle

    path = tmp_path / "chat.parquet"
    datasets.Dataset.from_dict(
        {"prompt": [[SYSTEM, {"role": "user", "content": "hi"}]], "answer": ["hello"]}
    ).to_parquet(str(path))
    problem = FileTask(str(path), eval_fraction=0.0, prompt_template="{question}").train_problem(0)
    assert problem.chat == (("system", "Answer tersely."), ("user", "hi"))
    assert pickle.loads(pickle.dumps(problem)) == problem
    assert Problem("x", "p", "1").messages("S") == chat(("system", "S"), ("user", "p"))


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ([SYSTEM], r"the last message must be the user's .* got role 'system'"),
        (chat(("assistant", "b")), r"a user message before its first assistant message"),
        (chat(("user", "a"), ("assistant", "b"), ("system", "c")), r"message 2: only the first"),
        (chat(("user", "a"), ("system", "b"), ("user", "c")), r"message 1: only the first"),
        (chat(("robot", "a")), r"message 0: role 'robot' is not one of system, user, assistant"),
        ([{"role": "user", "content": ["a"]}], r"message 0: expected \{'role'"),
        ([{"role": "user", "content": "  "}], r"message 0: empty content"),
        ([{"role": "user", "content": "a"}, "b"], r"message 1: expected .* got str 'b'"),
        ([{"role": "user"}], r"message 0: expected"),
    ],
)
def test_bad_chat_rows_name_row_and_message(tmp_path, messages, message):
    path = write_jsonl(
        tmp_path / "c.jsonl",
        [{"prompt": "fine", "answer": "1"}, {"prompt": messages, "answer": "2"}],
    )
    with pytest.raises(DataError) as caught:
        FileTask(path)
    text = str(caught.value)
    assert text.startswith(f"{path}, line 2, column 'prompt'"), text
    assert re.search(message, text), text


# ---------------------------------------------------------------- templates over columns


def test_template_uses_other_columns_of_the_row(tmp_path):
    rows = [
        {"question": "How long is the rod?", "unit": "cm", "answer": 12},
        {"question": "How heavy is the box?", "unit": "kg", "answer": 3.5},
    ]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    task = FileTask(path, "question", eval_fraction=0.0, prompt_template="{question} (in {unit})")
    prompts = sorted((task.train_problem(i).prompt, task.train_problem(i).answer) for i in range(2))
    assert prompts == [
        ("How heavy is the box? (in kg)", "3.5"),
        ("How long is the rod? (in cm)", "12"),
    ]
    with pytest.raises(DataError, match="never uses the prompt"):
        FileTask(path, "question", prompt_template="Solve: {unit}")


# ---------------------------------------------------------------- duplicates


def test_duplicates_are_dropped_before_the_split_and_counted(tmp_path):
    # 40 rows, 20 distinct prompts; rows 20..39 repeat rows 0..19, half of them with another answer
    rows = [{"prompt": f"q{i % 20}", "answer": str(i % 20 + (i >= 30))} for i in range(40)]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    task = FileTask(path, eval_fraction=0.25, prompt_template="{question}")
    train = {task.train_problem(i).prompt for i in range(task.n_train)}
    held = {p.prompt for p in task.eval_problems()}
    assert len(train) == 15 and len(held) == 5  # round(0.25 * 20) of the distinct rows
    assert not train & held and train | held == {f"q{i}" for i in range(20)}
    assert data_stats(task)["data/duplicates_dropped"] == 20
    assert data_stats(task)["data/duplicate_conflicts"] == 10
    assert {d.kept for d in task.duplicates} == {f"{path}, line {i + 1}" for i in range(20)}


def test_held_out_copy_of_a_duplicate_is_the_one_kept(tmp_path):
    rows = [
        {"prompt": "a", "answer": "1", "split": "train"},
        {"prompt": "b", "answer": "2", "split": "train"},
        {"prompt": "a", "answer": "1", "split": "test"},
    ]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    task = FileTask(path, split_column="split", prompt_template="{question}")
    assert [p.id for p in task.eval_problems()] == ["file-eval-2"]
    assert {task.train_problem(i).prompt for i in range(3)} == {"b"}


def test_a_chat_and_a_text_row_with_the_same_user_message_are_duplicates():
    text = PreparedRow(0, "d, line 1", "hi", None, "1")
    same_chat = PreparedRow(1, "d, line 2", "hi", (("user", "hi"),), "1")
    with_system = PreparedRow(2, "d, line 3", "hi", (("system", "s"), ("user", "hi")), "1")
    kept, dropped = deduplicate([text, same_chat, with_system])
    assert kept == [text, with_system]
    assert [(d.where, d.kept, d.conflict) for d in dropped] == [("d, line 2", "d, line 1", False)]
