"""The reproduction driver (rlvr repro, issue 30): claims read from their folders, arms x seeds
run on the tiny model and skipped once finished, the verdict by hand, the table rebuilt from
the runs' records alone (the run directories deleted)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from test_trainer import tiny_config

from rlvr.repro import (
    ReproError,
    estimate_minutes,
    find_claims,
    load_claim,
    pending_runs,
    results_table,
    run_claims,
    verdict,
)


def _claim(folder: Path, **extra) -> Path:
    folder.mkdir(parents=True)
    for arm, lr in (("trained", 1e-2), ("frozen", 1e-12)):
        cfg = tiny_config(Path("unused"), steps=2)
        cfg["train"]["lr"] = lr
        cfg["checkpoint"] = {"every": 0, "save_final": True}
        del cfg["logging"]["run_dir"]
        (folder / f"{arm}.yaml").write_text(yaml.safe_dump(cfg))
    spec = {
        "title": "Training moves the reward",
        "paper": "a test",
        "claim": "a trained policy's reward differs from a frozen one's",
        "seeds": [1, 2],
        "arms": {"trained": {"config": "trained.yaml"}, "frozen": {"config": "frozen.yaml"}},
        "tests": [{"metric": "reward/mean", "direction": "greater"}],
        "compare": ["trained", "frozen"],
        "rule": "reproduced if the 95% CI of the paired difference lies above 0",
        "minutes_per_run": 0.1,
        **extra,
    }
    (folder / "claim.yaml").write_text(yaml.safe_dump(spec))
    return folder


def test_a_two_arm_two_seed_claim_runs_once_and_its_table_comes_from_the_records(
    tmp_path, monkeypatch
):
    claims_dir, root = tmp_path / "repro", tmp_path / "runs"
    _claim(claims_dir / "moves", figure="reward/mean")
    claims = find_claims(claims_dir)
    assert len(pending_runs(claims[0])) == 4
    run_claims(claims, root, say=lambda text: None)
    assert pending_runs(claims[0]) == []
    for arm in ("trained", "frozen"):
        for seed in (1, 2):
            record = json.loads((claims_dir / f"moves/results/{arm}/seed{seed}.json").read_text())
            run_dir = root / "moves" / arm / f"seed{seed}"
            rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").open()]
            logged = [[r["step"], r["reward/mean"]] for r in rows if "reward/mean" in r]
            assert record["values"] == {"reward/mean": logged[-1][1]} and record["seed"] == seed
            assert record["curve"] == logged and record["run_dir"] == str(run_dir)
            assert record["machine"].startswith("cpu (") and record["seconds"] > 0
            assert record["precision"] == {"rollout.dtype": "fp32", "train.autocast": "fp32"}
            assert not (run_dir / "checkpoints").exists()  # removed once the record is written
    table = results_table(claims, claims_dir)
    assert "| Training moves the reward | a test | reward/mean | trained - frozen > 0 |" in table
    assert "[moves/results/trained/seed1.json](moves/results/trained/seed1.json)" in table
    assert "![reward/mean by step](moves/figure.png)" in table  # each arm's curve by step
    assert (
        f"Machines: {record['machine']}, rollout.dtype fp32 / train.autocast fp32 (4 runs)" in table
    )
    figure = (claims_dir / "moves" / "figure.png").read_bytes()
    assert figure[:4] == b"\x89PNG"

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr("rlvr.trainer.train", no_training)
    shutil.rmtree(root)  # a new checkout: the run directories are gone, the records are not
    run_claims(find_claims(claims_dir), root, say=lambda text: None)  # everything skipped
    assert results_table(find_claims(claims_dir), claims_dir) == table  # the records alone
    assert (claims_dir / "moves" / "figure.png").read_bytes() == figure


def test_an_untrained_arm_is_evaluated_like_a_trained_one(tmp_path):
    claims_dir, root = tmp_path / "repro", tmp_path / "runs"
    folder = _claim(
        claims_dir / "base",
        arms={
            "trained": {"config": "trained.yaml"},
            "base": {"model": "tiny-random-llama", "like": "trained"},
        },
        compare=["trained", "base"],
        eval={"n": 2, "k": [1, 2]},
        tests=[{"metric": "pass@2"}, {"metric": "pass@1", "direction": "less"}],
        seeds=[1],
    )
    claim = load_claim(folder)
    run_claims([claim], root, say=lambda text: None, keep_checkpoints=True)
    assert list((root / "base" / "trained" / "seed1" / "checkpoints").glob("step_*"))  # kept
    base = json.loads((folder / "results" / "base" / "seed1.json").read_text())
    summary = json.loads((root / "base" / "base" / "seed1" / "summary.json").read_text())
    assert base["values"] == {m: summary["metrics"][m] for m in ("pass@2", "pass@1")}
    assert base["eval"] == summary["metrics"] and "curve" not in base
    trained = root / "base" / "trained" / "seed1"
    problems = json.loads((trained / "eval-repro" / "summary.json").read_text())["problems"]
    assert summary["problems"]["sha256"] == problems["sha256"]  # the same problems

    # the trained run's directory lost (a new checkout, its record kept): the base model is
    # evaluated with the trained arm's config for that seed, on the same problems
    shutil.rmtree(root)
    (folder / "results" / "base" / "seed1.json").unlink()
    run_claims([claim], root, say=lambda text: None)
    again = json.loads((root / "base" / "base" / "seed1" / "summary.json").read_text())
    assert again["problems"]["sha256"] == problems["sha256"]
    assert again["metrics"] == summary["metrics"]


def _done(folder: Path, arm: str, seed: int, value: float) -> None:
    path = folder / "results" / arm / f"seed{seed}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"arm": arm, "seed": seed, "values": {"reward/mean": value}, "seconds": 60.0}
    path.write_text(json.dumps(record))


@pytest.mark.parametrize(
    ("a", "b", "direction", "expected"),
    [
        ([0.5, 0.6, 0.7], [0.4, 0.4, 0.4], "greater", "reproduced"),  # d = 0.1, 0.2, 0.3
        ([0.5, 0.6, 0.7], [0.4, 0.4, 0.4], "less", "opposite"),
        ([0.5, 0.3, 0.7], [0.4, 0.4, 0.4], "greater", "inconclusive"),  # d = 0.1, -0.1, 0.3
    ],
)
def test_the_verdict_by_hand(tmp_path, a, b, direction, expected):
    folder = _claim(
        tmp_path / "repro" / "c",
        seeds=[1, 2, 3],
        tests=[{"metric": "reward/mean", "direction": direction}],
    )
    claim = load_claim(folder)
    for seed, (x, y) in enumerate(zip(a, b, strict=True), start=1):
        _done(folder, "trained", seed, x)
        _done(folder, "frozen", seed, y)
    result = verdict(claim)
    (test,) = result["tests"]
    mean = sum(x - y for x, y in zip(a, b, strict=True)) / 3
    assert test["diff"][0] == pytest.approx(mean)
    low, high = test["diff"][1:]
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    assert min(diffs) - 1e-12 <= low <= high <= max(diffs) + 1e-12  # a bootstrap of 3 values
    assert test["verdict"] == expected and result["seconds"] == 360.0


def test_a_claim_with_seeds_missing_is_pending(tmp_path):
    claim = load_claim(_claim(tmp_path / "repro" / "c"))
    _done(claim.folder, "trained", 1, 0.5)
    assert verdict(claim)["tests"][0]["verdict"] == "pending (0 of 2 seeds)"
    # arms in claim.yaml's order (yaml.safe_dump sorted them), trained arms before untrained
    assert pending_runs(claim) == [("frozen", 1), ("frozen", 2), ("trained", 2)]
    # the estimate: trained's seed 2 at its seed 1's measured minute; frozen's two runs, which
    # have no finished run, at claim.yaml's minutes_per_run (0.1)
    assert estimate_minutes([claim]) == pytest.approx(1.0 + 2 * 0.1)


def test_claim_folders_are_checked(tmp_path):
    with pytest.raises(ReproError, match="no claim.yaml"):
        load_claim(tmp_path)
    folder = _claim(tmp_path / "repro" / "c", compare=["trained", "nope"])
    with pytest.raises(ReproError, match="compare must name two arms"):
        load_claim(folder)
    with pytest.raises(ReproError, match="no claim 'missing'"):
        find_claims(tmp_path / "repro", "missing")


def test_every_shipped_claim_folder_loads():
    claims = find_claims(Path(__file__).resolve().parent.parent / "repro")
    assert len(claims) >= 9
    for claim in claims:
        assert claim.rule and claim.paper and len(claim.seeds) >= 3


def test_every_shipped_record_belongs_to_its_claim():
    for claim in find_claims(Path(__file__).resolve().parent.parent / "repro"):
        for path in (claim.folder / "results").glob("*/*.json"):
            record = json.loads(path.read_text())
            assert (record["claim"], record["arm"]) == (claim.name, path.parent.name)
            assert path.name == f"seed{record['seed']}.json" and record["seed"] in claim.seeds
            assert {t.metric for t in claim.tests} <= set(record["values"])
            assert record["seconds"] > 0 and record["machine"] and record["run_dir"]


def test_a_failed_run_is_reported_and_the_others_go_on(tmp_path):
    from typer.testing import CliRunner

    from rlvr.cli import app

    claims_dir = tmp_path / "repro"
    folder = _claim(claims_dir / "c", seeds=[1])
    broken = yaml.safe_load((folder / "frozen.yaml").read_text())
    broken["reward"] = {"function": "rewards_for_tests:no_such_function"}
    (folder / "frozen.yaml").write_text(yaml.safe_dump(broken))
    result = CliRunner().invoke(
        app, ["repro", "c", "--dir", str(claims_dir), "--root", str(tmp_path / "runs")]
    )
    assert result.exit_code == 1, result.output
    assert "1 run(s) failed" in result.output and "c: arm frozen, seed 1:" in result.output
    assert "no_such_function" in result.output
    assert (folder / "results" / "trained" / "seed1.json").is_file()  # the other arm ran
    assert not (folder / "results" / "frozen").exists()
    assert "pending (0 of 1 seeds)" in (claims_dir / "RESULTS.md").read_text()
