"""Hugging Face datasets as file tasks: save_to_disk directories, data directories, hub names read
offline from the local cache; splits, subsets and answer patterns; clear errors otherwise."""

import json
import os
import time

import datasets
import pytest
from datasets.packaged_modules.json.json import Json

from rlvr.config import build_config
from rlvr.data import FileTask, build_task, data_stats, file_mixture
from rlvr.data import sources as sources_module
from rlvr.errors import DataError

GSM_TRAIN = {
    "question": [f"Tom has {i} apples and buys 2. How many?" for i in range(12)],
    "answer": [f"{i} + 2 = {i + 2}\n#### {i + 2}" for i in range(12)],
}
GSM_TEST = {  # the first question repeats a training one: it must not be trained on
    "question": [GSM_TRAIN["question"][3], "Ann has 10 pears and eats 4. How many?"],
    "answer": ["#### 5", "10 - 4 = 6\n#### 6"],
}


@pytest.fixture
def gsm_dir(tmp_path):
    path = tmp_path / "gsm"
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict(GSM_TRAIN),
            "test": datasets.Dataset.from_dict(GSM_TEST),
        }
    ).save_to_disk(str(path))
    return str(path)


def test_save_to_disk_dataset_dict_with_eval_split_and_answer_pattern(gsm_dir):
    cfg = build_config(
        {
            "task": {
                "name": "file",
                "path": gsm_dir,
                "prompt_column": "question",
                "eval_split": "test",
                "answer_pattern": r"#### (\S+)",
                "prompt_template": "{question}",
            }
        }
    )
    task = build_task(cfg.task)
    evals = task.eval_problems()
    assert [(p.id, p.prompt, p.answer) for p in evals] == [
        ("file-eval-0", GSM_TEST["question"][0], "5"),
        ("file-eval-1", GSM_TEST["question"][1], "6"),
    ]
    train = {task.train_problem(i).id: task.train_problem(i) for i in range(11)}
    assert set(train) == {f"file-train-{i}" for i in range(12) if i != 3}  # duplicate dropped
    assert train["file-train-7"].answer == "9"
    assert data_stats(task) == {
        "data/duplicate_conflicts": 0,
        "data/duplicates_dropped": 1,
        "data/eval_rows": 2,
        "data/eval_rows_unused": 0,
        "data/long_prompts_dropped": 0,
        "data/train_rows": 11,
    }
    assert task.score("7 + 2 = 9\nAnswer: 9", train["file-train-7"]) == 1.0


def test_split_and_subset_choices_and_their_errors(gsm_dir, tmp_path):
    task = FileTask(gsm_dir, "question", split="test", answer_pattern=r"#### (\S+)", seed=1)
    assert {task.train_problem(i).answer for i in range(2)} <= {"5", "6"}
    with pytest.raises(DataError, match=r"gsm has no split 'validation' .* train, test"):
        FileTask(gsm_dir, "question", eval_split="validation")
    with pytest.raises(DataError, match=r"written by save_to_disk, which has no subsets"):
        FileTask(gsm_dir, "question", subset="main")
    with pytest.raises(DataError, match=r"gsm \(split 'train'\), row index 0, column 'answer': "):
        FileTask(gsm_dir, "question", answer_pattern=r"answer: (\d+)")
    with pytest.raises(DataError, match=r"column 'prompt' not found in .*gsm \(split 'train'\)"):
        FileTask(gsm_dir)
    one = tmp_path / "one"
    datasets.Dataset.from_dict(GSM_TRAIN).save_to_disk(str(one))
    single = FileTask(str(one), "question", answer_pattern=r"#### (\S+)", eval_fraction=0.25)
    assert data_stats(single)["data/eval_rows"] == 3  # round(0.25 * 12)
    with pytest.raises(DataError, match="one dataset without splits"):
        FileTask(str(one), "question", eval_split="test")
    file = tmp_path / "d.jsonl"
    file.write_text(json.dumps({"prompt": "a", "answer": "1"}) + "\n")
    with pytest.raises(DataError, match=r"d\.jsonl is a single file: task\.split"):
        FileTask(str(file), split="test")


