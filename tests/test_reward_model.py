"""Bradley-Terry reward models: the loss, last-token scoring under padding, training to > 90%
held-out pairwise accuracy on a synthetic preference set, save/load, the ``reward_model`` reward
(alone, in CombinedReward and in a training run) and ``rlvr rm train`` / ``rlvr rm eval``."""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from rlvr.cli import app
from rlvr.config import build_config
from rlvr.data.base import Demonstration, Problem
from rlvr.reward_models import (
    METADATA_FILE,
    RewardModelConfig,
    bradley_terry_loss,
    evaluate_pairs,
    join_tokens,
    last_token_index,
    load_pairs,
    load_reward_model,
    new_reward_model,
    pairwise_metrics,
    right_pad,
    split_indices,
    train_reward_model,
)
from rlvr.rewards import CombinedReward, get_reward
from rlvr.rewards.reward_model import (
    ensemble_reduce,
    normalize_rewards,
    preference_as_reward,
)
from rlvr.trainer import train

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
MODEL = "tiny-random-llama"


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread: two threads on two shared cores are far slower for a tiny model."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def synthetic_pairs(n: int, seed: int = 0) -> list[dict[str, str]]:
    """Preferences a model can learn: the chosen response is lowercase letters, the rejected one
    digits of the same length; prompts are all different."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        k = rng.randint(3, 8)
        rows.append(
            {
                "prompt": f"Write item {i}.",
                "chosen": "".join(rng.choice("abcdefghij") for _ in range(k)),
                "rejected": "".join(rng.choice("0123456789") for _ in range(k)),
            }
        )
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[RewardModelConfig, object]:
    """A reward model trained once on 200 synthetic pairs (40 held out)."""
    root = tmp_path_factory.mktemp("rm")
    data = write_jsonl(root / "pairs.jsonl", synthetic_pairs(200))
    config = RewardModelConfig(
        data=str(data),
        model=MODEL,
        out=str(root / "rm"),
        epochs=2,
        lr=1e-3,
        batch_size=16,
        eval_fraction=0.2,
        seed=0,
    )
    return config, train_reward_model(config, progress=False)


# ---------------------------------------------------------------- pure functions


def test_bradley_terry_loss_hand_computed() -> None:
    chosen, rejected = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 2.0])
    # -log sigmoid(1) = log(1 + e^-1); -log sigmoid(-2) = log(1 + e^2)
    expected = (math.log1p(math.exp(-1)) + math.log1p(math.exp(2))) / 2
    assert bradley_terry_loss(chosen, rejected).item() == pytest.approx(expected, rel=1e-6)
    # centering: 0.5 * mean(c^2 + r^2) = 0.5 * (1 + 4) / 2
    centered = bradley_terry_loss(chosen, rejected, center_coef=0.2).item()
    assert centered == pytest.approx(expected + 0.2 * 1.25, rel=1e-6)
    # the gradient raises r_chosen and lowers r_rejected
    c, r = chosen.clone().requires_grad_(), rejected.clone().requires_grad_()
    bradley_terry_loss(c, r).backward()
    assert (c.grad < 0).all() and (r.grad > 0).all()
    with pytest.raises(ValueError, match=r"shape \[P\]"):
        bradley_terry_loss(torch.zeros(2), torch.zeros(3))


def test_pairwise_metrics_and_helpers() -> None:
    m = pairwise_metrics(torch.tensor([2.0, 0.0, 1.0]), torch.tensor([1.0, 0.0, 3.0]))
    assert m["accuracy"] == pytest.approx(1 / 3)  # the tie counts as wrong
    assert m["margin"] == pytest.approx((1 + 0 - 2) / 3)
    mask = torch.tensor([[1, 1, 1, 0], [0, 0, 1, 1], [1, 0, 0, 0], [1, 1, 1, 1]])
    assert last_token_index(mask).tolist() == [2, 3, 0, 3]
    ids, pad_mask = right_pad([[5, 6], [7]], pad_id=0)
    assert ids.tolist() == [[5, 6], [7, 0]] and pad_mask.tolist() == [[1, 1], [1, 0]]
    assert join_tokens([1, 2], [3], eos_id=9, max_length=8) == ([1, 2, 3, 9], False)
    assert join_tokens([1, 2], [3, 4, 5], eos_id=9, max_length=4) == ([1, 2, 3, 9], True)
    train_a, eval_a = split_indices(50, 0.2, seed=3)
    assert (train_a, eval_a) == split_indices(50, 0.2, seed=3)
    assert len(eval_a) == 10 and sorted(train_a + eval_a) == list(range(50))
    assert split_indices(50, 0.2, seed=4)[1] != eval_a
    assert split_indices(5, 0.0, seed=0) == ([0, 1, 2, 3, 4], [])
    stats = {"mean": 1.0, "std": 2.0}
    r = torch.tensor([1.0, 5.0])
    assert normalize_rewards(r, stats, "center").tolist() == [0.0, 4.0]
    assert normalize_rewards(r, stats, "standard").tolist() == [0.0, 2.0]
    with pytest.raises(ValueError, match="no reward statistics"):
        normalize_rewards(r, {}, "standard")


# ---------------------------------------------------------------- scoring


def test_padded_rows_score_as_alone() -> None:
    model = new_reward_model(MODEL, seed=1)
    prompts = ["What is 2+2?", "Say hi.", "A much longer question about several things?"]
    responses = ["4", "hello there, how are you doing today?", "ok"]
    together = model.score(prompts, responses, batch_size=3)
    alone = torch.cat(
        [model.score([p], [r], batch_size=1) for p, r in zip(prompts, responses, strict=True)]
    )
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-5)
    assert len(set(together.tolist())) == 3
    # left padding gives the same rewards as right padding
    seqs = [model.encode(p, r)[0] for p, r in zip(prompts, responses, strict=True)]
    t = max(map(len, seqs))
    pad = model.tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (t - len(s)) + s for s in seqs])
    mask = torch.tensor([[0] * (t - len(s)) + [1] * len(s) for s in seqs])
    with torch.no_grad():
        torch.testing.assert_close(model(ids, mask), alone, rtol=1e-5, atol=1e-5)
    # the scored sequence is chat_template(prompt) + response + EOS
    text = model.tokenizer.decode(seqs[0])
    assert text.endswith("<|im_start|>assistant\n4<|im_end|>") and "What is 2+2?" in text


def test_save_load_round_trip_gives_identical_scores(tmp_path) -> None:
    model = new_reward_model(MODEL, system_prompt="Be brief.", max_length=64, seed=2)
    prompts, responses = ["Name a colour.", "Count to three."], ["red", "1 2 3"]
    before = model.score(prompts, responses)
    model.stats = {"mean": 0.5, "std": 2.0}
    model.save(tmp_path / "rm", {"backbone": MODEL})
    loaded = load_reward_model(tmp_path / "rm")
    assert torch.equal(loaded.score(prompts, responses), before)
    assert (loaded.system_prompt, loaded.max_length, loaded.stats) == (
        "Be brief.",
        64,
        {"mean": 0.5, "std": 2.0},
    )
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not a reward-model directory"):
        model.save(tmp_path / "other", {})
    with pytest.raises(ValueError, match="no reward_model.json"):
        load_reward_model(tmp_path / "other")


# ---------------------------------------------------------------- training


def test_training_reaches_high_held_out_accuracy(trained) -> None:
    config, report = trained
    assert (report.n_train, report.n_eval, report.truncated) == (160, 40, 0)
    assert report.after["accuracy"] > 0.9, report
    assert report.after["margin"] > report.before["margin"]
    out = Path(config.out)
    for name in (METADATA_FILE, "value_head.safetensors", "config.json", "model.safetensors"):
        assert (out / name).is_file(), name
    meta = json.loads((out / METADATA_FILE).read_text())
    assert meta["backbone"] == MODEL and meta["config"]["lr"] == config.lr
    assert meta["metrics"]["after"] == report.after
    # the saved model reproduces the reported held-out accuracy
    pairs = load_pairs(config.data)
    _, eval_idx = split_indices(len(pairs), config.eval_fraction, config.seed)
    metrics = evaluate_pairs(load_reward_model(out), [pairs[i] for i in eval_idx])
    assert metrics == pytest.approx(report.after, rel=1e-4)


def test_reward_model_reward_in_combined_reward(trained) -> None:
    config, _ = trained
    assert get_reward("reward_model").kind == "group"
    problem = Problem("p0", "Write item 7.", "")
    completions = ["abcde", "01234", "hij"]
    expected = load_reward_model(config.out).score([problem.prompt] * 3, completions)
    specs = [
        {"name": "reward_model", "params": {"path": config.out}},
        {
            "name": "reward_model",
            "params": {"path": config.out, "normalize": "standard", "batch_size": 2},
            "label": "rm_std",
        },
    ]
    with CombinedReward(specs, timeout_s=None) as combined:
        out = combined(completions, [problem] * 3)
    assert out.components["reward_model"] == pytest.approx(expected.tolist(), rel=1e-5)
    stats = load_reward_model(config.out).stats
    standard = [(r - stats["mean"]) / stats["std"] for r in expected.tolist()]
    assert out.components["rm_std"] == pytest.approx(standard, rel=1e-4, abs=1e-5)
    assert out.components["reward_model"][0] > out.components["reward_model"][1]
    with CombinedReward(["reward_model"]) as combined, pytest.raises(ValueError, match="path"):
        combined(completions, [problem] * 3)


def test_trainer_runs_with_reward_model_term(trained, tmp_path) -> None:
    config, _ = trained
    cfg = build_config(
        {
            "model": {"name": MODEL},
            "task": {"name": "arithmetic", "level": 1, "n_eval": 4},
            "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 6},
            "reward": {"terms": [{"name": "reward_model", "params": {"path": config.out}}]},
            "algorithm": {"preset": "grpo", "beta": 0.0},
            "train": {"steps": 2, "lr": 1e-3, "threads": 1, "autocast": "fp32"},
            "eval": {"before": False, "after": False},
            "logging": {"run_dir": str(tmp_path / "run"), "progress": False, "tensorboard": False},
            "checkpoint": {"every": 0},
        }
    )
    summary = train(cfg)
    assert summary["steps"] == 2
    rows = [
        json.loads(line)
        for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
        if "reward/reward_model/mean" in line
    ]
    assert len(rows) == 2 and all(math.isfinite(r["reward/reward_model/mean"]) for r in rows)


# ---------------------------------------------------------------- data errors


@pytest.mark.parametrize(
    ("rows", "kwargs", "message"),
    [
        ([{"prompt": "a", "chosen": "b"}], {}, r"column 'rejected' not found"),
        (
            [{"prompt": "a", "chosen": "b", "rejected": "c"}] * 2
            + [{"prompt": "a", "chosen": "  ", "rejected": "c"}],
            {},
            r"row 2, column 'chosen' is empty",
        ),
        (
            [{"prompt": "a", "chosen": "b", "rejected": "c"}, {"prompt": "a", "chosen": "b"}],
            {},
            r"row 1, column 'rejected': expected text, got NoneType",
        ),
        ([{"q": "a", "good": "b", "bad": 3}], {}, r"column 'prompt' not found"),
        (
            [{"q": "a", "good": "b", "bad": 3}],
            {"prompt_column": "q", "chosen_column": "good", "rejected_column": "bad"},
            r"row 0, column 'bad': expected text, got int",
        ),
    ],
)
def test_bad_data_file_errors(tmp_path, rows, kwargs, message) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(ValueError, match=message):
        load_pairs(path, **kwargs)


def test_missing_file_and_bad_config(tmp_path) -> None:
    with pytest.raises(ValueError, match="data file not found"):
        load_pairs(tmp_path / "nope.jsonl")
    with pytest.raises(ValueError, match="eval_fraction must be in"):
        RewardModelConfig(data="x", model=MODEL, out="y", eval_fraction=1.0)
    with pytest.raises(ValueError, match="dtype must be one of"):
        RewardModelConfig(data="x", model=MODEL, out="y", dtype="fp16")  # type: ignore[arg-type]


# ---------------------------------------------------------------- CLI


def run_cli(*args: str):
    result = CliRunner().invoke(app, list(args), prog_name="rlvr")
    result.flat = " ".join(ANSI.sub("", result.output).split())
    return result


def test_cli_rm_train_and_eval(tmp_path) -> None:
    data = write_jsonl(tmp_path / "pairs.jsonl", synthetic_pairs(40, seed=5))
    out = tmp_path / "rm"
    result = run_cli(
        "rm", "train", "--data", str(data), "--model", MODEL, "--out", str(out),
        "--epochs", "1", "--lr", "1e-3", "--batch-size", "8", "--max-length", "64",
        "--eval-fraction", "0.25", "--seed", "1", "--dtype", "bf16", "--threads", "1",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "pairs: 30 train, 10 held out" in result.flat
    # not a terminal (a log file): plain progress lines instead of a live bar
    assert re.search(r"reward model 1/4 steps · loss [\d.]+ · acc [\d.]+ · \d+ s", result.flat)
    assert "reward model 4/4 steps" in result.flat
    assert re.search(r"held-out pairwise accuracy before: [\d.]+%", result.flat)
    assert re.search(r"held-out pairwise accuracy after: [\d.]+%", result.flat)
    assert f"reward model: {out}" in result.flat
    meta = json.loads((out / METADATA_FILE).read_text())
    assert meta["config"]["dtype"] == "bf16" and meta["max_length"] == 64

    result = run_cli("rm", "eval", "--model-dir", str(out), "--data", str(data))
    assert result.exit_code == 0, result.output
    assert "pairs: 40" in result.flat and re.search(r"pairwise accuracy: [\d.]+%", result.flat)


def test_cli_rm_errors(tmp_path) -> None:
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "a", "chosen": "", "rejected": "c"}])
    result = run_cli("rm", "train", "--data", str(bad), "--model", MODEL, "--out", str(tmp_path))
    assert result.exit_code == 2
    assert "row 0, column 'chosen' is empty" in result.flat
    result = run_cli("rm", "eval", "--model-dir", str(tmp_path), "--data", str(bad))
    assert result.exit_code == 2 and "row 0" in result.flat
    assert "train" in run_cli("rm", "--help").flat


def test_par_and_ensemble_reductions_by_hand():
    """PAR: mean_m sigmoid(r - r_ref_m); ensembles: mean, WCO (min), UWO (mean - coef var)."""
    par = preference_as_reward(torch.tensor([0.0, 2.0]), torch.tensor([0.0, 1.0]))
    sig = [1 / (1 + math.exp(-x)) for x in (0.0, -1.0, 2.0, 1.0)]
    torch.testing.assert_close(par, torch.tensor([(sig[0] + sig[1]) / 2, (sig[2] + sig[3]) / 2]))
    scores = torch.tensor([[1.0, 3.0], [2.0, 0.0]])
    assert ensemble_reduce(scores, "mean").tolist() == [1.5, 1.5]
    assert ensemble_reduce(scores, "wco").tolist() == [1.0, 0.0]
    assert ensemble_reduce(scores, "uwo", coef=2.0).tolist() == [1.0, -3.0]  # var .25, 2.25
    with pytest.raises(ValueError, match="reduce must be one of"):
        ensemble_reduce(scores, "max")


def test_par_and_an_ensemble_of_trained_reward_models(trained):
    config, _ = trained
    problem = Problem(
        "p",
        "Write item 1.",
        "",
        demonstrations=(Demonstration.of([{"role": "assistant", "content": "abcde"}]),),
    )
    texts = ["abcabc", "012345"]
    plain = get_reward("reward_model").fn(texts, problem, path=config.out)
    shaped = get_reward("reward_model").fn(texts, problem, path=config.out, shaping="par")
    reference = get_reward("reward_model").fn(["abcde"], problem, path=config.out)
    expected = preference_as_reward(torch.tensor(plain), torch.tensor(reference))
    torch.testing.assert_close(torch.tensor(shaped), expected)
    with pytest.raises(ValueError, match="no reference response"):
        get_reward("reward_model").fn(texts, Problem("q", "x", ""), path=config.out, shaping="par")
    reward = CombinedReward(
        [
            {
                "name": "reward_model_ensemble",
                "params": {"paths": [config.out, config.out], "reduce": "uwo", "coef": 3.0},
            }
        ]
    )
    two = reward(texts, [problem, problem]).total  # identical members: no variance
    one = get_reward("reward_model").fn(texts, problem, path=config.out, normalize="standard")
    torch.testing.assert_close(torch.tensor(two), torch.tensor(one))
    with pytest.raises(ValueError, match="two or more"):
        get_reward("reward_model_ensemble").fn(texts, problem, paths=[config.out])
