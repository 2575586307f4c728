"""`rlvr report`: one self-contained HTML file with curves, pass@k and escaped samples."""

from __future__ import annotations

import base64
import json
import math
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


def _make_guarded_run(root: Path, old_nulls: bool = False) -> Path:
    """A run with two reward terms, a NaN loss at step 3 (null in an old file), a skipped
    step, evals of 100 problems at steps 0 and 4, and samples with and without terms."""
    run_dir = root / "guarded"
    run_dir.mkdir()
    cfg = build_config(
        {
            "model": {"name": "tiny-random-llama"},
            "eval": {"n_prompts": 100},
            "reward": {"terms": [{"name": "math"}, {"name": "format", "weight": 0.5}]},
        }
    )
    save_config(cfg, run_dir / "config.yaml")
    rows = [{"step": 0, "eval/greedy_accuracy": 0.42}]
    for step in range(1, 5):
        rows.append(
            {
                "step": step,
                "reward/mean": 0.2 * step,
                "reward/math/mean": 0.1 * step,
                "reward/math/errors": 0.0,
                "reward/format/mean": 0.25 * step,
                "reward/format/errors": 2.0 if step == 2 else 0.0,
                "reward/errors": 2.0 if step == 2 else 0.0,
                "policy/loss": (None if old_nulls else "nan") if step == 3 else 0.5,
                "train/skipped_nonfinite": float(step >= 3),
            }
        )
    rows.append({"step": 4, "eval/greedy_accuracy": 0.66})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    samples = [
        {"step": 1, "prompt": "p1", "answer": "1", "completion": "c1", "reward": 0.5,
         "terms": {"math": 0.0, "format": 1.0}},
        {"step": 2, "prompt": "p2", "answer": "2", "completion": "c2", "reward": 1.0},
        {"step": 3, "prompt": "p3", "answer": "3", "completion": "c3", "reward": "nan",
         "terms": {"math": "nan", "format": 1.0}},
    ]  # fmt: skip
    (run_dir / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    return run_dir


def test_report_headline_terms_intervals_and_nonfinite_notice(tmp_path) -> None:
    from rlvr.evaluation.report import build_report

    page = build_report(_make_guarded_run(tmp_path))
    # Before -> after at the top, with 95% Wilson intervals for n = 100 (hand-computed:
    # 0.42 -> [0.3280, 0.5179], 0.66 -> [0.5628, 0.7454]) and the change in points.
    headline = re.search(r'<p class="headline" id="before-after">(.*?)</p>', page).group(1)
    assert (
        "Held-out greedy accuracy: 42.0% [32.8%, 51.8%] before training → "
        "66.0% [56.3%, 74.5%] after step 4 (+24.0 points)." in headline
    )  # the intervals do not overlap: no caveat
    assert "95% Wilson intervals, n = 100 held-out problems (eval.n_prompts" in headline
    assert (
        page.index('id="nonfinite"')
        < page.index('id="before-after"')
        < page.index('<section id="overview">')
    )
    # The NaN loss is named with its step; the skipped step is counted.
    notice = re.search(r'<div class="alert" id="nonfinite">(.*?)</div>', page).group(1)
    assert "<code>policy/loss</code> is nan at step 3; non-finite at 1 step(s): 3" in notice
    assert "1 training step(s) skipped for non-finite values" in notice
    assert "<th>steps skipped for non-finite values</th><td>1</td>" in page
    # Per-term curves with the config's weights; a term's failures are reported.
    assert '<section id="reward-terms">' in page and 'alt="reward term curves"' in page
    assert "format: 2 failed reward call(s)" in page and "math: " not in page
    # Samples: the per-term breakdown, "-" without terms, NaN shown rather than hidden.
    assert "<th>reward terms</th>" in page
    assert "<td><pre>math 0.000\nformat 1.000</pre></td>" in page
    assert '<td class="num">1.000</td><td><pre>-</pre></td>' in page
    assert '<td class="num">nan</td><td><pre>math nan\nformat 1.000</pre></td>' in page


def test_report_reads_old_null_metrics_as_nonfinite(tmp_path) -> None:
    from rlvr.evaluation.report import build_report, read_metric_rows

    run_dir = _make_guarded_run(tmp_path, old_nulls=True)
    rows, bad, nonfinite = read_metric_rows(run_dir / "metrics.jsonl")
    assert bad == 0 and nonfinite == {"policy/loss": [(3, "null")]}
    assert math.isnan(rows[3]["policy/loss"]) and rows[2]["policy/loss"] == 0.5
    page = build_report(run_dir)
    assert "is null (how older rlvr versions wrote NaN/inf) at step 3" in page


def test_wilson_interval_and_headline_without_n(tmp_path) -> None:
    from rlvr.evaluation.report import build_report, wilson_interval

    low, high = wilson_interval(0.25, 4)  # (0.25 + z^2/8 -+ z sqrt(3/64 + z^2/64)) / (1 + z^2/4)
    assert abs(low - 0.045587) < 1e-5 and abs(high - 0.699358) < 1e-5
    assert wilson_interval(0.0, 10)[0] == 0.0 and abs(wilson_interval(1.0, 10)[1] - 1.0) < 1e-12
    rows = [{"step": 0, "eval/greedy_accuracy": 0.5}, {"step": 2, "eval/greedy_accuracy": 0.6}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = build_report(tmp_path)  # no config.yaml: n unknown, no interval claimed
    assert "Held-out greedy accuracy: 50.0% before training → 60.0% after step 2 (+10.0" in page
    assert "Wilson" not in page
    rows.append({"step": 2, "eval/greedy_n": 10.0})  # a logged n wins over the config
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = build_report(tmp_path)
    assert "the intervals overlap: not clear evidence of a change" in page
    assert "n = 10 held-out problems." in page
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.1}) + "\n")
    assert "No held-out evaluation in metrics.jsonl." in build_report(tmp_path)


