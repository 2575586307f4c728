"""Build: a run's parts from its config, whatever the backend (docs/design.md, "One training
step"): the preset, the task, the reward (probed) and the judge first (:func:`build_front`: bad
data or a broken reward fail before any model loads), then the policy, the learner
(:func:`build_learner`), the prompt sampler and the player of the run's episodes
(:func:`build_player`: a plain task's one-step episodes or an environment's), and a resume
that loads a checkpoint into them (:func:`resume_parts`). A backend
(:mod:`rlvr.trainer.backends`) puts them in one process or in Ray actors.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from rlvr import adapters, algorithms, precision
from rlvr.checkpoint import TrainerState
from rlvr.config import Config, ConfigError
from rlvr.curriculum import PromptSampler, make_sampler
from rlvr.data import Task, build_task, data_fingerprint
from rlvr.devices import resolve_device
from rlvr.envs.agent import build_agent
from rlvr.grading import Grader, build_grader
from rlvr.models import (
    ModelSpecError,
    adapter_base,
    encode_messages,
    load_model,
    resolve,
    stop_token_ids,
)
from rlvr.policy import ValueHead, enable_gradient_checkpointing
from rlvr.rewards.base import build_reward, config_terms
from rlvr.rewards.combined import CombinedReward
from rlvr.rollout import SamplingParams
from rlvr.rollout.vllm_engine import check_vllm_temperature, import_vllm
from rlvr.rundir import changes_optimizer
from rlvr.trainer.batch import Sampled
from rlvr.trainer.collect import Collector
from rlvr.trainer.learner import (
    OBJECTIVE_KINDS,
    Forward,
    Learner,
    PublishedCopy,
    Reference,
    lr_lambda,
)
from rlvr.trainer.protocols import Learners
from rlvr.trainer.rollouts import (
    Given,
    InformationGain,
    MultiTurn,
    OneStep,
    Player,
    ReferenceScorer,
    demonstration_tokens,
)
from rlvr.trainer.signals import SIGNALS
from rlvr.trainer.stages import check_stages

CONFIDENCE_FIELDS = frozenset({"self_certainty", "token_entropy"})
"""Reward fields the rollout engine records while sampling (label-free rewards)."""
REFERENCE_FIELDS = frozenset({"reference_logprobs", "reference_logprobs_bare"})
"""Reward fields of the reference answer's probability under the policy (RLPR, VeriFree)."""


def resolve_algorithm(cfg: Config) -> algorithms.Algorithm:
    """The one :class:`~rlvr.algorithms.Algorithm` a run reads: the preset named in the config
    with every part the config sets, checked for contradictions, for the signals its estimator
    needs and for its draw stages (a ConfigError names them)."""
    try:
        algo = cfg.algorithm.resolve()
    except ValueError as err:
        raise ConfigError(f"algorithm: {err}") from None
    needs = algorithms.ADVANTAGES[algo.advantage.name].requires
    missing = [n for n in needs if n not in algorithms.INPUT_FIELDS and n not in SIGNALS]
    if missing:
        raise ConfigError(
            f"algorithm.advantage.name: {algo.advantage.name} requires {', '.join(missing)}, "
            "which is no input rlvr computes and has no registered producer (rlvr.trainer."
            f"signals.register_signal); registered signals: {', '.join(sorted(SIGNALS))}"
        )
    credit = algo.credit.name
    if credit != "broadcast" and needs:
        raise ConfigError(
            f"algorithm.credit.name: {credit} compares turns with the preset's group "
            f"baseline, but advantage {algo.advantage.name!r} needs {', '.join(needs)} per "
            "token; use a group estimator (grpo, dr_grpo, rloo, ...) or credit: broadcast"
        )
    if credit != "broadcast" and algo.overlong.buffer_frac is not None:
        raise ConfigError(
            f"algorithm.credit.name: {credit} reads the environment's turn rewards, which "
            "DAPO's overlong penalty does not reach; use credit: broadcast with it, or set "
            "algorithm.overlong.buffer_frac: null"
        )
    check_stages(algo)
    return algo


