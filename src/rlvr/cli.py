"""The ``rlvr`` command line: train, eval, compare, report, tasks, algorithms, config.

A user-facing error (:class:`rlvr.errors.RlvrError`: bad config, data, model path, reward, a run
that went non-finite) is printed as one message without a traceback and exits 2 (1 for a run
that failed while training); ``rlvr --debug ...`` (or ``RLVR_DEBUG=1``) shows the traceback.
A run stopped by SIGINT / SIGTERM exits 130 / 143 after writing its checkpoint; Ctrl-C before
the first step (or outside a run) exits 130 without a traceback, even where library code lost the
``KeyboardInterrupt`` (:mod:`rlvr.interrupts`).
"""

from __future__ import annotations

import rlvr._record_sigint  # noqa: F401 - first: Ctrl-C during the imports below is recorded

# isort: split
import json
import os
import textwrap
from pathlib import Path
from typing import Annotated, Any, Literal

import click
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from rlvr import interrupts
from rlvr.distributed.launch import torchrun_follower
from rlvr.errors import RlvrError

interrupts.install()  # imported: Ctrl-C raises again (one recorded meanwhile: at the command)
console = Console()
err_console = Console(stderr=True, soft_wrap=True)
_debug = [bool(os.environ.get("RLVR_DEBUG"))]


