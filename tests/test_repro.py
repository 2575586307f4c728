"""The reproduction driver (rlvr repro, issue 30): claims read from their folders, arms x seeds
run on the tiny model and skipped once finished, the verdict by hand (the exact sign-flip test,
issue 45), the table rebuilt from the runs' records alone (the run directories deleted), its
History section kept and extended when a published result is superseded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from test_trainer import tiny_config

from rlvr.evaluation.stats import seeds_needed, sign_flip_p
from rlvr.repro import (
    HISTORY,
    ReproError,
    estimate_minutes,
    find_claims,
    load_claim,
    more_seeds_minutes,
    pending_runs,
    results_table,
    run_claims,
    superseded,
    verdict,
)


def _claim(folder: Path, auto_precision: bool = False, **extra) -> Path:
    folder.mkdir(parents=True)
    for arm, lr in (("trained", 1e-2), ("frozen", 1e-12)):
        cfg = tiny_config(Path("unused"), steps=2)
        cfg["train"]["lr"] = lr
        if auto_precision:  # the record carries what auto chose
            cfg["rollout"]["dtype"] = "auto"
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
    _claim(claims_dir / "moves", figure="reward/mean", auto_precision=True)
    claims = find_claims(claims_dir)
    assert len(pending_runs(claims[0])) == 4
    import rlvr.trainer
    from rlvr import precision

    measured = precision.Choice(torch.float32, torch.float32, "measured", None, "/c/x.json")
    monkeypatch.setattr(precision, "_cpu_choice_once", lambda shapes: measured)

    trained, train = [], rlvr.trainer.train

    def training(*args, **kwargs):  # the commit changes once a run has trained
        train(*args, **kwargs)
        trained.append(True)

    monkeypatch.setattr("rlvr.trainer.train", training)
    monkeypatch.setattr("rlvr.repro._commit", lambda: f"c{len(trained)}")
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
            # what ran: the commit read at the run's start (before its training), not after
            assert "commit" not in record and record["started"] <= record["finished"]
            runs_before = 2 * (arm == "trained") + seed - 1  # claim.yaml's order: frozen first
            assert record["commit_start"] == f"c{runs_before}"
            assert len(record["config_sha256"]) == 64
    table = results_table(claims, claims_dir)
    assert "| Training moves the reward | a test | reward/mean | trained - frozen > 0 |" in table
    assert "[moves/results/trained/seed1.json](moves/results/trained/seed1.json)" in table
    assert "![reward/mean by step](moves/figure.png)" in table  # each arm's curve by step
    assert (
        f"Machines: {record['machine']}, rollout.dtype fp32 / train.autocast fp32 (4 runs)" in table
    )
    assert "Commits: c0 (frozen 1), c1 (frozen 2), c2 (trained 1), c3 (trained 2); " in table
    # 2 seeds cannot reach p <= 0.05: the table says so and what 3 more seeds would cost
    assert "inconclusive: 2 seeds cannot support 95% (smallest p 0.25;" in table
    assert "95% needs 5; 3 more per arm would take about" in table
    figure = (claims_dir / "moves" / "figure.png").read_bytes()
    assert figure[:4] == b"\x89PNG"

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr("rlvr.trainer.train", no_training)
    shutil.rmtree(root)  # a new checkout: the run directories are gone, the records are not
    run_claims(find_claims(claims_dir), root, say=lambda text: None)  # everything skipped
    assert results_table(find_claims(claims_dir), claims_dir) == table  # the records alone
    assert (claims_dir / "moves" / "figure.png").read_bytes() == figure


def test_a_resumed_run_records_the_commit_and_time_of_its_first_start(tmp_path, monkeypatch):
    """The first invocation trains and is stopped before its record; the second, at another
    commit, resumes the run: the record names the first start's commit and time."""
    import rlvr.trainer
    from rlvr.repro import START_FILE, run_one

    claim = load_claim(_claim(tmp_path / "repro" / "moves", seeds=[1]))
    train, calls = rlvr.trainer.train, []

    def stopped_the_first_time(cfg, resume=None):
        train(cfg, resume=resume)
        calls.append(resume)
        if len(calls) == 1:
            raise RuntimeError("stopped")  # after training, before the record

    monkeypatch.setattr("rlvr.trainer.train", stopped_the_first_time)
    monkeypatch.setattr("rlvr.repro._commit", lambda: f"c{len(calls)}")
    root = tmp_path / "runs"
    with pytest.raises(RuntimeError, match="stopped"):
        run_one(claim, "trained", 1, root)
    first = json.loads((claim.run_dir(root, "trained", 1) / START_FILE).read_text())
    assert first["commit_start"] == "c0"
    record = run_one(claim, "trained", 1, root)
    assert calls == [None, claim.run_dir(root, "trained", 1)]  # the second call resumed
    assert (record["commit_start"], record["started"]) == ("c0", first["started"])  # not c1


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
    like = json.loads((folder / "results" / "trained" / "seed1.json").read_text())
    assert base["config_sha256"] == like["config_sha256"]  # evaluated with its partner's config
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
    rerun = json.loads((folder / "results" / "base" / "seed1.json").read_text())
    assert rerun["config_sha256"] == like["config_sha256"]  # the same config, rebuilt