def _build_reward(
    cfg: Config, task: Task, user_reward: Callable[..., float] | None
) -> CombinedReward:
    """The run's reward, probed once on a held-out (or the first) problem."""
    reward = build_reward(
        task,
        user_reward if user_reward is not None else cfg.reward.function,
        config_terms(cfg.reward),
        on_error=cfg.reward.on_error,
        timeout_s=cfg.reward.timeout_s,
        max_abs=cfg.reward.max_abs,
    )
    held_out = task.eval_problems()
    try:
        reward.check(held_out[0] if held_out else task.train_problem(0))
    except BaseException:
        reward.close()
        raise
    return reward


def sampling_params(
    cfg: Config, tokenizer: Any, token_stats: bool
) -> tuple[SamplingParams, SamplingParams]:
    """The rollout's sampling parameters, and the same at temperature 0 (eval, ReMax)."""
    sampling = SamplingParams(
        temperature=cfg.rollout.temperature,
        top_p=cfg.rollout.top_p,
        top_k=cfg.rollout.top_k,
        min_p=cfg.rollout.min_p,
        stop=tuple(cfg.rollout.stop),
        max_new_tokens=cfg.rollout.max_new_tokens,
        stop_token_ids=stop_token_ids(tokenizer),
        token_stats=token_stats or cfg.rollout.temperature_tau > 0,  # adaptive: the entropies
    )
    greedy = dataclasses.replace(
        sampling, temperature=0.0, max_new_tokens=cfg.eval.max_new_tokens or sampling.max_new_tokens
    )
    return sampling, greedy


def encode_problem(tokenizer: Any, system_prompt: str | None, problem: Any) -> list[int]:
    """A problem's prompt token ids: its messages (with the config's system prompt) through the
    chat template."""
    return encode_messages(tokenizer, problem.messages(system_prompt))


def _scores_written_text(reward: CombinedReward, who: str, groups: bool) -> None:
    """ConfigError when the run's reward cannot score a reply nothing sampled (EDGE-GRPO's
    written corrections, A-LoL's data completions): it reads the sampler's token statistics
    or the reference answer's probability; with ``groups``, when a term scores a whole group
    (a corrected reply is scored apart from its group)."""
    sampled = sorted((CONFIDENCE_FIELDS | REFERENCE_FIELDS) & reward.field_names())
    whole = [t.label for t in reward.terms if t.entry.kind != "sample"] if groups else []
    if sampled or whole:
        what = [f"reads {', '.join(sampled)} of a sampled reply"] if sampled else []
        what += [f"term(s) {', '.join(whole)} score a whole group"] if whole else []
        raise ConfigError(
            f"{who} scores replies nothing sampled, but the reward {'; '.join(what)}: use a "
            "reward on the reply's text"
        )


def _no_token_stats(reward: CombinedReward) -> str:
    """Why rollout.engine: vllm cannot serve the run's confidence rewards (named)."""
    names = [t.label for t in reward.terms if CONFIDENCE_FIELDS & set(t.signature.names)]
    return (
        f"reward {', '.join(names)} scores the model's confidence (per-token entropy / "
        "self-certainty over the whole vocabulary), which vLLM does not report (only the top "
        "log-probs of each step): use rollout.engine: torch for this reward"
    )


def fused_adamw(device: torch.device, cfg: Config) -> bool | None:
    """Whether AdamW runs as one fused kernel per step (one pass over each parameter's weight,
    gradient and moments) rather than PyTorch's multi-tensor loop (several passes over them; on
    CUDA several kernel launches per group of tensors): on the CPU (SmolLM2-135M's step on a
    2-core AMD EPYC: 0.11 s fused, 0.40 s the loop) and on a CUDA device, sharded or not, except
    with ``train.shard_offload`` (parameters of a GPU run kept in CPU memory). None (the loop)
    there and on other devices."""
    fusable = device.type in ("cpu", "cuda") and not cfg.train.shard_offload
    return True if fusable else None


