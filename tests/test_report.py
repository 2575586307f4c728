"""`rlvr report`: one self-contained HTML file with curves, pass@k and escaped samples."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

from typer.testing import CliRunner

from rlvr.cli import app
from rlvr.config import build_config, save_config
from rlvr.evaluation.harness import compute_summary_metrics, save_eval

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
XSS = "<script>alert('pwned')</script>"


def run(*args: str):
    result = CliRunner().invoke(app, list(args), prog_name="rlvr")
    result.flat = " ".join(ANSI.sub("", result.output).split())
    return result


def _eval_dir(path: Path, p_correct: float, checkpoint: str | None, step: int | None) -> None:
    """An eval dir of 4 problems x 4 samples with a given share of correct samples."""
    records = []
    for p in range(4):
        for s in range(4):
            ok = (p * 4 + s) / 16 < p_correct
            records.append(
                {
                    "problem_index": p,
                    "problem_id": f"arith-L1-eval-{p}",
                    "prompt": f"What is {p} + 1?",
                    "answer": str(p + 1),
                    "sample_index": s,
                    "completion": f"Answer: {p + 1 if ok else 0}",
                    "extracted_answer": str(p + 1 if ok else 0),
                    "score": float(ok),
                    "correct": ok,
                    "num_tokens": 5,
                    "finished": True,
                }
            )
    summary = {
        "model": "tiny-random-llama",
        "tag": checkpoint or "tiny-random-llama",
        "checkpoint": checkpoint,
        "step": step,
        "task": {"name": "arithmetic", "level": 1},
        "sampling": {"temperature": 1.0},
        **compute_summary_metrics(records, [1, 2, 4], bootstrap_reps=200),
    }
    save_eval(path, records, summary)


def _make_run(root: Path, with_evals: bool = True) -> Path:
    run_dir = root / "run"
    run_dir.mkdir()
    cfg = build_config({"model": {"name": "tiny-random-llama"}, "task": {"level": 1}})
    save_config(cfg, run_dir / "config.yaml")
    rows = [{"step": 0, "eval/greedy_accuracy": 0.25}]
    for step in range(1, 6):
        rows.append(
            {
                "step": step,
                "reward/mean": 0.1 * step,
                "reward/accuracy": 0.1 * step,
                "response/length_mean": 40 - step,
                "policy/entropy": 1.0 / step,
                "policy/clip_frac_low": 0.01,
                "policy/clip_frac_high": 0.02,
                "time/step": 1.5,
                # no policy/kl_ref: beta = 0 runs do not log it
            }
        )
    rows.append({"step": 5, "eval/greedy_accuracy": 0.75})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    samples = [
        {"step": 1, "prompt": "What is 1 + 1?", "answer": "2", "completion": XSS, "reward": 0.0},
        {"step": 5, "prompt": "What is 2 + 2?", "answer": "4", "completion": "Answer: 4",
         "reward": 1.0},
    ]  # fmt: skip
    (run_dir / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    if with_evals:
        _eval_dir(run_dir / "eval-base", 0.25, None, None)
        _eval_dir(run_dir / "eval-step_000005", 0.75, "step_000005", 5)
    return run_dir


def test_report_is_self_contained_with_sections_and_escaped_samples(tmp_path) -> None:
    run_dir = _make_run(tmp_path)
    result = run("report", str(run_dir))
    assert result.exit_code == 0, result.output + repr(result.exception)
    page = (run_dir / "report.html").read_text()
    for section in ("overview", "training", "evaluation", "samples", "config"):
        assert f'<section id="{section}">' in page
    images = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert [alt for alt, _ in images] == ["training curves", "pass@k curves"]
    for _, data in images:
        assert base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<script" not in page.lower()  # the sample is data, not markup
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in page
    assert "Not logged in this run: policy/kl_ref" in page
    assert "step 5" in page and "base: tiny-random-llama" in page  # both evaluations listed
    assert "http://" not in page and "https://" not in page and 'src="/' not in page
    assert "tiny-random-llama" in page and "arithmetic level 1" in page


def test_report_without_evals_or_metrics_and_custom_out(tmp_path) -> None:
    run_dir = _make_run(tmp_path, with_evals=False)
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\nnot json\n')
    out = tmp_path / "site" / "r.html"
    result = run("report", str(run_dir), "--out", str(out), "--samples", "1")
    assert result.exit_code == 0, result.output + repr(result.exception)
    page = out.read_text()
    assert "No evaluations found in this run" in page
    assert "1 unreadable line(s) of metrics.jsonl skipped" in page
    assert "1 of 2 logged samples" in page
    assert page.count("data:image/png;base64,") == 1

    # An eval dir outside the run is included with --eval.
    _eval_dir(tmp_path / "evals" / "base", 0.5, None, None)
    result = run("report", str(run_dir), "--out", str(out), "--eval", str(tmp_path / "evals/base"))
    assert result.exit_code == 0, result.output
    assert out.read_text().count("data:image/png;base64,") == 2


def test_report_errors_exit_2(tmp_path) -> None:
    result = run("report", str(tmp_path / "nope"))
    assert result.exit_code == 2 and "is not a run directory" in result.flat
    result = run("report", str(tmp_path))
    assert result.exit_code == 2 and "no config.yaml or metrics.jsonl" in result.flat
    run_dir = _make_run(tmp_path)
    result = run("report", str(run_dir), "--eval", str(tmp_path))
    assert result.exit_code == 2 and "is not an eval directory" in result.flat


def test_categories_section_in_task_order(tmp_path) -> None:
    from rlvr.evaluation.plots import categories_in
    from rlvr.evaluation.report import build_report

    rows = [
        {"step": 0, "eval/greedy_accuracy": 0.2, "eval/greedy_accuracy/L1": 0.4},
        {"step": 0, "eval/greedy_accuracy/L3": 0.0},
        {"step": 1, "category/L3/samples_frac": 0.75, "category/L1/samples_frac": 0.25},
        {"step": 2, "category/L1/samples_frac": 1.0, "curriculum/prob/L1": 0.9},
    ]
    assert categories_in(rows) == ["L1", "L3"]  # the eval's order, not the first step's
    assert categories_in(rows[:1]) == []  # nothing trained: no category section
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    html = build_report(tmp_path)
    assert '<section id="categories">' in html and 'alt="per-category curves"' in html
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.5}) + "\n")
    assert '<section id="categories">' not in build_report(tmp_path)