def _done(folder: Path, arm: str, seed: int, value: float) -> None:
    path = folder / "results" / arm / f"seed{seed}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "arm": arm,
        "seed": seed,
        "values": {"reward/mean": value},
        "seconds": 60.0,
        "machine": "cpu (a test)",
    }
    path.write_text(json.dumps(record))


def test_the_exact_sign_flip_test_by_hand():
    # d = 0.1, 0.2, 0.3: of the 8 sign assignments only +++ sums to 0.6 or more
    assert sign_flip_p([0.1, 0.2, 0.3]) == 1 / 8 and sign_flip_p([0.1, 0.2, 0.3], "less") == 1
    # d = 0.1, -0.1, 0.3 (sum 0.3): +++ (0.5), +-+ and -++ (0.3) reach it: 3 of 8
    assert sign_flip_p([0.1, -0.1, 0.3]) == 3 / 8
    assert sign_flip_p([0.1, -0.1, 0.3], "less") == 7 / 8  # all but +++
    assert sign_flip_p([0.2, 0.0, 0.0]) == 1 / 2  # a zero's two signs tie
    assert sign_flip_p([0.01, 0.02, 0.03, 0.04, 0.05]) == 1 / 32  # the smallest p of 5 seeds
    assert sign_flip_p([5.0]) == 1 / 2  # one seed: never below 1/2
    # the level is exact: under a symmetric null, P(p <= 1/8) = 1/8 over sign assignments
    rng = np.random.default_rng(0)
    hits = [sign_flip_p(rng.normal(size=3)) <= 1 / 8 for _ in range(4000)]
    assert np.mean(hits) == pytest.approx(1 / 8, abs=0.02)
    assert seeds_needed(0.95, two_sided=False) == 5 and seeds_needed(0.95, two_sided=True) == 6
    assert seeds_needed(0.9, two_sided=False) == 4 and seeds_needed(0.75, two_sided=False) == 2
    with pytest.raises(ValueError, match="1 to 20"):
        sign_flip_p([])


def _seeded_claim(tmp_path, a, b, direction="greater", margin=0.0):
    seeds = list(range(1, len(a) + 1))
    test = {"metric": "reward/mean", "direction": direction, "margin": margin}
    folder = _claim(tmp_path / "repro" / "c", seeds=seeds, tests=[test])
    for seed, (x, y) in enumerate(zip(a, b, strict=True), start=1):
        _done(folder, "trained", seed, x)
        _done(folder, "frozen", seed, y)
    return load_claim(folder)