def build_learner(
    cfg: Config,
    algo: algorithms.Preset,
    policy: torch.nn.Module,
    pad_token_id: int,
    generator: torch.Generator,
    dtypes: Dtypes,
) -> Learner:
    """The learner over ``policy`` (on its device): value head (GAE), reference (beta > 0),
    teacher (on-policy distillation), AdamW over the trained parameters (a LoRA policy's
    adapter only), schedule; gradient checkpointing, sharding (``train.sharding``: the policy,
    a reference copy, the teacher and the value head, over the process group the caller
    formed) and ``torch.compile`` when the config asks.

    The reference of a LoRA policy costs no second copy of the weights: the policy with its
    adapter disabled (the base model), or with a frozen copy of the adapter where the initial
    policy is not the base model (``model.lora.path``) or ProRL resets the reference."""
    device = next(policy.parameters()).device
    reference = None
    if algorithms.needs_reference(algo) and cfg.model.lora is None:
        copy = load_model(cfg.model.name, dtypes.rollout).to(device)
        reference = Reference(policy, copy, None, algo.reference.reset_every, algo.reference.mix)
    elif algorithms.needs_reference(algo):
        adapter = "base"
        if cfg.model.lora.path is not None or algo.reference.reset_every:
            adapters.add_frozen_copy(policy, adapters.REFERENCE)
            adapter = adapters.REFERENCE
        reference = Reference(policy, None, adapter, algo.reference.reset_every, algo.reference.mix)
    teacher = None
    if algorithms.needs_teacher(algo):
        teacher = load_teacher(cfg, dtypes.rollout).to(device)
    value_head = None
    if algo.advantage.name == "gae":
        value_head = ValueHead(policy.config.hidden_size).to(device)
    if cfg.train.gradient_checkpointing:
        enable_gradient_checkpointing(policy)
    if cfg.train.sharding == "fsdp":  # over the learners' process group, formed before this
        from rlvr.distributed.sharding import shard

        if cfg.train.shard_offload and device.type == "cpu":
            raise ConfigError(
                "train.shard_offload keeps the shards in CPU memory and moves each layer to the "
                "GPU: on a CPU device they are there already; remove it"
            )
        param_dtype = torch.bfloat16 if cfg.train.shard_param_dtype == "bf16" else None
        copy = None if reference is None else reference.copy
        for model in (policy, copy, teacher, value_head):
            if model is not None:
                shard(model, param_dtype, cfg.train.shard_offload)
    trained = [p for p in policy.parameters() if p.requires_grad]
    trained += list(value_head.parameters() if value_head else [])
    optimizer = torch.optim.AdamW(
        trained,
        lr=cfg.train.lr,
        betas=cfg.train.betas,
        weight_decay=cfg.train.weight_decay,
        fused=fused_adamw(device, cfg),
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg, algo))
    learner = Learner(
        policy,
        value_head,
        reference,
        optimizer,
        scheduler,
        algo,
        cfg,
        Forward.of(cfg, algo.objective.samples, dtypes.train),
        generator,
        pad_token_id,
        teacher,
    )
    OBJECTIVE_KINDS.get_or_raise(algorithms.OBJECTIVES[algo.objective.name].kind)  # a known kind
    if algo.objective.sync_every > 1:  # semi-online: the snapshot the rollouts serve, checkpointed
        learner.published_copy = PublishedCopy(policy)
    entropy = algo.entropy
    if entropy.target is not None:  # Skywork-OR1's adaptive entropy control
        learner.entropy_control = algorithms.EntropyController(
            entropy.target, entropy.coef_step, entropy.coef_max
        )
    if cfg.train.compile:  # the training forward only; the engine keeps its own path
        learner.compiled = torch.compile(policy)
    if cfg.logging.update_sparsity:
        learner.track_changes()
    if "auto" in (cfg.rollout.dtype, cfg.train.autocast):
        choice = precision.choose(device, policy.config)
        learner.precision = choice.applied(cfg.rollout.dtype, cfg.train.autocast).record()
    return learner