def visible_axes(fig) -> list:
    return [ax for ax in fig.axes if ax.get_visible()]


def test_every_plot_has_a_y_label_and_marks_nonfinite_steps(tmp_path) -> None:
    from rlvr.evaluation.plots import reward_terms, reward_terms_figure, training_figure
    from rlvr.evaluation.report import read_metric_rows

    rows, _, _ = read_metric_rows(_make_guarded_run(tmp_path) / "metrics.jsonl")
    assert reward_terms(rows) == ["math", "format"]  # reward/errors is not a term
    fig = reward_terms_figure(rows, {"format": 0.5})
    assert [ax.get_title() for ax in fig.axes] == ["math", "format (weight 0.5)"]
    assert {ax.get_ylabel() for ax in fig.axes} == {"mean score (unweighted)"}
    rows.append({"step": 5, "reward/mean": 0.1, "reward/accuracy": 0.2, "time/step": 2.0})
    fig = training_figure(rows, {"eval/greedy_accuracy": lambda acc: (acc - 0.1, acc + 0.1)})
    assert all(ax.get_ylabel() for ax in visible_axes(fig))
    titles = {ax.get_title(): ax for ax in visible_axes(fig)}
    assert titles["held-out accuracy"].get_ylabel() == "fraction of problems"
    assert len(titles["held-out accuracy"].containers) == 1  # the error bars
    # Steps where a metric was NaN/inf (policy/loss here, not plotted) are marked on every panel.
    fig = training_figure(rows, marks=[3.0])
    for ax in visible_axes(fig):
        assert [line.get_xdata()[0] for line in ax.lines if line.get_color() == "red"] == [3.0]