def test_directory_of_data_files(tmp_path):
    data = tmp_path / "repo"
    data.mkdir()
    for split, n in (("train", 6), ("test", 2)):
        rows = [{"q": f"{split} {i}", "a": i} for i in range(n)]
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = FileTask(str(data), "q", "a", eval_split="test", prompt_template="{question}")
    assert [p.prompt for p in task.eval_problems()] == ["test 0", "test 1"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match=r"empty is a directory, but neither a dataset written"):
        FileTask(str(empty))


def _cache_hub_dataset(cache, repo_id: str, config: str, files: dict[str, str]) -> None:
    """Write ``repo_id``/``config`` into a datasets cache the way load_dataset leaves a hub
    dataset there after a download (``<namespace>___<name>/<config>/<version>/<hash>``)."""
    namespace, name = repo_id.split("/")
    builder = Json(
        cache_dir=str(cache),
        config_name=config,
        data_files=files,
        dataset_name=f"{namespace}___{name}",
        hash="0123abcd",
    )
    builder.download_and_prepare()
    prepared = cache / f"{namespace}___{name}"
    (built,) = [p for p in prepared.iterdir() if p.is_dir()]
    built.rename(prepared / config)
    for arrow in (prepared / config).rglob("*.arrow"):
        arrow.rename(arrow.with_name(arrow.name.replace(f"{namespace}___", "")))


def test_hub_name_is_read_offline_from_the_local_cache(tmp_path, monkeypatch):
    files = {}
    for split, data in (("train", GSM_TRAIN), ("test", GSM_TEST)):
        path = tmp_path / f"{split}.jsonl"
        rows = [dict(zip(data, values, strict=True)) for values in zip(*data.values(), strict=True)]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        files[split] = str(path)
    cache = tmp_path / "hf-cache"
    _cache_hub_dataset(cache, "openai/gsm8k", "main", files)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(cache))
    monkeypatch.chdir(tmp_path)  # no local directory named openai/gsm8k
    task = FileTask(
        "openai/gsm8k",
        "question",
        subset="main",
        eval_split="test",
        answer_pattern=r"#### (\S+)",
    )
    assert [p.answer for p in task.eval_problems()] == ["5", "6"]
    assert datasets.config.HF_HUB_OFFLINE is False  # offline only while loading
    with pytest.raises(
        DataError, match=r"(?s)subset 'socratic' of dataset 'openai/gsm8k' .* \['main'\]"
    ):
        FileTask("openai/gsm8k", "question", subset="socratic")


def test_unknown_dataset_name_fails_at_once_with_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.chdir(tmp_path)
    start = time.perf_counter()
    with pytest.raises(DataError) as caught:
        build_task(build_config({"task": {"name": "file", "path": "someone/no-such-set"}}).task)
    assert time.perf_counter() - start < 20  # no network retries
    message = str(caught.value)
    assert "dataset 'someone/no-such-set' not found locally" in message
    assert "load_dataset('someone/no-such-set')" in message and "save_to_disk" in message
    with pytest.raises(DataError, match=r"data file not found: \./missing\.jsonl"):
        FileTask("./missing.jsonl")


def test_file_mixture_reads_and_deduplicates_the_source_once(tmp_path, monkeypatch):
    rows = [{"prompt": f"q{i % 15}", "answer": str(i % 15), "src": "ab"[i % 2]} for i in range(30)]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    reads = []
    real = sources_module.read_file
    monkeypatch.setattr(sources_module, "read_file", lambda p: reads.append(p) or real(p))
    task = file_mixture(str(path), "src", eval_fraction=0.0)
    assert reads == [str(path)]
    # rows 15..29 repeat rows 0..14 (q0 appears as row 0 "a" and row 15 "b"): dropped, counted
    assert data_stats(task)["data/duplicates_dropped"] == 15
    assert data_stats(task)["data/train_rows"] == 15
    path.write_text("".join(json.dumps(r | {"answer": "7"}) + "\n" for r in rows))
    os.utime(path, ns=(0, 10**9))
    task = file_mixture(str(path), "src", eval_fraction=0.0)
    assert {task.category_problem(0, i).answer for i in range(5)} == {"7"}