def resume_parts(
    cfg: Config,
    run_dir: Path,
    learner: Learners,
    sampler: PromptSampler,
    state: TrainerState,
    changes: dict[str, Any],
    warn: Callable[[str], None],
) -> tuple[Path | None, TrainerState, list[Sampled]]:
    """Load the latest good checkpoint into the learner (weights, optimizer, schedule, shuffling
    stream, policy version) and the prompt sampler; apply the optimizer settings a resume
    changed; ``warn`` hears about damaged checkpoints passed over. Returns the checkpoint loaded
    (or None), the trainer state and the batches it holds sampled ahead."""
    loaded = learner.load_checkpoint(run_dir, warn)
    checkpoint, pending = None, []
    if loaded is not None:
        checkpoint, loaded_state, pending = loaded
        if loaded_state.data_sha256 not in (None, state.data_sha256):
            raise ConfigError(
                f"the data of task.path {cfg.task.path} changed since this run started (rows "
                "added, removed or edited): the checkpoint's prompt sampler points at other "
                "rows. Restore the data, or start a new run on the new data"
            )
        loaded_state.data_sha256 = state.data_sha256  # checkpoints from before fingerprints
        state = loaded_state
        try:
            sampler.load_state_dict(state.sampler)
        except (KeyError, ValueError) as err:
            raise ConfigError(
                f"the checkpoint's prompt-sampler state {sorted(state.sampler)} does not fit "
                f"curriculum {cfg.curriculum.name!r} ({err}): resume with the run's own "
                "curriculum and task settings"
            ) from None
    if changes_optimizer(changes):
        learner.apply_optimizer_config(cfg)
    return checkpoint, state, pending


@dataclass(kw_only=True)
class RunParts:
    """What a run is made of, built from its config by a backend; the loop wires them.

    Attributes:
        task, reward, judge: the problems, the reward and who judges held-out samples.
        fingerprint: the task data's SHA-256 (before prompts over the length limit are
            dropped), checked on resume.
        tokenizer: the model's tokenizer.
        learners: the learning side (:class:`~rlvr.trainer.protocols.Learners`).
        collector: the prompt sampler and the rollouts.
        vocab_size: the policy's output vocabulary |V| (the collapse guard reads log|V|).
    """

    task: Task
    reward: CombinedReward
    judge: Grader
    fingerprint: str | None
    tokenizer: Any
    learners: Learners
    collector: Collector
    vocab_size: int


@dataclass
class Front:
    """What every process of a run builds first, before any model loads (bad data or a broken
    reward fail here): the preset, the task, its fingerprint, the reward (probed), the judge,
    and whether the engine must record per-token statistics."""

    algo: algorithms.Preset
    task: Task
    fingerprint: str | None
    reward: CombinedReward
    judge: Grader
    token_stats: bool

    def parts(
        self, tokenizer: Any, learners: Learners, collector: Collector, vocab_size: int
    ) -> RunParts:
        """The run's parts: these, with what a backend built after them."""
        return RunParts(
            task=self.task,
            reward=self.reward,
            judge=self.judge,
            fingerprint=self.fingerprint,
            tokenizer=tokenizer,
            learners=learners,
            collector=collector,
            vocab_size=vocab_size,
        )


def build_front(
    cfg: Config,
    user_reward: Callable[..., float] | None,
    cleanup: contextlib.ExitStack | None,
) -> Front:
    """The :class:`Front` of a run; the reward's workers are closed by ``cleanup``."""
    algo = resolve_algorithm(cfg)
    task = build_task(cfg.task)
    fingerprint = data_fingerprint(task)
    reward = _build_reward(cfg, task, user_reward)
    if cleanup is not None:
        cleanup.callback(reward.close)
    judge = build_grader(cfg, task, reward)  # eval.judge: the task's check or this reward
    # rewards that score the model's confidence get per-token statistics from the engine
    token_stats = bool(CONFIDENCE_FIELDS & reward.field_names())
    if cfg.rollout.engine == "vllm":  # before any model loads: vLLM installed, rewards it serves
        if token_stats:
            raise ConfigError(_no_token_stats(reward))
        check_vllm_temperature(cfg.rollout.temperature)
        import_vllm()
    return Front(algo, task, fingerprint, reward, judge, token_stats)