@pytest.mark.parametrize(
    ("a", "direction", "margin", "expected"),
    [
        ([0.5, 0.6, 0.7, 0.8, 0.9], "greater", 0.0, "reproduced"),  # 5 of 5 above: p = 1/32
        ([0.5, 0.6, 0.7, 0.8, 0.9], "less", 0.0, "opposite"),
        ([0.5, 0.3, 0.7, 0.8, 0.9], "greater", 0.0, "inconclusive"),  # p = 2/32 > 0.05
        ([0.41, 0.42, 0.43, 0.44, 0.45], "greater", 0.03, "inconclusive"),  # above 0, not 0.03
        ([0.41, 0.42, 0.43, 0.44, 0.45], "greater", -0.03, "reproduced"),  # non-inferiority
        (
            [0.5, 0.6, 0.7],
            "greater",
            0.0,
            "inconclusive: 3 seeds cannot support 95% "
            "(smallest p 0.125; 3 of 3 on the claimed side)",
        ),  # fmt: skip
        (
            [0.3, 0.2, 0.1],
            "greater",
            0.0,
            "inconclusive: 3 seeds cannot support 95% "
            "(smallest p 0.125; 0 of 3 on the claimed side)",
        ),  # fmt: skip
    ],
)
def test_the_verdict_by_hand(tmp_path, a, direction, margin, expected):
    b = [0.4] * len(a)
    claim = _seeded_claim(tmp_path, a, b, direction, margin)
    result = verdict(claim)
    (test,) = result["tests"]
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    assert test["mean"] == pytest.approx(sum(diffs) / len(diffs))
    shifted = [(1 if direction == "greater" else -1) * (d - margin) for d in diffs]
    assert test["p"] == sign_flip_p(shifted) and test["p_opposite"] == sign_flip_p(shifted, "less")
    assert test["p_min"] == 0.5 ** len(a) and test["verdict"] == expected
    assert result["seconds"] == 60.0 * 2 * len(a)


def test_three_seeds_are_never_reproduced_and_five_are_with_all_on_the_claimed_side(tmp_path):
    # the old 95% bootstrap interval of 3 seeds was [min, max]: all 3 above 0 "reproduced"
    # (1 time in 8 under the null); the exact test's 3 seeds cannot reach 5%, 5 seeds can
    three = verdict(_seeded_claim(tmp_path / "3", [0.9, 0.8, 0.7], [0.1, 0.1, 0.1]))
    assert three["tests"][0]["p"] == 0.125 and three["tests"][0]["verdict"].startswith(
        "inconclusive: 3 seeds cannot support 95%"
    )
    five = verdict(_seeded_claim(tmp_path / "5", [0.9, 0.8, 0.7, 0.6, 0.5], [0.1] * 5))
    assert five["tests"][0]["p"] == 1 / 32 and five["tests"][0]["verdict"] == "reproduced"
    # the stated level is what decides: at 99%, 5 seeds are too few (2^-5 > 0.01)
    strict = verdict(_seeded_claim(tmp_path / "99", [0.9, 0.8, 0.7, 0.6, 0.5], [0.1] * 5), 0.99)
    assert strict["tests"][0]["verdict"].startswith("inconclusive: 5 seeds cannot support 99%")


def test_more_seeds_are_costed_at_each_arms_measured_time(tmp_path):
    claim = _seeded_claim(tmp_path, [0.5, 0.6], [0.4, 0.4])  # records of 60 s each
    assert more_seeds_minutes(claim, 3) == pytest.approx(2 * 3 * 1.0)


