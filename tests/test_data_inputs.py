"""Bad data inputs are DataErrors naming the file, the row and the column and what was expected
(never a raw traceback, never a silently mangled row); a model directory without a tokenizer is
a ModelSpecError naming the directory."""

import json
import re
import shutil

import datasets
import pytest

from rlvr.config import ConfigError, build_config
from rlvr.data import FileTask, build_task
from rlvr.data.tables import read_columns, read_file
from rlvr.errors import DataError, RlvrError
from rlvr.models import ModelSpecError, load_tokenizer, resolve


def jsonl(*rows: object) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


OK = {"prompt": "What is 2 + 2?", "answer": "4"}

# (file name, bytes, FileTask kwargs, what the message must say after the file name)
BAD_FILES = [
    ("empty.jsonl", b"", {}, r"is empty: expected one JSON object per line"),
    ("blank.jsonl", b"\n  \n", {}, r"is empty"),
    ("empty.csv", b"", {}, r"is empty: expected a header line"),
    ("header_only.csv", b"prompt,answer\n", {}, r"has no rows"),
    ("empty.json", b"[]", {}, r"has no rows"),
    (
        "latin1.jsonl",
        jsonl(OK) + b'{"prompt": "caf\xe9?", "answer": "1"}\n',
        {},
        r", line 2: "
        r"byte 0xe9 \(byte 16 of the line\) is not valid UTF-8",
    ),
    ("latin1.csv", b"prompt,answer\nok,1\n\nna\xefve,2\n", {}, r", line 4: byte 0xef"),
    (
        "broken.jsonl",
        jsonl(OK, OK) + b'{"prompt": "x", "answer": \n',
        {},
        r", line 3: not valid "
        r"JSON \(Expecting value at character 27\)",
    ),
    ("array.jsonl", jsonl(OK) + b"[1, 2]\n", {}, r", line 2: expected a JSON object, got list"),
    ("broken.json", b'[{"prompt": "a",\n "answer": }]', {}, r", line 2, column 12: not valid JSON"),
    (
        "scalar.json",
        b'[{"prompt": "a", "answer": "1"}, 7]',
        {},
        r", item index 1: expected a JSON "
        r"object, got int 7",
    ),
    ("fields.csv", b"prompt,answer\na,1\nb,2,3\n", {}, r", line 3: 3 fields, but the header has 2"),
    ("quoted.csv", b'prompt,answer\n"a\nb",1\nc,2,\n', {}, r", line 4: 3 fields"),
    (
        "no_answer.jsonl",
        jsonl({"prompt": "a", "solution": "1"}),
        {},
        r"column 'answer' not found "
        r"in .*no_answer\.jsonl \(task\.answer_column\); available columns: prompt, solution",
    ),
    (
        "list.jsonl",
        jsonl(OK, {"prompt": [2, 3], "answer": "5"}),
        {},
        r", line 2, column 'prompt': "
        r"expected the prompt as text, or a chat .* got list \[2, 3\]",
    ),
    (
        "dict.jsonl",
        jsonl({"prompt": {"text": "a"}, "answer": "1"}),
        {},
        r", line 1, column "
        r"'prompt': expected the prompt as text, or a chat .* got dict",
    ),
    (
        "number_prompt.jsonl",
        jsonl({"prompt": 12, "answer": "1"}),
        {},
        r", line 1, column "
        r"'prompt': expected the prompt as text",
    ),
    (
        "list_answer.jsonl",
        jsonl(OK, OK | {"prompt": "b", "answer": [4, 5]}),
        {},
        r", line 2, "
        r"column 'answer': expected text, got list \[4, 5\]",
    ),
    (
        "nan_answer.jsonl",
        b'{"prompt": "a", "answer": NaN}\n',
        {},
        r", line 1, column 'answer': "
        r"expected text, got float nan",
    ),
    (
        "null.jsonl",
        jsonl(OK, {"prompt": None, "answer": "1"}),
        {},
        r", line 2, column 'prompt': "
        r"missing \(null\)",
    ),
    ("absent.jsonl", jsonl(OK, {"answer": "1"}), {}, r", line 2, column 'prompt': missing"),
    (
        "blank_answer.jsonl",
        jsonl(OK, OK, {"prompt": "c", "answer": " "}),
        {},
        r", line 3, "
        r"column 'answer' is empty",
    ),
    ("blank_cell.csv", b"prompt,answer\na,1\n,2\n", {}, r", line 3, column 'prompt' is empty"),
    (
        "template.jsonl",
        jsonl(OK),
        {"prompt_template": "{question} (in {unit})"},
        r"task\.prompt_template '\{question\} \(in \{unit\}\)' uses \{unit\}, which is not a column "
        r"of .*template\.jsonl; .* \{question\} \(the prompt column 'prompt'\) and these columns: "
        r"prompt, answer",
    ),
    (
        "field_type.jsonl",
        jsonl(OK | {"unit": ["cm"]}),
        {"prompt_template": "{question} ({unit})"},
        r", line 1, column 'unit': expected text, got list",
    ),
    (
        "pattern.jsonl",
        jsonl({"prompt": "a", "answer": "#### 4"}, {"prompt": "b", "answer": "4"}),
        {"answer_pattern": r"#### (\S+)"},
        r", line 2, column 'answer': task\.answer_pattern "
        r"'#### \(\\\\S\+\)' does not match '4'",
    ),
]