@dataclass(frozen=True)
class Dtypes:
    """A run's two compute dtypes, resolved once per process for the policy on its device:
    ``rollout`` (``rollout.dtype``: the engine's, the reference's and the teacher's weights) and
    ``train`` (``train.autocast``: the training forward's, the scorers'); ``auto`` is measured
    for the policy's shapes on its device (:mod:`rlvr.precision`)."""

    rollout: torch.dtype
    train: torch.dtype

    @classmethod
    def of(cls, cfg: Config, policy: torch.nn.Module) -> Dtypes:
        device = next(policy.parameters()).device
        rollout = torch.float32  # a quantised policy: the engine samples from it, in fp32
        if not adapters.is_quantized(policy):
            rollout = precision.resolve(cfg.rollout.dtype, device, policy.config, "rollout")
        return cls(rollout, precision.resolve(cfg.train.autocast, device, policy.config, "train"))


def build_player(
    cfg: Config, front: Front, tokenizer: Any, policy: torch.nn.Module, dtypes: Dtypes
) -> Player:
    """How the run's episodes are played and scored: an environment's multi-turn episodes
    (``env.name``), else the task's one-step episodes scored by the run's reward (with, for
    rewards on the reference answer's probability, a scorer over ``policy``; for IGPO's credit,
    the information gain of each turn, by ``policy``)."""
    algo = front.algo
    if cfg.env.name is not None:
        gain = None
        if algo.credit.name == "igpo":
            gain = InformationGain(
                policy,
                tokenizer,
                cfg.reward.answer_format,
                cfg.train.micro_batch_size,
                dtypes.train,
            )
        return MultiTurn(build_agent(cfg, front.task, tokenizer), gain)
    scorer = None
    if REFERENCE_FIELDS & front.reward.field_names():
        scorer = ReferenceScorer(
            policy,
            tokenizer,
            cfg.reward.answer_format,
            cfg.train.micro_batch_size,
            dtypes.train,
        )
    stops, budget = stop_token_ids(tokenizer), cfg.max_completion_tokens
    demonstration = None
    kind = algorithms.OBJECTIVES[algo.objective.name].kind
    if any(stage.name == "error_correction" for stage in algo.stages):
        _scores_written_text(front.reward, "algorithm.stages error_correction", groups=True)
    if algo.objective.samples == "data" and kind == "policy_gradient":
        _scores_written_text(front.reward, "objective.samples: data (A-LoL)", groups=False)
    whole = [t.label for t in front.reward.terms if t.entry.kind != "sample"]
    if whole and any(stage.name == "budgets" for stage in algo.stages):
        raise ConfigError(
            f"algorithm.stages budgets plays each budget subgroup apart, but reward term(s) "
            f"{', '.join(whole)} score a whole group: use a reward on each reply"
        )
    if algo.objective.sft_coef > 0 and kind == "policy_gradient":  # SFT on demonstrations
        system = cfg.model.system_prompt
        demonstration = partial(demonstration_tokens, tokenizer, system, stops, budget)
    sampled = OneStep(
        front.reward,
        scorer,
        front.task,
        front.judge,
        partial(encode_problem, tokenizer, cfg.model.system_prompt),
        partial(decode_tokens, tokenizer),
        demonstration,
        cfg.rollout.tree.branching_rule() if cfg.rollout.tree is not None else None,
        algo.expert.traces,
        partial(demonstration_tokens, tokenizer, cfg.model.system_prompt, stops, budget),
        partial(encode_text, tokenizer),
    )
    if algo.objective.samples == "data":  # a policy gradient on them reads the run's reward
        score = algorithms.OBJECTIVES[algo.objective.name].kind == "policy_gradient"
        return Given(sampled, tokenizer, cfg.model.system_prompt, stops, budget, score)
    return sampled


def load_teacher(cfg: Config, dtype: torch.dtype) -> torch.nn.Module:
    """The teacher (``model.teacher``: on-policy distillation's, TGDPO's token-level reward
    model) in ``dtype`` (the rollout dtype), frozen, on the CPU; a ConfigError when there is
    none or its vocabulary is not the student's (its log-probs would be of other tokens)."""
    spec = cfg.model.teacher
    if spec is None:
        algo = resolve_algorithm(cfg)
        who = (
            f"objective {algo.objective.name!r}"
            if algorithms.OBJECTIVES[algo.objective.name].needs_teacher
            else f"algorithm.advantage.name {algo.advantage.name!r}"
        )
        raise ConfigError(
            f"{who} needs a teacher: set model.teacher to a model spec (a trained run's "
            "checkpoint, a larger model with the same tokenizer)"
        )
    from rlvr.models import load_tokenizer

    theirs, ours = load_tokenizer(spec), load_tokenizer(cfg.model.name)
    if theirs.get_vocab() != ours.get_vocab():
        raise ConfigError(
            f"model.teacher {spec!r} has another vocabulary than the student {cfg.model.name!r} "
            f"({len(theirs)} vs {len(ours)} tokens): its log-probs would score other tokens"
        )
    model = load_model(spec, dtype).eval()
    model.requires_grad_(False)
    return model


