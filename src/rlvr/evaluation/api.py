"""``evaluate``: sample a model's completions of a task's held-out problems, judge them with the
task's verifier or the run's reward (``eval.judge``, :mod:`rlvr.grading.grader`), and save
them with pass@k / maj@k / mean@n and bootstrap intervals (the Python side of ``rlvr eval``; the
files are described in :mod:`rlvr.evaluation.harness`).

Where the settings come from, each layer over the one before:

1. the defaults of :class:`rlvr.config.Config`;
2. a config: ``like`` (a run directory's ``config.yaml``, or a config file), else a
   :class:`~rlvr.config.Config` given as ``cfg_or_task_section``, else the run that ``model``
   belongs to (``rlvr eval RUN`` evaluates a run as it was evaluated while training);
3. a task section given as ``cfg_or_task_section`` (a dict or ``TaskConfig``) replaces the task;
4. ``overrides`` (``--set`` strings): ``task.*``, ``reward.*``, ``model.system_prompt``,
   ``eval.n_prompts``, ``eval.max_new_tokens``, ``eval.judge``, ``eval.reward_threshold`` and
   the sampling keys of ``rollout``; setting ``task.name`` to another task starts from that
   task's defaults;
5. the keyword arguments (``n_prompts``, ``max_new_tokens``, ``temperature``, ...).

From the resulting config: the task is ``build_task(config.task)`` and the prompt the chat of
``problem.messages(config.model.system_prompt)``, exactly as in training, so a base model and a
trained run evaluated with the same config (``like=RUN``) see the same problems, prompts and
verifier (``summary["problems"]["sha256"]`` is equal). With ``eval.judge: reward`` (a run's
config, or ``--set eval.judge=reward``) the samples are judged by the config's reward as
training scores them, correct when it is at least ``eval.reward_threshold``;
``summary["judge"]`` records which judge decided. Prompts over the token limit are
refused or left out as in training (``task.max_prompt_tokens``, ``task.long_prompts``); the
problems are the first ``eval.n_prompts`` of ``task.eval_problems()``; completions get ``eval.max_new_tokens`` (else
``rollout.max_new_tokens``) tokens; ``n == 1`` is greedy unless a temperature is given, ``n > 1``
samples with the rollout's temperature, top-p, top-k and min-p (training's sampled accuracy).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.config import Config, ConfigError, TaskConfig, build_config, parse_override, read_file
from rlvr.data import Task
from rlvr.errors import RlvrError
from rlvr.evaluation.harness import (
    SUMMARY_FILE,
    EvalError,
    EvalTarget,
    build_eval_task,
    compute_summary_metrics,
    default_out_dir,
    episode_records,
    generate_samples,
    parse_ks,
    problem_set,
    read_run_config,
    resolve_target,
    save_eval,
    score_records,
)
from rlvr.grading.grader import Grader, build_grader
from rlvr.rollout import SamplingParams

EVAL_KEYS = (
    "model.system_prompt",
    "eval.n_prompts",
    "eval.max_new_tokens",
    "eval.judge",
    "eval.reward_threshold",
    "rollout.max_new_tokens",
    "rollout.temperature",
    "rollout.top_p",
    "rollout.top_k",
    "rollout.min_p",
    "rollout.stop",
    "rollout.engine",
)
"""The config keys besides ``task.*``, ``reward.*`` (the reward judge's) and ``rollout.vllm.*``
(``rollout.engine: vllm``) that an evaluation reads (and ``--set`` may change)."""


@dataclass(frozen=True)
class EvalSettings:
    """Everything that decides what an evaluation samples and how it is scored.

    Attributes:
        config: the validated config read for the task, system prompt and sampling.
        source: where ``config`` came from ("like runs/x", "run runs/x", "config", "defaults").
        n: samples per prompt.
        ks: the k of pass@k / maj@k.
        sampling: temperature, filters, token limit and stop strings (no stop token ids yet:
            they come with the tokenizer).
        sampling_seed: names the samples' random streams (:mod:`rlvr.rollout.streams`).
    """

    config: Config
    source: str
    n: int
    ks: list[int]
    sampling: SamplingParams
    sampling_seed: int


def task_shortcuts(
    task: str | None = None,
    level: int | None = None,
    path: str | None = None,
    seed: int | None = None,
) -> list[str]:
    """``rlvr eval``'s ``--task/--level/--path/--seed`` as ``--set`` overrides. They evaluate
    one task or level: a task or a level replaces a mixture of levels (``task.levels``), a task
    or a path a file task's categories (``task.category_column``)."""
    out = [] if task is None else [f"task.name={json.dumps(task)}"]
    if task is not None or level is not None:
        out.append("task.levels=null")
    if level is not None:
        out.append(f"task.level={level}")
    if task is not None or path is not None:
        out.append("task.category_column=null")
    if path is not None:
        out.append(f"task.path={json.dumps(path)}")
    return out + ([] if seed is None else [f"task.seed={seed}"])


def _base_config(
    target: EvalTarget, cfg_or_task_section: Any, like: str | Path | None
) -> tuple[dict[str, Any], str]:
    """Layers 2 and 3 of the module docstring: ``(raw config dict, where it came from)``."""
    if like is not None:
        if isinstance(cfg_or_task_section, Config):
            raise EvalError("give either a Config or like=RUN, not both")
        path = Path(like).expanduser()
        if path.is_dir() and (path / "config.yaml").is_file():
            data, source = read_file(path / "config.yaml"), f"like {like}"
        elif path.is_file():
            data, source = read_file(path), f"like {like}"
        else:
            raise EvalError(
                f"--like {like}: no such run directory (with config.yaml) or config file"
            )
    elif isinstance(cfg_or_task_section, Config):
        data, source = cfg_or_task_section.model_dump(mode="json"), "config"
    elif target.run_dir is not None:
        data, source = read_run_config(target.run_dir), f"run {target.run_dir}"
    else:
        data, source = {}, "defaults"
    if isinstance(cfg_or_task_section, TaskConfig):
        data["task"] = cfg_or_task_section.model_dump(mode="json")
    elif isinstance(cfg_or_task_section, Mapping):
        data["task"] = dict(cfg_or_task_section)
    elif cfg_or_task_section is not None and not isinstance(cfg_or_task_section, Config):
        raise EvalError(
            "evaluate: cfg_or_task_section must be a Config, a TaskConfig or a dict of task keys, "
            f"got {type(cfg_or_task_section).__name__}"
        )
    return data, source


def _with_overrides(data: dict[str, Any], overrides: Sequence[str]) -> Config:
    """Layer 4: check each key is one an evaluation reads, start a fresh task section when
    ``task.name`` changes, and validate."""
    parsed = [parse_override(text) for text in overrides]
    for key, _ in parsed:
        if not (key.startswith(("task.", "reward.", "rollout.vllm.", "env.")) or key in EVAL_KEYS):
            raise ConfigError(
                f"--set {key}: rlvr eval reads only task.*, reward.*, rollout.vllm.*, env.* and "
                f"{', '.join(EVAL_KEYS)}; the model is the MODEL argument"
            )
    names = [value for key, value in parsed if key == "task.name"]
    data = {
        key: value
        for key, value in data.items()
        # the run's algorithm too: evaluation reads none of it, but a rollout section valid for
        # it (an SFT run's group_size 1) is checked against it, not against grpo's
        if key in ("model", "task", "reward", "eval", "rollout", "env", "algorithm")
    }
    if names and names[-1] != (data.get("task") or {}).get("name", TaskConfig().name):
        data["task"] = {}
    return build_config(data, list(overrides))


def resolve_settings(
    target: EvalTarget,
    cfg_or_task_section: Any = None,
    *,
    like: str | Path | None = None,
    overrides: Sequence[str] = (),
    n: int = 1,
    k: Sequence[int] | str | None = None,
    n_prompts: int | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    max_new_tokens: int | None = None,
    system_prompt: str | None = None,
    sampling_seed: int = 1234,
    judge: str | None = None,
) -> EvalSettings:
    """The settings of an evaluation of ``target`` (see the module docstring for the layers)."""
    if n < 1:
        raise EvalError(f"n must be >= 1 (samples per prompt), got {n}")
    data, source = _base_config(target, cfg_or_task_section, like)
    extra = [] if system_prompt is None else [f"model.system_prompt={json.dumps(system_prompt)}"]
    if n_prompts is not None:
        extra.append(f"eval.n_prompts={n_prompts}")
    if max_new_tokens is not None:
        extra.append(f"eval.max_new_tokens={max_new_tokens}")
    if judge is not None:
        extra.append(f"eval.judge={json.dumps(judge)}")
    config = _with_overrides(data, [*overrides, *extra])
    ks = parse_ks(k, n) if k is None or isinstance(k, str) else parse_ks(",".join(map(str, k)), n)
    rollout = config.rollout
    if temperature is None:
        temperature = rollout.temperature if n > 1 else 0.0
    sampled = temperature > 0
    sampling = SamplingParams(
        temperature=temperature,
        top_p=(rollout.top_p if top_p is None else top_p) if sampled else 1.0,
        top_k=rollout.top_k if sampled else 0,
        min_p=rollout.min_p if sampled else 0.0,
        max_new_tokens=config.eval.max_new_tokens or rollout.max_new_tokens,
        stop=tuple(rollout.stop),
    )
    return EvalSettings(config, source, n, ks, sampling, sampling_seed)


def _device(name: str) -> Any:
    """``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` as a torch device."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise EvalError(f"--device {name!r}: expected auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise EvalError(f"--device {name}: CUDA is not available on this machine")
    return device


def _load_tokenizer(target: EvalTarget, model: str) -> Any:
    """The target's tokenizer; a model that is not on disk (and not in the local hub cache) or
    has no tokenizer files is an :class:`EvalError` naming it."""
    from rlvr.models import load_tokenizer

    try:
        return load_tokenizer(target.spec)
    except RlvrError:
        raise
    except (OSError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise EvalError(
            f"cannot load a tokenizer for model {model!r} ({target.spec}): expected a run "
            "directory, a checkpoint or model directory with tokenizer files (tokenizer.json, "
            "tokenizer_config.json), a built-in alias, or a hub id in the local Hugging Face "
            f"cache ({first})"
        ) from None


def _progress_callback(
    total_samples: int, n_prompts: int, console: Any
) -> tuple[Callable[[int, int], None], Callable[[], None]]:
    """``(advance, close)`` of the sampling progress: a live bar in a terminal, else one plain
    line per generation chunk (a log file)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    start = time.perf_counter()
    done = [0]
    if not console.is_terminal:

        def line(samples: int, prompts_done: int) -> None:
            done[0] += samples
            elapsed = _dt.timedelta(seconds=round(time.perf_counter() - start))
            console.print(
                f"sampling {done[0]}/{total_samples} samples, prompts {prompts_done}/{n_prompts}, "
                f"elapsed {elapsed}",
                markup=False,
                highlight=False,
            )

        return line, lambda: None
    progress = Progress(
        TextColumn("[bold]sampling"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("samples · prompts {task.fields[prompts]}"),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=console,
    )
    bar = progress.add_task("eval", total=total_samples, prompts=f"0/{n_prompts}")
    progress.start()

    def advance(samples: int, prompts_done: int) -> None:
        progress.update(bar, advance=samples, prompts=f"{prompts_done}/{n_prompts}")

    return advance, progress.stop


def build_summary(
    target: EvalTarget,
    model: str,
    settings: EvalSettings,
    sampling: SamplingParams,
    problems: dict[str, Any],
    metrics: dict[str, Any],
    seconds: float,
    notes: list[str],
    judge: Grader,
) -> dict[str, Any]:
    """The ``summary.json`` content of a fresh evaluation: what was evaluated (model,
    checkpoint), on what (the full task section, system prompt, :func:`problem_set`), how
    (sampling, where the settings came from, who judged: :meth:`Grader.describe`) and the
    metrics."""
    from rlvr import __version__

    cfg = settings.config
    return {
        "rlvr_version": __version__,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "model": model,
        "model_path": target.spec,
        "tag": target.tag,
        "run_dir": str(target.run_dir) if target.run_dir is not None else None,
        "checkpoint": target.checkpoint,
        "step": target.step,
        "settings_from": settings.source,
        "task": cfg.task.model_dump(mode="json"),
        "system_prompt": cfg.model.system_prompt,
        "problems": problems,
        "judge": judge.describe(),
        "sampling": {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k,
            "min_p": sampling.min_p,
            "max_new_tokens": sampling.max_new_tokens,
            "stop": list(sampling.stop),
            "seed": settings.sampling_seed,
            "engine": cfg.rollout.engine,
        },
        "seconds": seconds,
        "notes": notes,
        **metrics,
    }


def _sample(
    policy: Any,
    tokenizer: Any,
    problems: Sequence[Any],
    settings: EvalSettings,
    max_batch: int,
    console: Any,
    dtype: Any,
) -> tuple[list[list[str]], list[list[int]], list[list[bool]], SamplingParams, float]:
    """Draw ``settings.n`` completions of every problem with ``policy`` (the engine computing
    in ``dtype``).

    Returns:
        ``(texts, num_tokens, finished, sampling, seconds)``, the first three indexed
        ``[problem][sample]``; ``sampling`` with the tokenizer's stop tokens; the seconds spent
        sampling.
    """

    from rlvr.engines import build_engine, close_engine
    from rlvr.models import encode_messages, stop_token_ids

    def decode(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True)

    cfg = settings.config.model_copy(deep=True)
    cfg.rollout.max_batch = max_batch
    cfg.rollout.vllm.sleep_mode = False  # nothing else needs the GPU while evaluating
    sampling = dataclasses.replace(settings.sampling, stop_token_ids=stop_token_ids(tokenizer))
    system_prompt = settings.config.model.system_prompt
    prompts = [encode_messages(tokenizer, p.messages(system_prompt)) for p in problems]
    engine = build_engine(cfg, policy, tokenizer, dtype, decode)
    try:
        advance, close = _progress_callback(len(problems) * settings.n, len(problems), console)
        start = time.perf_counter()
        try:
            ids, finished = generate_samples(
                engine, prompts, settings.n, sampling, settings.sampling_seed, max_batch, advance
            )
        finally:
            close()
    finally:
        close_engine(engine)
    seconds = time.perf_counter() - start
    texts = [[decode(c) for c in row] for row in ids]
    return texts, [[len(c) for c in row] for row in ids], finished, sampling, seconds


def _play(
    policy: Any,
    tokenizer: Any,
    problems: Sequence[Any],
    settings: EvalSettings,
    task: Task,
    max_batch: int,
    console: Any,
    dtype: Any,
) -> tuple[list[list[Any]], SamplingParams, float]:
    """``settings.n`` episodes of every problem in the config's environment (``env``), in
    chunks of at most ``max_batch`` episodes; episode j of problem i draws from the stream
    ``stream_key(seed, i, j)`` as a single sample does. Returns the episodes
    ``[problem][sample]``, the sampling parameters and the seconds spent."""
    from rlvr.engines import build_engine, close_engine
    from rlvr.envs.agent import build_agent
    from rlvr.models import stop_token_ids
    from rlvr.rollout.streams import group_keys, stream_key

    cfg = settings.config.model_copy(deep=True)
    cfg.rollout.vllm.sleep_mode = False
    agent = build_agent(cfg, task, tokenizer)
    sampling = dataclasses.replace(settings.sampling, stop_token_ids=stop_token_ids(tokenizer))
    engine = build_engine(cfg, policy, tokenizer, dtype, agent.decode)
    n, per_chunk = settings.n, max(1, max_batch // settings.n)
    episodes: list[list[Any]] = []
    try:
        advance, close = _progress_callback(len(problems) * n, len(problems), console)
        start = time.perf_counter()
        try:
            for lo in range(0, len(problems), per_chunk):
                chunk = list(problems[lo : lo + per_chunk])
                keys = group_keys(stream_key(settings.sampling_seed), len(chunk), n, lo)
                _, played = agent.play(engine, chunk, n, sampling, keys)
                episodes += [played[i * n : (i + 1) * n] for i in range(len(chunk))]
                advance(len(chunk) * n, len(episodes))
        finally:
            close()
    finally:
        close_engine(engine)
    return episodes, sampling, time.perf_counter() - start


def _notes(n_problems: int, dropped: int, settings: EvalSettings) -> list[str]:
    """What a reader of the results should know: fewer problems than asked for, long prompts
    left out, identical samples."""
    cfg, notes = settings.config, []
    if dropped:
        notes.append(
            f"{dropped} problem(s) left out: prompt over the token limit (task.long_prompts=drop)"
        )
    if n_problems < cfg.eval.n_prompts:
        notes.append(
            f"the task has {n_problems} held-out problems (task.n_eval={cfg.task.n_eval}), "
            f"fewer than eval.n_prompts={cfg.eval.n_prompts}: all of them are evaluated"
        )
    if settings.sampling.temperature == 0 and settings.n > 1:
        notes.append(f"temperature 0 is greedy: the {settings.n} samples per prompt are identical")
    return notes


def evaluate(
    model: str | Path,
    cfg_or_task_section: Config | TaskConfig | Mapping[str, Any] | None = None,
    *,
    n: int = 1,
    k: Sequence[int] | str | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    max_new_tokens: int | None = None,
    n_prompts: int | None = None,
    system_prompt: str | None = None,
    sampling_seed: int = 1234,
    judge: str | None = None,
    max_batch: int = 256,
    device: str = "auto",
    out: str | Path | None = None,
    like: str | Path | None = None,
    overrides: Sequence[str] = (),
    progress: bool = True,
) -> dict[str, Any]:
    """Evaluate ``model`` on held-out problems, save ``samples.parquet`` and ``summary.json``
    into ``out``, and return the summary.

    Example::

        from rlvr import evaluate

        base = evaluate("smollm2-135m-instruct", like="runs/demo", out="evals/base")
        tuned = evaluate("runs/demo")  # its latest checkpoint, with the run's own settings
        assert base["problems"]["sha256"] == tuned["problems"]["sha256"]
        print(base["metrics"]["accuracy"], tuned["metrics"]["accuracy"])

        evaluate("smollm2-135m-instruct", {"name": "file", "path": "data.jsonl"}, n=8, k=[1, 8])

    Args:
        model: a run directory (its latest checkpoint), a checkpoint directory, or a model spec
            (alias, Hugging Face directory, ``.gguf`` file, hub id).
        cfg_or_task_section: a :class:`Config` (its task, system prompt, eval and sampling
            settings), or a task section (``TaskConfig`` or dict) that replaces the task.
        n: samples per prompt; ``k``: the k of pass@k / maj@k (default: powers of two up to n).
        temperature: default 0 (greedy) for ``n == 1``, else the config's rollout temperature.
        top_p, max_new_tokens, n_prompts, system_prompt: override the config's values.
        judge: ``"task"`` or ``"reward"``, overrides ``eval.judge`` (who decides a sample is
            correct: :mod:`rlvr.grading.grader`).
        out: output directory; default ``RUN/eval-<checkpoint>`` for a run, else
            ``evals/<model>``; an earlier evaluation there is replaced.
        like: a run directory (or config file) whose settings to evaluate with.
        overrides: ``--set`` strings such as ``"task.path=data.jsonl"`` (task.*, reward.* and
            the keys of :data:`EVAL_KEYS`).
        progress: show sampling progress and notes on stderr.
    Returns:
        The summary (see :func:`build_summary` and
        :func:`rlvr.evaluation.harness.compute_summary_metrics`) with ``"out_dir"`` added.
    Raises:
        RlvrError: a bad model, run, config key, task, reward or option, with a message
            naming it.
    """
    from rlvr.models import quiet_transformers

    quiet_transformers()

    model = str(model)
    target = resolve_target(model)
    settings = resolve_settings(
        target, cfg_or_task_section, like=like, overrides=overrides, n=n, k=k,
        n_prompts=n_prompts, temperature=temperature, top_p=top_p,
        max_new_tokens=max_new_tokens, system_prompt=system_prompt, sampling_seed=sampling_seed,
        judge=judge,
    )  # fmt: skip
    torch_device = _device(device)
    cfg = settings.config
    task = build_eval_task(cfg.task)
    sample_judge = build_grader(
        cfg, task
    )  # a reward that cannot judge fails before any model loads
    try:
        return _evaluate(
            target, model, settings, task, sample_judge, torch_device, out, max_batch, progress
        )
    finally:
        sample_judge.close()


def _evaluate(
    target: EvalTarget,
    model: str,
    settings: EvalSettings,
    task: Task,
    judge: Grader,
    torch_device: Any,
    out: str | Path | None,
    max_batch: int,
    progress: bool,
) -> dict[str, Any]:
    """The body of :func:`evaluate` once the settings, task and judge are known."""
    import torch
    from rich.console import Console

    from rlvr.data import limit_task_prompts
    from rlvr.models import load_model
    from rlvr.precision import resolve

    cfg = settings.config
    tokenizer = _load_tokenizer(target, model)
    # fp32 weights and a bf16/fp32 engine as in training, so greedy results match the
    # trainer's own held-out evaluation sample for sample
    # a QLoRA run's adapter is evaluated on the quantised base it was trained on
    lora = cfg.model.lora if target.run_dir is not None else None
    quantize = lora.quantize if lora is not None else None
    policy = load_model(target.spec, torch.float32, quantize)
    if quantize is None:
        policy = policy.to(torch_device)
    task, dropped = limit_task_prompts(task, tokenizer, policy, cfg)
    problems = task.eval_problems()[: cfg.eval.n_prompts]
    if not problems:
        raise EvalError(f"task {cfg.task.name} has no held-out problems left to evaluate")
    notes = _notes(len(problems), dropped, settings)
    out_dir = Path(out) if out is not None else default_out_dir(target)
    replacing = [f"replacing the previous evaluation in {out_dir}"]
    console = Console(stderr=True, quiet=not progress)
    for note in notes + (replacing if (out_dir / SUMMARY_FILE).is_file() else []):
        console.print(f"note: {note}", markup=False, highlight=False)
    dtype = resolve(cfg.rollout.dtype, torch_device, policy.config, "rollout")
    if quantize is not None:  # the engine samples from the quantised model itself
        dtype = torch.float32
    if cfg.env.name is not None:  # agent episodes, judged by their success
        episodes, sampling, seconds = _play(
            policy, tokenizer, problems, settings, task, max_batch, console, dtype
        )
        records = episode_records(task, problems, episodes)
    else:
        texts, num_tokens, finished, sampling, seconds = _sample(
            policy, tokenizer, problems, settings, max_batch, console, dtype
        )
        records = score_records(task, problems, texts, num_tokens, finished, judge)
    metrics = compute_summary_metrics(records, settings.ks)
    fingerprint = problem_set(problems, cfg.model.system_prompt)
    summary = build_summary(
        target, model, settings, sampling, fingerprint, metrics, seconds, notes, judge
    )
    save_eval(out_dir, records, summary)
    return {**summary, "out_dir": str(out_dir)}