@pytest.mark.parametrize(
    ("name", "data", "kwargs", "message"), BAD_FILES, ids=[case[0] for case in BAD_FILES]
)
def test_bad_file_is_a_data_error_naming_file_and_row(tmp_path, name, data, kwargs, message):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(DataError) as caught:
        FileTask(str(path), **kwargs)
    text = str(caught.value)
    # ", line 2: ..." follows the file name; other messages name the file within
    wanted = re.escape(str(path)) + message if message.startswith(",") else message
    assert str(path) in text and re.search(wanted, text), text


def test_parquet_list_prompt_is_an_error_not_the_text_of_a_list(tmp_path):
    path = tmp_path / "d.parquet"
    datasets.Dataset.from_dict({"prompt": [[1], [2, 3]], "answer": ["1", "5"]}).to_parquet(path)
    with pytest.raises(DataError, match=re.escape(f"{path}, row index 0, column 'prompt'")):
        FileTask(str(path))
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match=re.escape(f"{broken}: not a readable parquet file")):
        FileTask(str(broken))


def test_bad_input_through_build_task_and_the_cli_error_type(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(jsonl(OK, {"prompt": [2, 3], "answer": "5"}))
    cfg = build_config({"task": {"name": "file", "path": str(path)}})
    with pytest.raises(RlvrError, match=re.escape(f"{path}, line 2, column 'prompt'")):
        build_task(cfg.task)
    missing = build_config({"task": {"name": "file", "path": str(tmp_path / "nope.jsonl")}})
    with pytest.raises(DataError, match="data file not found: .*nope.jsonl"):
        build_task(missing.task)


def test_json_layouts_and_csv_values(tmp_path):
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([OK, {"prompt": "b", "answer": 2}]))
    columns = tmp_path / "columns.json"
    columns.write_text(json.dumps({"prompt": ["a", "b"], "answer": ["1", "2"]}))
    lines = tmp_path / "lines.json"
    lines.write_bytes(jsonl(OK, OK))
    assert read_columns(str(rows), ["answer"]) == {"answer": ["4", 2]}
    assert read_file(str(columns)).n_rows == 2 and read_file(str(lines)).lines == (1, 2)
    csv_path = tmp_path / "d.csv"
    csv_path.write_bytes('\ufeffprompt,answer\n"a, with comma",1\n\n"multi\nline",2.0\n'.encode())
    table = read_file(str(csv_path))
    assert table.columns == {"prompt": ["a, with comma", "multi\nline"], "answer": ["1", "2.0"]}
    assert table.lines == (2, 4) and table.where(1) == f"{csv_path}, line 4"


def test_config_rejects_malformed_templates_and_patterns():
    file_task = {"name": "file", "path": "d.jsonl"}
    for template, message in [
        ("{question", "is not a valid template"),
        ("{0} {question}", r"\{0\} is not a field name"),
        ("{question.upper}", r"\{question.upper\} is not a field name"),
    ]:
        with pytest.raises(ConfigError, match=message):
            build_config({"task": file_task | {"prompt_template": template}})
    with pytest.raises(ConfigError, match=r"\{unit\} is not a field of the arithmetic task"):
        build_config({"task": {"prompt_template": "{question} in {unit}"}})
    with pytest.raises(ConfigError, match="exactly one group"):
        build_config({"task": file_task | {"answer_pattern": "#### \\S+"}})
    with pytest.raises(ConfigError, match="not a valid regex"):
        build_config({"task": file_task | {"answer_pattern": "(["}})
    with pytest.raises(ConfigError, match="task.subset only applies to the file task"):
        build_config({"task": {"subset": "main"}})
    with pytest.raises(ConfigError, match="eval_split and task.split_column"):
        build_config({"task": file_task | {"eval_split": "test", "split_column": "split"}})
    with pytest.raises(ConfigError, match="must differ from task.split"):
        build_config({"task": file_task | {"eval_split": "train"}})
    with pytest.raises(ConfigError, match="task.path is required .* openai/gsm8k"):
        build_config({"task": {"name": "file"}})
    with pytest.raises(ConfigError, match="task.eval_fraction"):
        build_config({"task": file_task | {"eval_fraction": 1.0}})
    with pytest.raises(ConfigError, match="task.long_prompts"):
        build_config({"task": file_task | {"long_prompts": "truncate"}})


def test_model_directory_without_tokenizer(tmp_path):
    source = resolve("tiny-random-llama")
    weights_only = tmp_path / "weights_only"
    weights_only.mkdir()
    for f in source.iterdir():
        if f.name in ("config.json", "model.safetensors"):
            shutil.copy(f, weights_only)
    with pytest.raises(ModelSpecError, match=re.escape(f"{str(weights_only)!r} has no tokenizer")):
        load_tokenizer(str(weights_only))
    with pytest.raises(ModelSpecError, match="tokenizer.json, or tokenizer_config.json"):
        load_tokenizer(str(weights_only))
    (weights_only / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(ModelSpecError, match="cannot load the tokenizer of"):
        load_tokenizer(str(weights_only))