def decode_tokens(tokenizer: Any, ids: list[int]) -> str:
    """A completion's text: its ids decoded without special tokens."""
    return tokenizer.decode(ids, skip_special_tokens=True)


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """Plain text's ids, no special tokens added (a reply's given prefix)."""
    return list(tokenizer(text, add_special_tokens=False).input_ids)


def load_policy(cfg: Config) -> torch.nn.Module:
    """The policy's fp32 weights on the run's device (``train.device``); with ``model.lora``,
    the frozen model with a trainable LoRA adapter (a new one, seeded by ``train.seed`` so that
    every process builds the same, or ``model.lora.path``'s)."""
    lora = cfg.model.lora
    if adapter_base(resolve(cfg.model.name)) is not None:
        raise ConfigError(
            f"model.name {cfg.model.name!r} is a LoRA adapter: set model.name to its base model "
            "and model.lora.path to the adapter (to train it further), or merge it into a plain "
            "model first (rlvr export RUN --merge OUT)"
        )
    if lora is not None and lora.dropout > 0:
        raise ConfigError(
            f"model.lora.dropout {lora.dropout}: RL needs 0; with dropout the trainer's "
            "log-probs are of another (random) model than the sampler's, so the importance "
            "ratio is not 1 on-policy and the KL to the reference is not 0 at the start"
        )
    device = resolve_device(cfg.train.device)
    if lora is not None and lora.quantize is not None:
        if cfg.rollout.engine != "torch":
            raise ConfigError(
                "model.lora.quantize: a quantised base is served by the torch engine only "
                "(vLLM would need the base in its own quantisation); set rollout.engine: torch"
            )
        if cfg.rollout.dtype not in ("auto", "fp32"):
            raise ConfigError(
                f"model.lora.quantize: the engine samples from the quantised model itself, "
                f"which computes in fp32 here; set rollout.dtype: fp32 (not {cfg.rollout.dtype})"
            )
        try:
            policy = load_model(cfg.model.name, torch.float32, lora.quantize)
        except ModelSpecError as err:
            raise ConfigError(f"model.lora.quantize: {err}") from None
        if device.type != "cpu":
            policy = policy.to(device)
    else:
        policy = load_model(cfg.model.name, torch.float32).to(device)
    policy.config.use_cache = False
    if lora is not None:
        spec = adapters.LoraSpec(
            rank=lora.rank,
            alpha=lora.alpha,
            target_modules=lora.target_modules
            if isinstance(lora.target_modules, str)
            else tuple(lora.target_modules),
            dropout=lora.dropout,
            seed=cfg.train.seed,
            base=cfg.model.name,
        )
        try:
            adapters.add_lora(policy, spec, lora.path)
        except adapters.AdapterError as err:
            raise ConfigError(f"model.lora: {err}") from None
    return policy


def build_sampler(cfg: Config, task: Task, algo: algorithms.Preset) -> PromptSampler:
    """The prompt sampler (``curriculum``); one with a ``baselines()`` method where the
    advantage needs per-prompt baselines (SPO)."""
    try:
        sampler = make_sampler(cfg.curriculum.name, task, cfg.train.seed, **cfg.curriculum.kwargs())
    except ValueError as err:
        raise ConfigError(f"curriculum: {err}") from None
    needs = algorithms.ADVANTAGES[algo.advantage.name].requires
    if "baselines" in needs and not callable(getattr(sampler, "baselines", None)):
        raise ConfigError(
            f"algorithm.advantage.name: {algo.advantage.name} needs each prompt's tracked baseline: set "
            f"curriculum.name: spo (curriculum {cfg.curriculum.name!r} keeps none)"
        )
    return sampler