def test_the_history_keeps_superseded_results_and_older_records_load(tmp_path):
    claim = _seeded_claim(tmp_path, [0.5, 0.6, 0.7], [0.4, 0.4, 0.4])
    record = json.loads(claim.record("trained", 1).read_text())
    record["commit"] = "abc1234"  # a record older than commit_start: commit read after the run
    claim.record("trained", 1).write_text(json.dumps(record))
    first = results_table([claim], claim.folder.parent, previous="", today="2026-01-01")
    assert HISTORY not in first  # nothing superseded yet
    assert "Commits: unknown (frozen 1, 2, 3; trained 2, 3), abc1234 (trained 1); " in first
    assert "6 record(s) older than `commit_start`: commit read after the run" in first
    assert results_table([claim], claim.folder.parent, first, "2026-01-02") == first

    _done(claim.folder, "trained", 2, 0.9)  # seed 2 ran again: a published value changes
    second = results_table([claim], claim.folder.parent, first, "2026-01-03")
    (entry,) = superseded(first, second, "2026-01-03")
    assert entry.startswith("- 2026-01-03, superseded: Training moves the reward, reward/mean")
    assert "a by seed: 0.500, 0.600, 0.700" in entry and "mean a - b: +0.200" in entry
    assert second.endswith(entry + "\n") and f"\n{HISTORY}\n" in second
    # regenerated, the history is kept as it is and nothing is added twice
    assert results_table([claim], claim.folder.parent, second, "2026-01-04") == second
    _done(claim.folder, "trained", 3, 0.1)
    third = results_table([claim], claim.folder.parent, second, "2026-01-05")
    history = third.split(f"\n{HISTORY}\n", 1)[1]
    assert history.index("- 2026-01-05") < history.index("- 2026-01-03")  # newest first
    assert "0.500, 0.900, 0.700" in history  # the second table's values, as published


def test_a_pending_result_filled_in_supersedes_nothing():
    row = "| T | p | m | a - b > 0 | {} | {} | - | - | pending | 1 min |"
    head = (
        "| claim | paper | metric | a - b claimed | a by seed | b by seed | mean a - b "
        "| p, claimed side / other side | verdict | wall time |\n|---|---|---|---|---|---|---|---|---|---|\n"
    )
    before = head + row.format("0.500, -", "-, -")
    assert superseded(before, head + row.format("0.500, 0.600", "0.4, 0.4"), "d") == []
    assert superseded(before, head + row.format("0.500, 0.600, 0.7", "-, -, -"), "d") == []
    assert len(superseded(before, head + row.format("0.510, 0.600", "-, -"), "d")) == 1
    assert len(superseded(before, "", "d")) == 1  # a published value dropped


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
    records = 0
    for claim in find_claims(Path(__file__).resolve().parent.parent / "repro"):
        for path in sorted((claim.folder / "results").rglob("*.json")):
            record = json.loads(path.read_text())
            assert (record["claim"], record["arm"]) == (claim.name, path.parent.name)
            assert path == claim.record(record["arm"], record["seed"])  # results/<arm>/seed<s>
            assert record["arm"] in claim.arms and record["seed"] in claim.seeds
            assert {t.metric for t in claim.tests} <= set(record["values"])
            assert record["seconds"] > 0 and record["machine"] and record["run_dir"]
            records += 1
    assert records > 0, "no shipped record found under repro/*/results/"


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


def test_an_arm_trains_after_another_from_its_exported_policy(tmp_path):
    """SFT-then-RL as two arms: ``after: trained`` starts each seed from the policy the trained
    arm's run of that seed exported (``policy/``), which differs from the config's model."""
    from rlvr.config import load_config
    from rlvr.models import load_model

    claims_dir, root = tmp_path / "repro", tmp_path / "runs"
    folder = _claim(
        claims_dir / "chain",
        arms={
            "trained": {"config": "trained.yaml"},
            "then": {"config": "frozen.yaml", "after": "trained"},
        },
        compare=["then", "trained"],
        seeds=[1],
    )
    claim = load_claim(folder)
    assert pending_runs(claim) == [("trained", 1), ("then", 1)]
    assert run_claims([claim], root, say=lambda text: None) == []
    policy = root / "chain" / "trained" / "seed1" / "policy"
    then = load_config(root / "chain" / "then" / "seed1" / "config.yaml")
    assert then.model.name == str(policy)
    trained, base = load_model(str(policy)), load_model("tiny-random-llama")
    moved = [
        not torch.equal(a, b)
        for a, b in zip(trained.state_dict().values(), base.state_dict().values(), strict=True)
    ]
    assert any(moved)  # the trained arm's policy, not the config's model
    (folder / "claim.yaml").write_text(
        (folder / "claim.yaml").read_text().replace("after: trained", "after: nobody")
    )
    with pytest.raises(ReproError, match="trains after 'nobody'"):
        load_claim(folder)
