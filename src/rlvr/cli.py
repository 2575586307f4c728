"""The ``rlvr`` command line: train, eval, tasks, algorithms."""

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
    table.add_column("sampled accuracy", justify="right")
    for when in ("before", "after"):
        if when in summary:
            r = summary[when]
            sampled = r.get("eval/sampled_accuracy")
            table.add_row(
                when,
                f"{r['eval/greedy_accuracy']:.1%}",
                "-" if sampled is None else f"{sampled:.1%}",
            )
    console.print(table)
    if "before" in summary and "after" in summary:
        gain = summary["after"]["eval/greedy_accuracy"] - summary["before"]["eval/greedy_accuracy"]
        console.print(f"greedy accuracy change: [bold]{gain * 100:+.1f} points[/]")
    console.print(f"steps: {summary['steps']}   wall time: {summary['wall_seconds'] / 60:.1f} min")
    console.print(f"run directory: [bold]{summary['run_dir']}[/]")


@app.command("eval")
def eval_(
    model: Annotated[str, typer.Argument(help="model spec, checkpoint dir, or run dir")],
    task: Annotated[str, typer.Option(help="task name (see `rlvr tasks`)")] = "arithmetic",
    level: Annotated[int, typer.Option(help="arithmetic difficulty level")] = 2,
    path: Annotated[str | None, typer.Option(help="data file for --task file")] = None,
    n_prompts: Annotated[int, typer.Option(help="held-out problems to evaluate")] = 200,
    max_new_tokens: Annotated[int, typer.Option()] = 128,
    temperature: Annotated[float, typer.Option(help="0 for greedy")] = 0.0,
    seed: Annotated[int, typer.Option(help="task seed (must match training)")] = 0,
) -> None:
    """Held-out accuracy of a model, a checkpoint or a run's latest checkpoint on a task.

    Examples:

      rlvr eval smollm2-135m-instruct --task arithmetic --level 2

      rlvr eval runs/20261121-120000-arithmetic --temperature 1.0
    """
    from rlvr.checkpoint import latest_checkpoint
    from rlvr.config import ConfigError, build_config
    from rlvr.models import (
        ModelSpecError,
        encode_prompt,
        load_model,
        load_tokenizer,
        stop_token_ids,
    )
    from rlvr.rollout import SamplingParams, TorchEngine, auto_dtype
    from rlvr.trainer import build_task

    spec = model
    if (Path(model) / "checkpoints").is_dir():
        found = latest_checkpoint(Path(model))
        if found is None:
            _fail(f"run {model} has no complete checkpoint")
        spec = str(found)
    try:
        cfg = build_config(
            {
                "task": {
                    "name": task,
                    "level": level,
                    "path": path,
                    "seed": seed,
                    "n_eval": n_prompts,
                }
            }
        )
        tokenizer = load_tokenizer(spec)
        policy = load_model(spec, auto_dtype())
    except (ConfigError, ModelSpecError, ValueError) as err:
        _fail(str(err))
        return
    from rlvr.evaluation import evaluate_accuracy

    t = build_task(cfg)
    problems = t.eval_problems()[:n_prompts]
    engine = TorchEngine(policy, tokenizer.pad_token_id, dtype=auto_dtype())
    sampling = SamplingParams(
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        stop_token_ids=stop_token_ids(tokenizer),
    )

    start = time.perf_counter()
    with console.status(f"generating {len(problems)} completions..."):
        result = evaluate_accuracy(
            engine,
            t,
            problems,
            lambda p: encode_prompt(tokenizer, p.prompt),
            lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
            sampling,
        )
    result["seconds"] = time.perf_counter() - start
    result["n_prompts"] = len(problems)
    console.print_json(json.dumps({"model": spec, "task": task, **result}))


@app.command()
def tasks() -> None:
    """List the built-in tasks.

    Example: rlvr tasks
    """
    from rlvr.data import TASKS

    table = Table(title="tasks")
    table.add_column("name")
    table.add_column("description")
    for name, description in TASKS.items():
        table.add_row(name, description)
    console.print(table)


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
    table = Table(title="algorithm presets")
    for column in ("name", "advantage", "aggregation", "clip", "beta", "summary"):
        table.add_column(column)
    for preset in PRESETS.values():
        table.add_row(
            preset.name,
            preset.advantage,
            preset.aggregation,
            f"{preset.clip_low}/{preset.clip_high}",
            str(preset.beta),
            preset.summary,
        )
    console.print(table)


if __name__ == "__main__":
    app()