def test_resumes_and_learning_rate_changes_are_marked_on_the_curves(tmp_path) -> None:
    from rlvr.evaluation.plots import reward_terms_figure, training_figure
    from rlvr.evaluation.report import build_report, read_metric_rows, run_events

    run_dir = _make_guarded_run(tmp_path)
    resumes = [
        {"step": 2, "checkpoint": "step_000002", "changes": {"train.lr": {"old": 0.001, "new": 0.00025}}},
        {"step": 3, "checkpoint": "step_000003", "changes": {"eval.every": {"old": 0, "new": 1}}},
    ]  # fmt: skip
    (run_dir / "resumes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in resumes))
    events = run_events(run_dir)
    assert [(x, kind) for x, kind, _ in events] == [(2.5, "resume"), (2.5, "lr"), (3.5, "resume")]
    page = build_report(run_dir)
    note = re.search(r'<p class="note" id="run-events">(.*?)</p>', page).group(1)
    assert "resumed: after step 2 (from step_000002); learning rate changed" in note
    assert "learning rate changed: from step 3: train.lr 0.001 → 0.00025" in note
    rows, _, _ = read_metric_rows(run_dir / "metrics.jsonl")
    marked = [(x, kind) for x, kind, _ in events]
    for fig in (training_figure(rows, events=marked), reward_terms_figure(rows, events=marked)):
        for ax in visible_axes(fig):
            lines = {(line.get_xdata()[0], line.get_color()) for line in ax.lines}
            assert {(2.5, "tab:blue"), (2.5, "tab:green"), (3.5, "tab:blue")} <= lines
            labels = ax.get_legend_handles_labels()[1]
            assert "resumed" in labels and "learning rate changed" in labels


def test_sandbox_section_totals_the_reward_hacking_counters(tmp_path) -> None:
    from rlvr.evaluation.report import build_report

    rows = [
        {"step": 1, "sandbox/samples": 8.0, "sandbox/killed/memory": 2.0},
        {"step": 2, "sandbox/samples": 8.0, "sandbox/forbidden/syscall": 1.0},
        {"step": 3, "sandbox/samples": 8.0, "sandbox/killed/memory": 1.0},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    html = build_report(tmp_path)
    section = html.split('<section id="sandbox">')[1].split("</section>")[0]
    assert "24 sample(s) ran in the sandbox" in section
    memory = section.split("sandbox/killed/memory")[1].split("</tr>")[0]
    assert ">3<" in memory and "12.5%" in memory and "1, 3" in memory
    assert "sandbox/forbidden/syscall" in section
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "sandbox/samples": 4}) + "\n")
    assert "No program hit a limit" in build_report(tmp_path)
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.5}) + "\n")
    assert '<section id="sandbox">' not in build_report(tmp_path)


def test_mismatch_section_shows_first_last_and_max(tmp_path) -> None:
    from rlvr.evaluation.report import build_report

    rows = [
        {"step": 1, "mismatch/abs_log_ratio": 0.02, "mismatch/kl_k3": 0.001},
        {"step": 2, "mismatch/abs_log_ratio": 0.05, "mismatch/kl_k3": "nan"},
        {"step": 3, "mismatch/abs_log_ratio": 0.03, "mismatch/kl_k3": 0.002},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    html = build_report(tmp_path)
    section = html.split('<section id="mismatch">')[1].split("</section>")[0]
    abs_row = section.split("mismatch/abs_log_ratio")[1].split("</tr>")[0]
    assert "0.0200" in abs_row and "0.0300" in abs_row and "0.0500 (step 2)" in abs_row
    kl_row = section.split("mismatch/kl_k3")[1].split("</tr>")[0]
    assert "0.0020 (step 3)" in kl_row  # max over the finite values
    assert "ratio_out_of_band_frac" not in section and "rollout/is_weight_mean" not in section
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.5}) + "\n")
    assert '<section id="mismatch">' not in build_report(tmp_path)


def test_a_worked_example_in_the_prompt_is_not_labelled_as_the_policys_turns():
    """The calculator's demonstration (any tool environment's examples) is part of the prompt:
    the report labels it so, and the policy's actions are turns 1.. with their rewards."""
    from test_progress import EPISODE

    from rlvr.evaluation.report import _transcript_text

    text = _transcript_text(EPISODE, [0.0, 0.5])
    labels = re.findall(r"^\[(.*)\]$", text, flags=re.M)
    assert labels == [
        "system",
        "user",
        "assistant, in the prompt (a worked example, not the policy's)",
        "tool",
        "assistant, in the prompt (a worked example, not the policy's)",
        "user",
        "assistant, turn 1, reward 0.000",
        "tool",
        "assistant, turn 2, reward 0.500",
        "user",
    ]
