"""The ``rlvr`` command line: train, eval, compare, report, tasks, algorithms."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    help="rlvr: reinforcement learning with verifiable rewards for language models.\n\n"
    "Example: rlvr train configs/demo.yaml --set train.steps=2",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()


@app.callback()
def _quiet_libraries() -> None:
    """rlvr: reinforcement learning with verifiable rewards for language models."""
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set", "-s", help="override a config value, e.g. --set algorithm.clip_high=0.28"
    ),
]


def _fail(message: str) -> None:
    console.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(2)


@app.command()
def train(
    config: Annotated[
        Path | None, typer.Argument(help="YAML/TOML run config (omit with --resume)")
    ] = None,
    set_: SetOption = None,
    resume: Annotated[
        Path | None, typer.Option(help="run directory to continue from its latest checkpoint")
    ] = None,
) -> None:
    """Train a policy with GRPO (or another preset) on a task.

    Examples:

      rlvr train configs/demo.yaml

      rlvr train configs/demo.yaml --set train.steps=2 --set rollout.group_size=4

      rlvr train --resume runs/20261121-120000-arithmetic
    """
    from rlvr.config import ConfigError, load_config
    from rlvr.models import ModelSpecError
    from rlvr.trainer import train as run_training

    if config is None and resume is None:
        _fail("give a CONFIG file, or --resume RUN_DIR")
    try:
        if resume is not None:
            if not (resume / "config.yaml").is_file():
                _fail(f"{resume} is not a run directory (no config.yaml)")
            base = load_config(resume / "config.yaml", set_ or [])
        else:
            base = load_config(config, set_ or [])
        summary = run_training(base, resume=resume)
    except (ConfigError, ModelSpecError) as err:
        _fail(str(err))
        return
    _print_summary(summary)


def _print_summary(summary: dict) -> None:
    table = Table(title="rlvr run", show_header=True)
    table.add_column("")
    table.add_column("greedy accuracy", justify="right")
    rows = [(when, summary[when]) for when in ("before", "after") if when in summary]
    sampled = any("eval/sampled_accuracy" in r for _, r in rows)
    if sampled:
        table.add_column("sampled accuracy", justify="right")
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
        table.add_row(when, *cells, *(pct(r, prefix + c) for c in categories))
    console.print(table)
    if "before" in summary and "after" in summary:
        gain = summary["after"]["eval/greedy_accuracy"] - summary["before"]["eval/greedy_accuracy"]
        console.print(f"greedy accuracy change: [bold]{gain * 100:+.1f} points[/]")
    console.print(f"steps: {summary['steps']}   wall time: {summary['wall_seconds'] / 60:.1f} min")
    console.print(f"run directory: [bold]{summary['run_dir']}[/]")


@app.command("eval")
def eval_(
    model: Annotated[
        str | None,
        typer.Argument(
            help="model spec (alias, HF dir, .gguf, hub id), checkpoint dir, or run dir (its "
            "latest checkpoint); omit with --rescore"
        ),
    ] = None,
    task: Annotated[
        str | None,
        typer.Option(help="task name (see `rlvr tasks`); default: the run's task, else arithmetic"),
    ] = None,
    level: Annotated[
        int | None, typer.Option(help="arithmetic difficulty level; default: the run's, else 2")
    ] = None,
    path: Annotated[str | None, typer.Option(help="data file for --task file")] = None,
    n_prompts: Annotated[int, typer.Option(min=1, help="held-out problems to evaluate")] = 200,
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
            min=0.0, help="sampling temperature, 0 for greedy; default: 0 when --n 1, else 1.0"
        ),
    ] = None,
    top_p: Annotated[float, typer.Option(min=0.0, max=1.0, help="nucleus sampling mass")] = 1.0,
    max_new_tokens: Annotated[
        int | None,
        typer.Option(min=1, help="token limit per completion; default: the run's, else 128"),
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="task seed (must match training); default: the run's, else 0")
    ] = None,
    sampling_seed: Annotated[int, typer.Option(help="seed of the sampler's generator")] = 1234,
    system_prompt: Annotated[
        str | None, typer.Option(help="system message; default: the run's model.system_prompt")
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
    """Sample completions of held-out problems, score them, and report pass@k, maj@k, mean@n,
    answer entropy and length, with bootstrap confidence intervals over problems.

    Every sample and score is saved to DIR/samples.parquet and the metrics to
    DIR/summary.json; --rescore DIR recomputes them without generating. With the defaults
    (--n 1, temperature 0) this is greedy held-out accuracy.

    Examples:

      rlvr eval smollm2-135m-instruct --task arithmetic --level 2

      rlvr eval runs/demo2 --n 64 --k 1,2,4,8,16,32,64 --temperature 1.0

      rlvr eval smollm2-135m-instruct --level 2 --n 64 --out runs/demo2/eval-base

      rlvr eval --rescore runs/demo2/eval-step_000030 --k 1,4,16
    """
    from rlvr.evaluation.harness import EvalError, parse_ks
    from rlvr.evaluation.harness import rescore as rescore_dir

    if rescore is not None:
        if model is not None:
            _fail("give either MODEL (to generate) or --rescore DIR, not both")
        try:
            from rlvr.evaluation.harness import load_summary

            ks = None if k is None else parse_ks(k, int(load_summary(rescore).get("n", 1)))
            summary, changed = rescore_dir(rescore, ks=ks)
        except (EvalError, ValueError) as err:
            _fail(str(err))
            return
        console.print(f"rescored {summary['n_samples']} samples: {changed} score(s) changed")
        _print_eval(summary, rescore)
        return
    if model is None:
        _fail("give a MODEL (spec, checkpoint dir or run dir), or --rescore DIR")
    _run_eval(
        model,
        task=task,
        level=level,
        path=path,
        n_prompts=n_prompts,
        n=n,
        k=k,
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        seed=seed,
        sampling_seed=sampling_seed,
        system_prompt=system_prompt,
        out=out,
        max_batch=max_batch,
        device=device,
    )


def _run_eval(model: str, **opt) -> None:
    """Generation part of `rlvr eval` (see its help)."""
    import torch
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from rlvr.config import ConfigError, build_config
    from rlvr.data import build_task
    from rlvr.evaluation.harness import (
        EvalError,
        build_summary,
        compute_summary_metrics,
        default_out_dir,
        generate_samples,
        parse_ks,
        read_run_config,
        resolve_target,
        save_eval,
        score_records,
    )
    from rlvr.models import (
        ModelSpecError,
        encode_messages,
        load_model,
        load_tokenizer,
        stop_token_ids,
    )
    from rlvr.rollout import SamplingParams, TorchEngine, auto_dtype

    n: int = opt["n"]
    try:
        ks = parse_ks(opt["k"], n)
        target = resolve_target(model)
    except EvalError as err:
        _fail(str(err))
        return
    run_cfg = read_run_config(target.run_dir) if target.run_dir is not None else {}
    task_cfg = dict(run_cfg.get("task") or {})
    if opt["task"] is not None or opt["level"] is not None:
        task_cfg.pop("levels", None)  # an explicit task or level replaces the run's mixture
    if opt["task"] is not None or opt["path"] is not None:
        task_cfg.pop("category_column", None)
    for key in ("task", "level", "path", "seed"):
        if opt[key] is not None:
            task_cfg["name" if key == "task" else key] = opt[key]
    task_cfg.setdefault("name", "arithmetic")
    task_cfg["n_eval"] = opt["n_prompts"]
    max_new_tokens = opt["max_new_tokens"]
    if max_new_tokens is None:
        from_run = (run_cfg.get("eval") or {}).get("max_new_tokens") or (
            run_cfg.get("rollout") or {}
        ).get("max_new_tokens")
        max_new_tokens = int(from_run) if from_run else 128
    system_prompt = opt["system_prompt"]
    if system_prompt is None:
        system_prompt = (run_cfg.get("model") or {}).get("system_prompt")
    temperature = opt["temperature"]
    if temperature is None:
        temperature = 0.0 if n == 1 else 1.0
    if temperature == 0 and n > 1:
        console.print(f"note: temperature 0 is greedy: the {n} samples per prompt are identical")
    device = opt["device"]
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(device)
    except RuntimeError:
        _fail(f"--device {opt['device']!r}: expected auto, cpu, cuda or cuda:N")
        return
    if device.type == "cuda" and not torch.cuda.is_available():
        _fail(f"--device {opt['device']}: CUDA is not available on this machine")
    try:
        cfg = build_config({"task": task_cfg})
        tokenizer = load_tokenizer(target.spec)
        dtype = auto_dtype(device)
        policy = load_model(target.spec, dtype).to(device)
        task = build_task(cfg.task)
    except (ConfigError, ModelSpecError, ValueError) as err:
        _fail(str(err))
        return
    problems = task.eval_problems()[: opt["n_prompts"]]
    if not problems:
        _fail(f"task {task_cfg['name']} has no held-out problems")
    engine = TorchEngine(policy, tokenizer.pad_token_id, dtype=dtype, max_batch=opt["max_batch"])
    sampling = SamplingParams(
        temperature=temperature,
        top_p=opt["top_p"],
        max_new_tokens=max_new_tokens,
        stop_token_ids=stop_token_ids(tokenizer),
    )
    prompts = [encode_messages(tokenizer, p.messages(system_prompt)) for p in problems]
    generator = torch.Generator(device=device).manual_seed(opt["sampling_seed"])

    start = time.perf_counter()
    with Progress(
        TextColumn("[bold]sampling"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("samples · prompts {task.fields[prompts]}"),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=console,
    ) as progress:
        bar = progress.add_task("eval", total=len(problems) * n, prompts=f"0/{len(problems)}")

        def advance(samples: int, prompts_done: int) -> None:
            progress.update(bar, advance=samples, prompts=f"{prompts_done}/{len(problems)}")

        ids, finished = generate_samples(
            engine, prompts, n, sampling, generator, opt["max_batch"], advance
        )
    seconds = time.perf_counter() - start
    texts = [[tokenizer.decode(c, skip_special_tokens=True) for c in row] for row in ids]
    records = score_records(task, problems, texts, [[len(c) for c in row] for row in ids], finished)
    metrics = compute_summary_metrics(records, ks)
    task_json = cfg.task.model_dump(mode="json")
    summary = build_summary(
        target, model, task_json, system_prompt, sampling, opt["sampling_seed"], metrics, seconds
    )
    out_dir = opt["out"] if opt["out"] is not None else default_out_dir(target)
    if (out_dir / "summary.json").is_file():
        console.print(f"replacing the previous evaluation in {out_dir} (use --out to keep both)")
    save_eval(out_dir, records, summary)
    _print_eval(summary, out_dir)


def _ci_text(summary: dict, name: str, digits: int = 3) -> str:
    value = summary["metrics"].get(name)
    if value is None:
        return "-"
    ci = summary.get("ci", {}).get(name)
    text = f"{value:.{digits}f}"
    return text + (f" [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]" if ci else "")


def _print_eval(summary: dict, out_dir: Path) -> None:
    """The metrics table of an evaluation, where it was saved, and a JSON line for scripts."""
    n, m = summary["n"], summary["metrics"]
    task = summary.get("task", {})
    level = round(100 * summary.get("confidence", 0.95))
    levels = task.get("levels") or task.get("level")
    title = (
        f"{summary.get('tag')} on {task.get('name')} level {levels}: "
        f"{summary['n_prompts']} prompts x {n} samples, "
        f"T={summary.get('sampling', {}).get('temperature')}"
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
    plot: Annotated[Path, typer.Option(help="PNG with aggregates, profiles and P(X > Y)")] = Path(
        "compare.png"
    ),
    json_out: Annotated[
        Path | None, typer.Option("--json", help="also write all numbers to this JSON file")
    ] = None,
) -> None:
    """Compare methods across seeds: IQM, mean and median with stratified bootstrap confidence
    intervals, probability of improvement and performance profiles (Agarwal et al. 2021, "Deep RL
    at the Edge of the Statistical Precipice").

    Each argument is an eval dir or a run dir (a run contributes its latest checkpoint's
    RUN/eval-* dirs, one per task). Without --method, runs whose configs are equal up to
    train.seed form one method (or runs with the same config `name`).

    Examples:

      rlvr compare runs/grpo-s0 runs/grpo-s1 runs/dapo-s0 runs/dapo-s1

      rlvr compare -m grpo=runs/grpo-s0,runs/grpo-s1 -m dapo=runs/dapo-s0,runs/dapo-s1

      rlvr compare runs/* --metric eval/greedy_accuracy --plot cmp.png --json cmp.json
    """
    from rlvr.evaluation.compare import (
        compare as compare_groups,
    )
    from rlvr.evaluation.compare import (
        compare_figure,
        group_sources,
        parse_method_option,
    )
    from rlvr.evaluation.harness import EvalError
    from rlvr.evaluation.plots import png_bytes

    try:
        methods = [parse_method_option(text) for text in method or []]
        groups = group_sources(list(paths or []), methods, metric)
        result = compare_groups(groups, reps=reps, confidence=confidence, seed=seed)
    except EvalError as err:
        _fail(str(err))
        return
    level = round(100 * confidence)
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
        cells = [name, str(entry["runs"])]
        for stat in ("iqm", "mean", "median"):
            est, lo, hi = entry[stat]
            cells.append(f"{est:.3f} [{lo:.3f}, {hi:.3f}]")
        cells += [f"{entry['profile']['value'][i]:.2f}" for i in picks]
        table.add_row(*cells)
    console.print(table)
    console.print(f"tasks: {', '.join(result['tasks'])}")
    if result["improvement"]:
        poi = Table(title=f"probability of improvement ({level}% CI)")
        poi.add_column("X")
        poi.add_column("Y")
        poi.add_column("P(X > Y)", justify="right")
        for pair in result["improvement"]:
            est, lo, hi = pair["p"]
            poi.add_row(pair["x"], pair["y"], f"{est:.3f} [{lo:.3f}, {hi:.3f}]")
        console.print(poi)
    for name, entry in result["methods"].items():
        if entry["runs"] == 1:
            console.print(
                f"[yellow]note:[/] {name} has 1 run per task: its intervals have zero width "
                "and say nothing about seed-to-seed variation; use more seeds."
            )
        elif entry["runs"] < 5:
            console.print(
                f"[yellow]note:[/] {name} has {entry['runs']} runs per task: bootstrap "
                "intervals from so few seeds are too narrow; use 5 or more seeds."
            )
    plot.parent.mkdir(parents=True, exist_ok=True)
    plot.write_bytes(png_bytes(compare_figure(result, metric)))
    console.print(f"plot: [bold]{plot}[/]")
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps({"metric": metric, **result}, indent=2) + "\n")
        console.print(f"numbers: [bold]{json_out}[/]")


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


def _print_listing(title: str, entries: dict[str, str]) -> None:
    """A two-column table: name, description."""
    table = Table(title=title)
    table.add_column("name")
    table.add_column("description")
    for name, description in entries.items():
        table.add_row(name, description)
    console.print(table)


@app.command()
def tasks() -> None:
    """List the built-in tasks.

    Example: rlvr tasks
    """
    from rlvr.data import TASKS

    _print_listing("tasks", TASKS)


@app.command()
def curricula() -> None:
    """List the prompt samplers (curriculum.name); docs/curriculum.md has their formulas.

    Example: rlvr curricula
    """
    from rlvr.curriculum import SAMPLERS

    _print_listing(
        "curricula (curriculum.name; sec and dump need task.levels or task.category_column)",
        SAMPLERS,
    )


@app.command()
def algorithms(
    name: Annotated[str | None, typer.Argument(help="a preset to show in full")] = None,
) -> None:
    """List algorithm presets, or show the resolved parts of one.

    Example: rlvr algorithms dapo
    """
    import dataclasses

    from rlvr.algorithms import PRESETS, get_preset

    if name is not None:
        try:
            preset = get_preset(name)
        except ValueError as err:
            _fail(str(err))
            return
        table = Table(title=f"preset {name}", show_header=False)
        for field in dataclasses.fields(preset):
            table.add_row(field.name, str(getattr(preset, field.name)))
        console.print(table)
        return
    table = Table(title="algorithm presets (rlvr algorithms NAME for every part)")
    for column in ("name", "advantage", "loss", "clip", "aggregation", "KL", "summary"):
        table.add_column(column)
    for preset in PRESETS.values():
        kl = f"{preset.beta} {preset.kl_estimator} in {preset.kl_in}" if preset.beta else "-"
        table.add_row(
            preset.name,
            preset.advantage,
            preset.policy_loss,
            f"{preset.clip_low}/{preset.clip_high}",
            preset.aggregation,
            kl,
            preset.summary,
        )
    console.print(table)


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
    from rlvr.rewards.reward_model import RewardModelConfig, train_reward_model

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
    from rlvr.rewards.reward_model import evaluate_pairs, load_pairs, load_reward_model

    try:
        pairs = load_pairs(data, prompt_column, chosen_column, rejected_column)
        metrics = evaluate_pairs(load_reward_model(model_dir), pairs, batch_size)
    except ValueError as err:  # ModelSpecError included
        _fail(str(err))
        return
    console.print(f"pairs: {len(pairs)}")
    console.print(f"pairwise accuracy: {_rm_metrics_text(metrics)}")


if __name__ == "__main__":
    app()