class _Commands(TyperGroup):
    """rlvr's command group: user-facing errors become a message and an exit status: 2 for bad
    input (config, data, model path, reward spec: the ``ValueError`` kinds of
    :class:`RlvrError`), 1 for a run that failed (non-finite, a reward failing mid-run, a
    checkpoint that cannot be written), 130 for Ctrl-C outside a training step: also when
    library code swallowed the ``KeyboardInterrupt`` or turned it into another error (a SIGINT
    recorded by :mod:`rlvr.interrupts`)."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            interrupts.start_command()  # Ctrl-C raises and is recorded; one during the imports
            result = super().invoke(ctx)
        except KeyboardInterrupt:
            if _debug[0]:
                raise
            _interrupted()
        except (typer.Exit, click.exceptions.Exit):
            raise  # an exit status chosen by the command (130/143: a run stopped by a signal)
        except RlvrError as err:
            if _debug[0]:
                raise
            if interrupts.received():  # e.g. a model load failing because Ctrl-C cut it short
                _interrupted()
            err_console.print(Text.assemble(("error: ", "bold red"), str(err)), highlight=False)
            err_console.print("(rlvr --debug ... shows the traceback)", style="dim")
            raise typer.Exit(2 if isinstance(err, ValueError) else 1) from None
        except Exception:
            if interrupts.received() and not _debug[0]:  # Ctrl-C disguised by library code
                _interrupted()
            raise
        else:
            if interrupts.received():  # swallowed by library code: the command still stops
                _interrupted()
            return result
        finally:
            interrupts.end_command()


def _interrupted() -> None:
    err_console.print("interrupted")
    raise typer.Exit(130) from None


app = typer.Typer(
    cls=_Commands,
    help="rlvr: reinforcement learning with verifiable rewards for language models.\n\n"
    "Example: rlvr train configs/demo.yaml --set train.steps=2",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _setup(
    debug: Annotated[
        bool, typer.Option("--debug", help="show the traceback of an error (also RLVR_DEBUG=1)")
    ] = False,
) -> None:
    """rlvr: reinforcement learning with verifiable rewards for language models."""
    _debug[0] = debug or bool(os.environ.get("RLVR_DEBUG"))
    # rlvr.models.quiet_transformers' settings, without importing transformers here (~9 s of a
    # command that may need none of it): read when transformers / huggingface_hub load
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        "-s",
        help="override a config value, e.g. --set algorithm.policy_loss.clip_high=0.28",
    ),
]


def _fail(message: str) -> None:
    err_console.print(Text.assemble(("error: ", "bold red"), message), highlight=False)
    raise typer.Exit(2)


@app.command()
def train(
    config: Annotated[
        Path | None, typer.Argument(help="YAML/TOML run config (omit with --resume)")
    ] = None,
    set_: SetOption = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            help="run directory to continue from its latest good checkpoint; --set then "
            "changes length, learning rate, sampling, eval or logging from the resumed step"
        ),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option(help="replace the run already in logging.run_dir")
    ] = False,
) -> None:
    """Train a policy with GRPO (or another preset) on a task.

    Examples:

      rlvr train configs/demo.yaml

      rlvr train configs/demo.yaml --set train.steps=2 --set rollout.group_size=4

      rlvr train --resume runs/20261121-120000-arithmetic --set train.steps=60
    """
    from rlvr.config import load_config
    from rlvr.run_checks import check_writable
    from rlvr.rundir import check_new_run

    if config is None and resume is None:
        _fail("give a CONFIG file, or --resume RUN_DIR")
    if config is not None and resume is not None:
        _fail("give either a CONFIG file or --resume RUN_DIR (a resumed run keeps its config)")
    if resume is not None:
        if not (resume / "config.yaml").is_file():
            _fail(f"{resume} is not a run directory (no config.yaml)")
        base = load_config(resume / "config.yaml", set_ or [])
    else:
        base = load_config(config, set_ or [])
    follower = torchrun_follower(base.distributed.backend)  # rank 0 writes and reports the run
    if resume is None and base.logging.run_dir and not follower:
        check_new_run(Path(base.logging.run_dir), overwrite)  # refused before the slow imports
        check_writable(Path(base.logging.run_dir))  # RunDirError
    from rlvr.trainer import train as run_training

    summary = run_training(base, resume=resume, overwrite=overwrite)
    if follower:
        return
    if summary.get("stopped"):
        raise typer.Exit(128 + int(summary["stopped"]))
    _print_summary(summary)


def _print_summary(summary: dict) -> None:
    if summary.get("skipped_nonfinite"):
        err_console.print(
            f"[bold yellow]warning:[/] {summary['skipped_nonfinite']} step(s) were skipped for "
            "non-finite values (train/skipped_nonfinite in metrics.jsonl)"
        )
    if "before" not in summary and "after" not in summary:  # eval.before and eval.after off
        console.print(
            f"steps: {summary['steps']}   wall time: {summary['wall_seconds'] / 60:.1f} min"
        )
        console.print(f"run directory: [bold]{summary['run_dir']}[/]")
        return
    table = Table(title="rlvr run", show_header=True)
    table.add_column("")
    rows = [(when, summary[when]) for when in ("before", "after") if when in summary]
    agent = any("eval/greedy_turns_mean" in r for _, r in rows)  # episodes: success rates
    score = "success" if agent else "accuracy"
    table.add_column(f"greedy {score}", justify="right")
    sampled = any("eval/sampled_accuracy" in r for _, r in rows)
    if sampled:
        table.add_column(f"sampled {score}", justify="right")
    if agent:
        table.add_column("invalid actions", justify="right")
    prefix = "eval/greedy_accuracy/"  # a task with categories: greedy accuracy of each
    categories = list(
        dict.fromkeys(k[len(prefix) :] for _, r in rows for k in r if k.startswith(prefix))
    )
    for category in categories:
        table.add_column(f"greedy {category}", justify="right")

    def pct(r: dict, key: str) -> str:
        return f"{r[key]:.1%}" if key in r else "-"

    for when, r in rows:
        cells = [pct(r, "eval/greedy_accuracy")]
        cells += [pct(r, "eval/sampled_accuracy")] if sampled else []
        cells += [pct(r, "eval/greedy_tool_invalid_frac")] if agent else []
        table.add_row(when, *cells, *(pct(r, prefix + c) for c in categories))
    console.print(table)
    if "before" in summary and "after" in summary:
        gain = summary["after"]["eval/greedy_accuracy"] - summary["before"]["eval/greedy_accuracy"]
        console.print(f"greedy {score} change: [bold]{gain * 100:+.1f} points[/]")
    console.print(f"steps: {summary['steps']}   wall time: {summary['wall_seconds'] / 60:.1f} min")
    console.print(f"run directory: [bold]{summary['run_dir']}[/]")


@app.command()
def plan(
    config: Annotated[Path, typer.Argument(help="YAML/TOML run config")],
    set_: SetOption = None,
    devices: Annotated[
        int | None,
        typer.Option(min=1, help="learners (devices) to plan for (default: distributed.learners)"),
    ] = None,
    device_memory: Annotated[
        str | None,
        typer.Option(
            help="memory of each device, e.g. 80GB, 24GiB, 16G (default: train.device_memory_gb, "
            "else this machine's device)"
        ),
    ] = None,
    prompt_tokens: Annotated[
        int | None,
        typer.Option(
            min=1, help="prompt length to plan for (default: task.max_prompt_tokens, or 128)"
        ),
    ] = None,
) -> None:
    """Estimate a run's peak memory per device before running it: weights, gradients, optimizer
    states, activations, the engine's weights and KV cache; what does not fit and the cheapest
    change that would. Exits 0 when it fits, 1 when it does not.

    Examples:

      rlvr plan configs/demo.yaml

      rlvr plan configs/demo.yaml --set model.name=random:qwen2.5-7b --device-memory 80GB

      rlvr plan configs/ray_local.yaml --set train.sharding=fsdp --devices 8 --device-memory 80GB
    """
    from rlvr.config import load_config
    from rlvr.trainer.plan import parse_size
    from rlvr.trainer.plan import plan as make_plan

    cfg = load_config(config, set_ or [])
    memory = parse_size(device_memory) if device_memory is not None else None
    if memory is None:
        from rlvr.trainer.plan import device_memory as local_memory

        memory = local_memory(cfg)
    found = make_plan(cfg, devices, memory, prompt_tokens)
    console.print(found.text(), highlight=False, markup=False, soft_wrap=True)
    if not found.fits:
        raise typer.Exit(1)


@app.command("eval")
def eval_(
    model: Annotated[
        str | None,
        typer.Argument(
            help="model spec (alias, HF dir, .gguf, hub id), checkpoint dir, or run dir (its "
            "latest checkpoint, with the run's own eval settings); omit with --rescore"
        ),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            "-s",
            help="a task or eval setting, as in training: task.KEY=VALUE (any task key), "
            "model.system_prompt, eval.n_prompts, eval.max_new_tokens, eval.judge, "
            "eval.reward_threshold, reward.KEY, rollout.temperature, ...",
        ),
    ] = None,
    like: Annotated[
        Path | None,
        typer.Option(
            help="evaluate with this run's task, system prompt and eval settings (its "
            "config.yaml; or a config file), e.g. a base model on a run's problems"
        ),
    ] = None,
    task: Annotated[
        str | None, typer.Option(help="shortcut for --set task.name=NAME (see `rlvr tasks`)")
    ] = None,
    level: Annotated[int | None, typer.Option(help="shortcut for --set task.level=N")] = None,
    path: Annotated[str | None, typer.Option(help="shortcut for --set task.path=FILE")] = None,
    seed: Annotated[int | None, typer.Option(help="shortcut for --set task.seed=N")] = None,
    n_prompts: Annotated[
        int | None,
        typer.Option(min=1, help="held-out problems evaluated; default: eval.n_prompts (100)"),
    ] = None,
    n: Annotated[int, typer.Option("--n", min=1, help="samples per prompt")] = 1,
    k: Annotated[
        str | None,
        typer.Option(
            "--k",
            help="k values of pass@k / maj@k, e.g. 1,2,4,8; default: powers of "
            "two up to --n, and --n",
        ),
    ] = None,
    temperature: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            help="sampling temperature, 0 for greedy; default: 0 when --n 1, else "
            "rollout.temperature (1.0)",
        ),
    ] = None,
    top_p: Annotated[
        float | None,
        typer.Option(min=0.0, max=1.0, help="nucleus sampling mass; default: rollout.top_p"),
    ] = None,
    max_new_tokens: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="token limit per completion; default: eval.max_new_tokens, else "
            "rollout.max_new_tokens (128)",
        ),
    ] = None,
    sampling_seed: Annotated[int, typer.Option(help="seed of the samples' random streams")] = 1234,
    system_prompt: Annotated[
        str | None, typer.Option(help="system message; default: model.system_prompt")
    ] = None,
    judge: Annotated[
        Literal["task", "reward"] | None,
        typer.Option(
            help="who decides a sample is correct: task (the task's answer check) or reward "
            "(the config's reward >= eval.reward_threshold, as in training; e.g. unit tests); "
            "default: eval.judge (task)",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="output dir; default: RUN/eval-<checkpoint> for runs, else evals/<model>"
        ),
    ] = None,
    rescore: Annotated[
        Path | None,
        typer.Option(help="recompute scores and metrics of an eval dir from its stored samples"),
    ] = None,
    max_batch: Annotated[
        int, typer.Option(min=1, help="most samples generated at once (bounds memory)")
    ] = 256,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N")] = "auto",
) -> None:
    """Sample completions of held-out problems, judge them with the task's verifier (or the run's
    reward: --judge reward), and report pass@k, maj@k, mean@n, answer entropy and length, with
    bootstrap confidence intervals over problems.

    The task, system prompt and eval settings are training's: a run's own (rlvr eval RUN), or
    another run's (--like RUN: a base model scored on the run's problems, prompts and
    verifier), changed with --set task.KEY=VALUE as in training. Every sample and score is
    saved to DIR/samples.parquet and the metrics, the task section and the problem ids to
    DIR/summary.json; --rescore DIR recomputes them without generating. With the defaults
    (--n 1, temperature 0) this is greedy held-out accuracy.

    Examples:

      rlvr eval smollm2-135m-instruct --task arithmetic --level 2

      rlvr eval runs/demo2 --n 64 --k 1,2,4,8,16,32,64 --temperature 1.0

      rlvr eval smollm2-135m-instruct --like runs/demo2 --n 64 --out runs/demo2/eval-base

      rlvr eval smollm2-135m-instruct --like runs/code --judge reward --n 8

      rlvr eval smollm2-135m-instruct --set task.name=file --set task.path=data.jsonl --set task.prompt_column=question

      rlvr eval --rescore runs/demo2/eval-step_000030 --k 1,4,16
    """
    from rlvr.evaluation.api import evaluate, task_shortcuts
    from rlvr.evaluation.harness import load_summary, parse_ks
    from rlvr.evaluation.harness import rescore as rescore_dir

    if rescore is not None:
        if model is not None:
            _fail("give either MODEL (to generate) or --rescore DIR, not both")
        if judge is not None:
            _fail(
                "--judge applies when generating: --rescore re-judges with the judge its "
                "summary.json records"
            )
        ks = None if k is None else parse_ks(k, int(load_summary(rescore).get("n", 1)))
        summary, changed = rescore_dir(rescore, ks=ks)
        console.print(f"rescored {summary['n_samples']} samples: {changed} score(s) changed")
        if summary.get("not_rescored"):
            console.print(f"kept, not recomputed: {', '.join(summary['not_rescored'])}")
        _print_eval(summary, rescore)
        return
    if model is None:
        _fail("give a MODEL (spec, checkpoint dir or run dir), or --rescore DIR")
        return
    summary = evaluate(
        model,
        n=n,
        k=k,
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        n_prompts=n_prompts,
        system_prompt=system_prompt,
        sampling_seed=sampling_seed,
        judge=judge,
        max_batch=max_batch,
        device=device,
        out=out,
        like=like,
        overrides=[*task_shortcuts(task, level, path, seed), *(set_ or [])],
    )
    _print_eval(summary, Path(summary["out_dir"]))


def _ci_text(summary: dict, name: str, digits: int = 3) -> str:
    value = summary["metrics"].get(name)
    if value is None:
        return "-"
    ci = summary.get("ci", {}).get(name)
    text = f"{value:.{digits}f}"
    return text + (f" [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]" if ci else "")


def _print_eval(summary: dict, out_dir: Path) -> None:
    """The metrics table of an evaluation, where it was saved, and a JSON line for scripts."""
    from rlvr.evaluation.compare import task_key

    n, m = summary["n"], summary["metrics"]
    task = summary.get("task", {})
    level = round(100 * summary.get("confidence", 0.95))
    leveled = task.get("name", "arithmetic") in ("arithmetic", "countdown")
    levels = (task.get("levels") or task.get("level")) if leveled else None
    judge = summary.get("judge") or {"name": "task"}
    judged = "" if judge["name"] == "task" else f", correct: reward >= {judge['threshold']:g}"
    title = (
        f"{summary.get('tag')} on {task_key(task)}: "
        f"{summary['n_prompts']} prompts x {n} samples, "
        f"T={summary.get('sampling', {}).get('temperature')}{judged}"
    )
    table = Table(title=title)
    table.add_column("k", justify="right")
    table.add_column(f"pass@k [{level}% CI]", justify="right")
    table.add_column(f"maj@k [{level}% CI]", justify="right")
    for kk in summary["ks"]:
        table.add_row(str(kk), _ci_text(summary, f"pass@{kk}"), _ci_text(summary, f"maj@{kk}"))
    console.print(table)
    per_sample = Table(title="per sample (mean over problems)", show_header=True)
    per_sample.add_column("metric")
    per_sample.add_column(f"value [{level}% CI]", justify="right")
    per_sample.add_row(f"mean@{n} (accuracy of one sample)", _ci_text(summary, f"mean@{n}"))
    per_sample.add_row("answer entropy (nats)", _ci_text(summary, "answer_entropy"))
    per_sample.add_row("length (tokens)", _ci_text(summary, "length_mean", 1))
    per_sample.add_row("truncated fraction", _ci_text(summary, "truncated_frac"))
    per_sample.add_row("no-answer fraction", _ci_text(summary, "no_answer_frac"))
    console.print(per_sample)
    if summary.get("by_category"):
        top = max(summary["ks"])
        by_category = Table(title=f"per category [{level}% CI]")
        for name in ("category", "prompts", f"mean@{n}", f"pass@{top}", f"maj@{top}"):
            by_category.add_column(name, justify="left" if name == "category" else "right")
        for category, part in summary["by_category"].items():
            by_category.add_row(
                category,
                str(part["n_prompts"]),
                *(
                    _ci_text(part, f"{kind}@{k}")
                    for kind, k in (("mean", n), ("pass", top), ("maj", top))
                ),
            )
        console.print(by_category)
    console.print(f"saved samples and summary to [bold]{out_dir}[/]")
    brief = {
        "model": summary.get("model_path"),
        "task": task.get("name"),
        "level": levels,
        "n": n,
        "temperature": summary.get("sampling", {}).get("temperature"),
        "n_prompts": summary["n_prompts"],
        "problems_sha256": summary.get("problems", {}).get("sha256"),
        "judge": judge["name"],
        **m,
        "seconds": summary.get("seconds"),
        "out": str(out_dir),
    }
    console.print_json(json.dumps(brief))


@app.command()
def compare(
    paths: Annotated[
        list[Path] | None, typer.Argument(help="eval dirs or run dirs, grouped into methods")
    ] = None,
    method: Annotated[
        list[str] | None,
        typer.Option(
            "--method", "-m", help="a method and its runs: NAME=path1,path2,... (repeatable)"
        ),
    ] = None,
    metric: Annotated[
        str,
        typer.Option(
            help="score per run: a summary metric (pass@1, maj@8, mean@16, ...) or a training-log "
            "key of run dirs (eval/greedy_accuracy: its last value)"
        ),
    ] = "pass@1",
    reps: Annotated[int, typer.Option(min=100, help="bootstrap resamples")] = 2000,
    confidence: Annotated[
        float, typer.Option(min=0.5, max=0.999, help="confidence level of intervals")
    ] = 0.95,
    seed: Annotated[int, typer.Option(help="bootstrap seed")] = 0,
    plot: Annotated[
        Path | None,
        typer.Option(help="also write a PNG of the aggregates, profiles and P(X > Y) here"),
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="also write all numbers to this JSON file")
    ] = None,
) -> None:
    """Compare methods across seeds: IQM, mean and median with stratified bootstrap confidence
    intervals, probability of improvement and performance profiles (Agarwal et al. 2021, "Deep RL
    at the Edge of the Statistical Precipice").

    Each argument is an eval dir or a run dir (a run contributes its latest checkpoint's
    RUN/eval-* dirs, one per task). Without --method, runs whose configs are equal up to
    train.seed form one method (or runs with the same config `name`). An eval dir of a model
    outside any run (a base model: `rlvr eval BASE --like RUN --out DIR`) is a method of its
    own, and with a training-log metric eval/greedy_* it gives its greedy evaluation's metric.

    Methods evaluated on the same problems (equal problem ids, e.g. `rlvr eval BASE --like
    RUN` and `rlvr eval RUN`) are also compared problem by problem: the mean per-problem
    difference with an interval resampling runs, then problems, the problems each wins, ties
    and loses, and an exact sign test (McNemar's exact test for 0/1 scores).

    Intervals over seeds need enough seeds to hold their level: an exact test over n seeds
    cannot go below p = 2^(1-n) two-sided (6 seeds for 95%). Rows with fewer runs are marked
    `!` in the tables.

    Examples:

      rlvr compare runs/grpo-s0 runs/grpo-s1 runs/dapo-s0 runs/dapo-s1

      rlvr compare -m grpo=runs/grpo-s0,runs/grpo-s1 -m dapo=runs/dapo-s0,runs/dapo-s1

      rlvr compare -m base=runs/grpo-s0/eval-base -m grpo=runs/grpo-s0,runs/grpo-s1 --metric eval/greedy_accuracy

      rlvr compare runs/* --metric eval/greedy_accuracy --plot cmp.png --json cmp.json
    """
    from rlvr.evaluation.compare import (
        BUDGET,
        compare_figure,
        group_sources,
        parse_method_option,
    )
    from rlvr.evaluation.compare import (
        compare as compare_groups,
    )
    from rlvr.evaluation.harness import EvalError

    try:
        methods = [parse_method_option(text) for text in method or []]
        groups = group_sources(list(paths or []), methods, metric)
        result = compare_groups(groups, reps=reps, confidence=confidence, seed=seed)
    except EvalError as err:
        _fail(str(err))
        return
    level = round(100 * confidence)
    needed = result["seeds_needed"]
    short = f"! fewer than {needed} runs: not {level}% intervals (see the warning below)"
    taus = result["taus"]
    picks = [25, 50, 75]
    table = Table(
        title=f"{metric} per method ({level}% stratified bootstrap CIs, {reps} resamples)"
    )
    for column in ("method", "runs", "IQM", "mean", "median"):
        table.add_column(column, justify="left" if column == "method" else "right")
    for i in picks:
        table.add_column(f"P(score > {taus[i]:.3g})", justify="right")
    for name, entry in result["methods"].items():
        mark = "" if entry["supports_level"] else " !"
        cells = [name, f"{entry['runs']}{mark}"]
        for stat in ("iqm", "mean", "median"):
            est, lo, hi = entry[stat]
            cells.append(f"{est:.3f} [{lo:.3f}, {hi:.3f}]")
        cells += [f"{entry['profile']['value'][i]:.2f}" for i in picks]
        table.add_row(*cells)
    if not all(entry["supports_level"] for entry in result["methods"].values()):
        table.caption, table.caption_justify = short, "left"
    console.print(table)
    console.print(f"tasks: {', '.join(result['tasks'])}")
    budgets = {name: e["budget"] for name, e in result["methods"].items() if e["budget"]}
    if budgets:  # what each method spent per step
        keys = [k for k in BUDGET if any(k in b for b in budgets.values())]
        spent = Table(title="budget per training step (mean over the steps of each run, then runs)")
        spent.add_column("method")
        for key in keys:
            spent.add_column(key, justify="right")
        for name, budget in budgets.items():
            spent.add_row(name, *(f"{budget[k]:.4g}" if k in budget else "-" for k in keys))
        console.print(spent)
    if result["improvement"]:
        poi = Table(title=f"probability of improvement ({level}% CI)")
        poi.add_column("X")
        poi.add_column("Y")
        poi.add_column("P(X > Y)", justify="right")
        for pair in result["improvement"]:
            est, lo, hi = pair["p"]
            mark = "" if pair["supports_level"] else " !"
            poi.add_row(pair["x"], pair["y"], f"{est:.3f} [{lo:.3f}, {hi:.3f}]{mark}")
        if not all(pair["supports_level"] for pair in result["improvement"]):
            poi.caption, poi.caption_justify = short, "left"
        console.print(poi)
    if result["paired"]:
        paired = Table(
            title=f"paired per-problem comparison of {metric} ({level}% CI over runs, then "
            "problems)"
        )
        for column in ("X", "Y", "task", "problems", "mean X - Y", "X wins/ties/losses", "p"):
            paired.add_column(column, justify="left" if column in ("X", "Y", "task") else "right")
        for pair in result["paired"]:
            est, lo, hi = pair["mean_diff"]
            mark = "" if pair["supports_level"] else " !"
            paired.add_row(
                pair["x"],
                pair["y"],
                pair["task"],
                str(pair["n_problems"]),
                f"{est:+.3f} [{lo:+.3f}, {hi:+.3f}]{mark}",
                f"{pair['wins']}/{pair['ties']}/{pair['losses']}",
                f"{pair['p_value']:.3g}",
            )
        if not all(pair["supports_level"] for pair in result["paired"]):
            paired.caption, paired.caption_justify = short, "left"
        console.print(paired)
        tests = sorted({pair["test"] for pair in result["paired"]})
        console.print(
            f"p: two-sided {' / '.join(tests)} on the untied problems (given these runs: it "
            "tests the problems, not another seed)"
        )
    for skip in result["paired_skipped"]:
        console.print(
            f"[yellow]note:[/] no paired comparison of {skip['x']} and {skip['y']} on "
            f"{skip['task']}: {skip['reason']}"
        )
    if not all(entry["supports_level"] for entry in result["methods"].values()):
        console.print(f"[yellow]warning:[/] {_few_seeds_warning(needed, level)}")
    if plot is not None:
        from rlvr.evaluation.plots import png_bytes

        plot.parent.mkdir(parents=True, exist_ok=True)
        plot.write_bytes(png_bytes(compare_figure(result, metric)))
        console.print(f"plot: [bold]{plot}[/]")
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps({"metric": metric, **result}, indent=2) + "\n")
        console.print(f"numbers: [bold]{json_out}[/]")


def _few_seeds_warning(needed: int, level: int) -> str:
    """Why ``rlvr compare`` marks rows with fewer than ``needed`` runs ``!``
    (:func:`rlvr.evaluation.stats.seeds_needed`)."""
    fewer = needed - 1
    return (
        f"fewer than {needed} runs per method cannot support {level}% intervals: an exact test "
        f"over n seeds cannot go below p = 2^(1-n) two-sided ({2.0 ** (1 - fewer):.3g} with "
        f"{fewer}), and a percentile bootstrap of 3 runs' mean is the range of the 3. The rows "
        f"marked ! give the spread of these runs, not {level}% intervals (1 run: no seed "
        "variation at all); use more seeds."
    )


@app.command()
def repro(
    name: Annotated[str, typer.Argument(help="a claim folder's name, or all")] = "all",
    directory: Annotated[
        Path, typer.Option("--dir", help="the folder of the claims (repro/<claim>/claim.yaml)")
    ] = Path("repro"),
    root: Annotated[Path, typer.Option(help="where the runs go")] = Path("runs/repro"),
    table_only: Annotated[
        bool, typer.Option(help="only write RESULTS.md from the runs' records")
    ] = False,
    keep_checkpoints: Annotated[
        bool,
        typer.Option(
            help="keep each finished run's checkpoints (~1.6 GB a SmolLM2 run); by default "
            "they are removed once its record is written"
        ),
    ] = False,
) -> None:
    """Reproduce the papers' claims: run every arm x seed of a claim (finished runs skipped,
    interrupted ones resumed), evaluate, compare, and write DIR/RESULTS.md from the runs'
    records, DIR/<claim>/results/<arm>/seed<s>.json, keeping its History section and adding
    to it any published result the new table supersedes (docs: repro/README.md).

    Examples:

      rlvr repro negative_samples

      rlvr repro all

      rlvr repro --table-only
    """
    import time

    from rlvr.repro import estimate_minutes, find_claims, pending_runs, results_table, run_claims

    claims = find_claims(directory, name)
    todo = sum(len(pending_runs(c)) for c in claims)
    console.print(
        f"{len(claims)} claim(s), {todo} run(s) to do: about "
        f"{estimate_minutes(claims):.0f} min (an arm's finished runs' mean wall time, else "
        "its claim.yaml's minutes_per_run)"
    )
    failures = (
        []
        if table_only
        else run_claims(claims, root, say=console.print, keep_checkpoints=keep_checkpoints)
    )
    out = directory / "RESULTS.md"
    previous = out.read_text() if out.is_file() else ""  # its History section is kept
    today = time.strftime("%Y-%m-%d", time.gmtime())
    out.write_text(results_table(find_claims(directory), directory, previous, today))
    console.print(f"table: [bold]{out}[/]")
    if failures:
        console.print(f"[red]{len(failures)} run(s) failed:[/]")
        for line in failures:
            console.print(f"  {line}", markup=False, highlight=False)
        raise typer.Exit(1)


@app.command()
def report(
    run: Annotated[Path, typer.Argument(help="run directory")],
    out: Annotated[Path | None, typer.Option(help="HTML file; default RUN/report.html")] = None,
    eval_dirs: Annotated[
        list[Path] | None,
        typer.Option(
            "--eval", help="another eval dir to include, e.g. a base model's (repeatable)"
        ),
    ] = None,
    samples: Annotated[
        int, typer.Option(min=0, help="completions shown in the samples table")
    ] = 24,
) -> None:
    """Write a self-contained HTML report of a run: training curves (reward, accuracy, length,
    entropy, KL, clip fractions, step time), pass@k curves of its evaluations (RUN/eval-* and
    --eval dirs) and a sample of completions. Figures are embedded; no server needed.

    Examples:

      rlvr report runs/demo2

      rlvr report runs/demo2 --eval evals/smollm2-135m-instruct --out demo2.html
    """
    from rlvr.evaluation.harness import EvalError
    from rlvr.evaluation.report import build_report, find_eval_dirs

    try:
        if not run.is_dir():
            raise EvalError(f"{run} is not a run directory (not found)")
        evals = find_eval_dirs(run) + [Path(p) for p in eval_dirs or []]
        text = build_report(run, evals, max_samples=samples)
    except EvalError as err:
        _fail(str(err))
        return
    target = out if out is not None else run / "report.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    console.print(f"report: [bold]{target}[/] ({len(text) / 1e6:.1f} MB)")


@app.command()
def export(
    run: Annotated[
        Path, typer.Argument(help="run directory (its latest checkpoint) or checkpoint")
    ],
    out: Annotated[Path, typer.Argument(help="output directory")],
    merge: Annotated[
        bool,
        typer.Option(
            "--merge", help="a LoRA run: merge the adapter into the base weights (a plain model)"
        ),
    ] = False,
    overwrite: Annotated[bool, typer.Option(help="replace OUT if it exists")] = False,
) -> None:
    """Write a run's trained policy to OUT: a LoRA run's adapter in PEFT's format
    (PeftModel.from_pretrained(base, OUT) loads it), or with --merge a plain Hugging Face model
    directory with the adapter merged, which transformers and vLLM load; a full fine-tuning
    run's model directory.

    Examples:

      rlvr export runs/demo_lora adapters/demo

      rlvr export runs/demo_lora --merge models/demo-merged
    """
    from rlvr.export import export as export_policy

    done = export_policy(run, out, merge=merge, overwrite=overwrite)
    what = {
        "adapter": "LoRA adapter (PEFT format)",
        "merged": "model with the LoRA adapter merged",
        "model": "model",
    }[done.kind]
    console.print(f"exported the {what} of {done.checkpoint} to [bold]{done.out}[/]")


def _print_listing(title: str, header: list[str], rows: list[list[str]]) -> None:
    """Rows of (name, short fields..., description), names never cut: a table whose name and
    short columns do not wrap when they fit the console with 30 columns left for the
    description; otherwise (a narrow terminal, a pipe) one block per row: the name on its own
    line, then the short fields and the description indented and wrapped."""
    from textwrap import wrap

    from rich.text import Text

    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header[:-1])]
    if sum(widths) + 3 * len(header) + 1 + 30 <= console.width:  # cells, padding and rules
        table = Table(title=title)
        for column in header[:-1]:
            table.add_column(column, no_wrap=True)
        table.add_column(header[-1])
        for row in rows:
            table.add_row(*map(Text, row))  # cells are text, not markup
        console.print(table)
        return
    width = max(console.width - 2, 20)
    console.print(Text("\n".join(wrap(title, width)), style="bold"), end="\n\n")
    for name, *fields, description in rows:
        parts = "  ".join(f"{h}: {v}" for h, v in zip(header[1:-1], fields, strict=True))
        body = [
            line for t in (parts, description) for line in wrap(t, width, break_on_hyphens=False)
        ]
        console.print(Text(name, style="bold"), soft_wrap=True)
        console.print(Text("".join(f"  {line}\n" for line in body)), soft_wrap=True)


@app.command()
def tasks() -> None:
    """List the built-in tasks.

    Example: rlvr tasks
    """
    from rlvr.catalog import TASKS

    rows = [[name, TASKS.descriptions.get(name, "")] for name in TASKS]
    _print_listing("tasks", ["name", "description"], rows)


@app.command()
def envs() -> None:
    """List the built-in agent environments (env.name); docs/agents.md explains them.

    Example: rlvr envs
    """
    from rlvr.catalog import ENVS
    from rlvr.plugins import load_entry_points

    load_entry_points()
    rows = [[name, ENVS.descriptions.get(name, "")] for name in ENVS]
    rows.append(["module:Class", "your own environment (reset / step), see docs/agents.md"])
    _print_listing("environments (env.name)", ["name", "description"], rows)


@app.command()
def curricula() -> None:
    """List the prompt samplers (curriculum.name); docs/curriculum.md has their formulas.

    Example: rlvr curricula
    """
    from rlvr.curriculum import CURRICULA
    from rlvr.plugins import load_entry_points

    load_entry_points()
    _print_listing(
        "curricula (curriculum.name; sec and dump need task.levels or task.category_column)",
        ["name", "description"],
        [[name, entry.description] for name, entry in CURRICULA.items()],
    )


@app.command()
def algorithms(
    name: Annotated[str | None, typer.Argument(help="a preset to show in full")] = None,
    plugin: Annotated[
        list[str] | None,
        typer.Option(help="a plug-in module (or .py file) to import first; repeatable"),
    ] = None,
    config: Annotated[
        Path | None, typer.Option(help="import this config's plugins first (a file or run dir)")
    ] = None,
) -> None:
    """List algorithm presets and every registered part a config can select (installed
    plug-ins' included), or show the resolved parts of one preset.

    Examples:

      rlvr algorithms

      rlvr algorithms dapo

      rlvr algorithms --plugin my_parts.py
    """
    from rlvr.algorithms import PRESETS, as_overrides, get_preset
    from rlvr.config import load_config
    from rlvr.plugins import load_plugins
    from rlvr.registries import algorithm_parts
    from rlvr.trainer.stages import STAGES

    if config is not None:
        load_config(config / "config.yaml" if config.is_dir() else config)
    load_plugins(plugin or [], Path.cwd())
    if name is not None:
        try:
            preset = get_preset(name)
        except ValueError as err:
            _fail(str(err))
            return
        shape = as_overrides(preset)
        parts = [[key, _part_text(shape[key])] for key in shape]
        parts += [["citation", preset.citation], ["summary", preset.summary]]
        _print_listing(f"preset {name}", ["part", "value"], parts)
        return
    rows = [_preset_row(preset) for preset in PRESETS.values()]
    _print_listing(
        "algorithm presets (rlvr algorithms NAME for every part)",
        ["name", "objective", "advantage", "loss", "clip", "aggregation", "KL", "summary"],
        rows,
    )
    registries = algorithm_parts()
    parts = [[key, ", ".join(sorted(registry))] for key, registry in registries.items()]
    parts.append(["algorithm.stages", ", ".join(sorted(STAGES))])
    _print_listing(
        "registered parts (each selectable by its key; @register_* in a plug-in adds one)",
        ["key", "names"],
        parts[1:],
    )
    papers = [
        [key, name, part.paper]
        for key in ("algorithm.advantage.name", "algorithm.policy_loss.name")
        for name, part in sorted(registries[key].items())
        if part.paper
    ]
    _print_listing(
        "advantages and policy losses, and their papers", ["key", "name", "paper"], papers
    )


def _preset_row(preset: Any) -> list[str]:
    """A preset's line of ``rlvr algorithms``: its objective and the parts it uses ("-" for
    those its objective does not: a pair objective has no advantage, loss or aggregation)."""
    from rlvr.algorithms import OBJECTIVES

    objective, loss, kl = preset.objective, preset.policy_loss, preset.kl
    kind = OBJECTIVES[objective.name].kind
    pg, pairs = kind == "policy_gradient", kind == "pairs"
    return [
        preset.name,
        objective.name + (" on the data" if objective.samples == "data" else ""),
        "-" if pairs else preset.advantage.name,
        loss.name if pg else "-",
        f"{loss.clip_low}/{loss.clip_high}" if pg else "-",
        "-" if pairs else preset.aggregation.name,
        f"{kl.beta} {kl.estimator} in {kl.placement}" if kl.beta else "-",
        preset.summary,
    ]


def _part_text(value: Any) -> str:
    """One part of a preset as ``rlvr algorithms NAME`` prints it: ``key: value`` pairs."""
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_part_text(v)}" for k, v in value.items()) or "-"
    if isinstance(value, list):
        return "; ".join(_part_text(v) for v in value) or "-"
    return "null" if value is None else str(value)


# ---------------------------------------------------------------- rlvr config

config_app = typer.Typer(help="Show run configs: every key, its value, default and help.")
app.add_typer(config_app, name="config")


@config_app.command("show")
def config_show(
    config: Annotated[
        Path | None, typer.Argument(help="YAML/TOML config or run directory (omit: defaults)")
    ] = None,
    set_: SetOption = None,
    changed: Annotated[bool, typer.Option(help="only keys that differ from the default")] = False,
) -> None:
    """Print the resolved config: each key's value, its default and what it does.

    Examples:

      rlvr config show

      rlvr config show configs/demo.yaml --set train.lr=3e-5

      rlvr config show runs/demo --changed
    """
    from rlvr.config import describe, load_config

    if config is not None and config.is_dir():
        config = config / "config.yaml"
    cfg = load_config(config, set_ or [])
    section = None
    for key, value, default, help_text in describe(cfg):
        if changed and value == default:
            continue
        head = key.split(".")[0]
        if head != section:
            section = head
            console.print(f"[bold]{head}[/]")
        mark = "" if value == default else f"  [yellow](default {json.dumps(default)})[/]"
        console.print(f"  {key} = {json.dumps(value)}{mark}", highlight=False)
        if help_text:
            indent = " " * 6
            wrapped = textwrap.fill(
                help_text,
                max(40, console.width - 1),
                initial_indent=indent,
                subsequent_indent=indent,
            )
            console.print(wrapped, style="dim", highlight=False, markup=False)


# ---------------------------------------------------------------- rlvr rm (reward models)

rm_app = typer.Typer(
    help="Bradley-Terry reward models: train on preference pairs, evaluate, then use one in a "
    "run as reward.terms: [{name: reward_model, params: {path: DIR}}].",
    no_args_is_help=True,
)
app.add_typer(rm_app, name="rm")

PromptColumn = Annotated[str, typer.Option(help="column of the user message")]
ChosenColumn = Annotated[str, typer.Option(help="column of the preferred response")]
RejectedColumn = Annotated[str, typer.Option(help="column of the rejected response")]


def _rm_metrics_text(metrics: dict[str, float]) -> str:
    if not metrics:
        return "- (no held-out pairs)"
    return f"{metrics['accuracy']:.1%} (mean margin {metrics['margin']:+.3f})"


@rm_app.command("train")
def rm_train(
    data: Annotated[Path, typer.Option(help="preference pairs: .jsonl/.json/.parquet/.csv file")],
    model: Annotated[str, typer.Option(help="backbone: alias, HF dir, .gguf file or hub id")],
    out: Annotated[Path, typer.Option(help="output directory of the reward model")],
    epochs: Annotated[int, typer.Option(min=1, help="passes over the training pairs")] = 1,
    lr: Annotated[float, typer.Option(min=0.0, help="AdamW learning rate")] = 1e-5,
    batch_size: Annotated[int, typer.Option(min=1, help="pairs per optimiser step")] = 8,
    max_length: Annotated[
        int, typer.Option(min=2, help="longest sequence in tokens; longer ones are truncated")
    ] = 1024,
    eval_fraction: Annotated[
        float, typer.Option(min=0.0, max=0.99, help="held-out share of the pairs")
    ] = 0.1,
    seed: Annotated[int, typer.Option(help="seed of the split, head init and shuffling")] = 0,
    dtype: Annotated[str, typer.Option(help="fp32, or bf16 autocast")] = "fp32",
    center_coef: Annotated[
        float, typer.Option(min=0.0, help="weight of the reward-centering term")
    ] = 0.0,
    system_prompt: Annotated[
        str | None, typer.Option(help="system message (used again when scoring)")
    ] = None,
    threads: Annotated[int | None, typer.Option(min=1, help="torch CPU threads")] = None,
    prompt_column: PromptColumn = "prompt",
    chosen_column: ChosenColumn = "chosen",
    rejected_column: RejectedColumn = "rejected",
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
) -> None:
    """Train a Bradley-Terry reward model on preference pairs (prompt, chosen, rejected).

    Example: rlvr rm train --data pairs.jsonl --model smollm2-135m-instruct --out runs/rm
    """
    from rlvr.reward_models.train import RewardModelConfig, train_reward_model

    try:
        config = RewardModelConfig(
            data=str(data),
            model=model,
            out=str(out),
            epochs=epochs,
            lr=lr,
            batch_size=batch_size,
            max_length=max_length,
            eval_fraction=eval_fraction,
            seed=seed,
            dtype=dtype,  # type: ignore[arg-type]
            center_coef=center_coef,
            system_prompt=system_prompt,
            threads=threads,
            prompt_column=prompt_column,
            chosen_column=chosen_column,
            rejected_column=rejected_column,
        )
        report = train_reward_model(config, progress=progress, console=console)
    except ValueError as err:  # ModelSpecError included
        _fail(str(err))
        return
    console.print(f"pairs: {report.n_train} train, {report.n_eval} held out")
    console.print(f"held-out pairwise accuracy before: {_rm_metrics_text(report.before)}")
    console.print(f"held-out pairwise accuracy after:  {_rm_metrics_text(report.after)}")
    if report.truncated:
        console.print(f"truncated sequences (> {max_length} tokens): {report.truncated}")
    console.print(f"steps: {report.steps}   wall time: {report.wall_seconds:.1f} s")
    console.print(f"reward model: [bold]{report.out}[/]")


@rm_app.command("eval")
def rm_eval(
    model_dir: Annotated[Path, typer.Option(help="directory written by `rlvr rm train`")],
    data: Annotated[Path, typer.Option(help="preference pairs to score (every row)")],
    batch_size: Annotated[int, typer.Option(min=1, help="sequences per forward")] = 16,
    prompt_column: PromptColumn = "prompt",
    chosen_column: ChosenColumn = "chosen",
    rejected_column: RejectedColumn = "rejected",
) -> None:
    """Pairwise accuracy of a trained reward model on every pair of a file.

    Example: rlvr rm eval --model-dir runs/rm --data pairs-test.jsonl
    """
    from rlvr.reward_models import evaluate_pairs, load_pairs, load_reward_model

    try:
        pairs = load_pairs(data, prompt_column, chosen_column, rejected_column)
        metrics = evaluate_pairs(load_reward_model(model_dir), pairs, batch_size)
    except ValueError as err:  # ModelSpecError included
        _fail(str(err))
        return
    console.print(f"pairs: {len(pairs)}")
    console.print(f"pairwise accuracy: {_rm_metrics_text(metrics)}")


# ---------------------------------------------------------------- rlvr serve, rlvr judge


@app.command()
def serve(
    model: Annotated[
        str, typer.Argument(help="model spec (alias, HF dir, .gguf, hub id), checkpoint or run dir")
    ],
    port: Annotated[int, typer.Option(min=0, max=65535, help="port (0: any free one)")] = 8000,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    name: Annotated[
        str | None, typer.Option(help="the model name clients ask for; default: MODEL")
    ] = None,
    dtype: Annotated[str, typer.Option(help="fp32, bf16 or fp16")] = "fp32",
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:1, ...")] = "cpu",
    max_batch: Annotated[int, typer.Option(min=1, help="most sequences decoded at once")] = 64,
    engine: Annotated[str, typer.Option(help="torch or vllm (rlvr's engines)")] = "torch",
    max_tokens_limit: Annotated[
        int,
        typer.Option(
            min=1,
            help="most tokens of one completion: a larger max_tokens is a 400; omitted, "
            "max_tokens is the context left after the prompt, at most this",
        ),
    ] = 4096,
    max_model_len: Annotated[
        int | None,
        typer.Option(
            min=2,
            help="longest prompt + completion in tokens (a longer request is a 400); "
            "default: the model's context (max_position_embeddings)",
        ),
    ] = None,
) -> None:
    """Serve a model behind an OpenAI-compatible API (/v1/chat/completions, /v1/completions),
    e.g. a judge for several runs (reward.judges: {NAME: {engine: http, base_url: URL, model:
    NAME}}). Replies carry their token ids; with logprobs, the model's own log-probs.

    Shared fairly: requests are checked first (a prompt + max_tokens longer than the context,
    or max_tokens above --max-tokens-limit, is a 400 saying so); on the torch engine with a
    Llama or Qwen2 model, concurrent requests take turns of 32 tokens on the model, so a long
    generation does not hold up short ones (other engines decode a batch in one call); a
    request whose client disconnects stops being decoded.

    Example: rlvr serve smollm2-135m-instruct --port 8000
    """
    from rlvr.serve import serve as run_server

    if dtype not in ("fp32", "bf16", "fp16"):
        _fail(f"--dtype {dtype!r}: fp32, bf16 or fp16")
    if engine not in ("torch", "vllm"):
        _fail(f"--engine {engine!r}: torch or vllm")

    def ready(url: str) -> None:
        console.print(
            f"serving {name or model} at [bold]{url}[/] (Ctrl-C stops)",
            highlight=False,
            soft_wrap=True,
        )

    try:
        run_server(
            model,
            host,
            port,
            name,
            dtype,
            device,
            max_batch,
            ready,
            engine,
            max_tokens_limit,
            max_model_len,
        )
    except (ValueError, OSError) as err:  # ModelSpecError included; a port in use
        _fail(str(err))


judge_app = typer.Typer(
    help="LLM judges: probe how easily one is fooled (docs/judges.md).", no_args_is_help=True
)
app.add_typer(judge_app, name="judge")


@judge_app.command("probe")
def judge_probe(
    config: Annotated[
        Path | None,
        typer.Argument(help="a run config whose reward uses a judge (probes each judge term)"),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(help="probe this judge instead: a model spec, or the name at --base-url"),
    ] = None,
    base_url: Annotated[
        str | None, typer.Option(help="an OpenAI-compatible endpoint serving --model")
    ] = None,
    api_key_env: Annotated[
        str | None, typer.Option(help="environment variable holding the endpoint's API key")
    ] = None,
    reward: Annotated[
        str, typer.Option(help="with --model: judge_score, judge_genrm or judge_fallback")
    ] = "judge_score",
    verdict: Annotated[
        str | None, typer.Option(help="with --model: probability, yes_no, number, ...")
    ] = None,
    set_: SetOption = None,
    n: Annotated[int, typer.Option("--n", min=1, help="held-out problems probed")] = 8,
    threshold: Annotated[float, typer.Option(help="least score of an accepted answer")] = 0.5,
    out: Annotated[Path | None, typer.Option(help="also write the report as JSON here")] = None,
) -> None:
    """How often a judge accepts content-free "master keys" (":", "Solution", ...) and wrong
    answers, and rejects correct ones, on a task's held-out problems.

    Examples:

      rlvr judge probe --model smollm2-135m-instruct --set task.name=arithmetic

      rlvr judge probe configs/judge_writing.yaml
    """
    from rlvr.config import load_config
    from rlvr.data.from_config import build_task
    from rlvr.rewards.probe import probe_terms

    if (config is None) == (model is None):
        _fail("give a run CONFIG, or --model (with --base-url for an endpoint)")
    overrides = list(set_ or [])
    if model is not None:
        engine = "http" if base_url else "torch"
        overrides += [
            f"reward.judges={json.dumps({'probe': {'engine': engine, 'model': model, 'base_url': base_url, 'api_key_env': api_key_env}})}",
            "reward.terms="
            + json.dumps(
                [
                    {
                        "name": reward,
                        "params": {"judge": "probe", **({"verdict": verdict} if verdict else {})},
                    }
                ]
            ),
        ]
    try:
        cfg = load_config(config, overrides)
        reports = probe_terms(cfg.reward, build_task(cfg.task), n, threshold)
    except (RlvrError, ValueError) as err:
        _fail(str(err))
        return
    if not reports:
        _fail(f"{config}: no judge term (judge_score, judge_genrm, judge_fallback) in reward.terms")
    for report in reports:
        for line in report.lines():
            console.print(line, highlight=False, markup=False)
    if out is not None:
        out.write_text(json.dumps([r.as_dict() for r in reports], indent=2) + "\n")
        console.print(f"report: {out}")


if __name__ == "__main__":
    app()
