"""A language model that answers chats: what a judge reward asks and what ``rlvr serve`` serves.

:class:`ChatModel` is the protocol of the two kinds of judge model: :class:`LocalChatModel`,
a model rlvr loads itself (any model spec, or a trained run's latest checkpoint) decoded by
rlvr's torch engine (:class:`~rlvr.rollout.TorchEngine`: batched, no_grad, its own dtype and
device) or its vLLM engine (:class:`~rlvr.rollout.vllm_engine.VLLMEngine`), and :class:`~rlvr.reward_models.http_model.HttpChatModel`, an OpenAI-compatible
endpoint (``rlvr serve``, vLLM's server, a hosted API).

Two questions are asked of a judge:

* :meth:`ChatModel.generate`: its reply to each chat (a verdict to parse, or reasoning then a
  verdict), with the reply's token ids and log-probs where the model is local;
* :meth:`ChatModel.choice_probs`: the probability of each of a few answers (``"Yes"``/``"No"``,
  ``"1"``..``"9"``) as the first token of its reply, read from one forward pass, which needs
  no sampling. For a local model it is exactly ``softmax(logits)[first token of the choice]`` at
  the position after the assistant's turn header (the choices' first tokens must differ).

:class:`LocalChatModel` batches callers: requests that arrive while a batch runs (the reward's
worker threads, the server's concurrent requests) wait and go in the next batch together.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

Chat = list[dict[str, Any]]
"""A chat: ``[{"role": "system"|"user"|"assistant", "content": str}, ...]``."""


@dataclass(frozen=True)
class Generation:
    """One reply of a chat model.

    Attributes:
        text: the reply, decoded without special tokens.
        prompt_tokens, completion_tokens: token counts (an endpoint's ``usage``).
        prompt_ids, ids, logprobs: the prompt's and the reply's token ids and the sampler's
            log-prob of each reply token (empty from an endpoint that does not return them).
        finish_reason: ``stop`` (a stop token or string) or ``length`` (``max_new_tokens``).
    """

    text: str
    prompt_tokens: int
    completion_tokens: int
    prompt_ids: list[int] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "stop"


class ChatModel(Protocol):
    """A model a judge reward asks (see the module docstring)."""

    name: str

    def generate(
        self,
        chats: Sequence[Chat],
        *,
        max_new_tokens: int,
        temperature: float = 0.0,
        n: int = 1,
        stop: Sequence[str] = (),
    ) -> list[list[Generation]]:
        """``n`` replies to each chat (greedy when ``temperature`` is 0)."""

    def choice_probs(self, chats: Sequence[Chat], choices: Sequence[str]) -> list[list[float]]:
        """For each chat, ``[len(choices)]`` probabilities of each choice as the reply's first
        token (not renormalised: they sum to at most 1)."""


def resolve_model_spec(spec: str) -> str:
    """A judge or served model's spec: a run directory stands for its latest complete
    checkpoint; anything else (alias, model directory, ``.gguf``, hub id, checkpoint) as is."""
    from rlvr.checkpoint import latest_checkpoint

    path = Path(spec).expanduser()
    if path.is_dir() and (path / "checkpoints").is_dir():
        found = latest_checkpoint(path)
        if found is None:
            raise ValueError(f"run {spec} has no complete checkpoint")
        return str(found)
    return spec


@dataclass
class _Request:
    key: Any
    items: list[Any]
    done: bool = False
    result: list[Any] = field(default_factory=list)
    error: BaseException | None = None


class _Batcher:
    """Runs requests with equal keys together: a caller queues its items, then whoever holds
    the run lock takes every queued request with its key and runs their items as one batch."""

    def __init__(self) -> None:
        self._queue: list[_Request] = []
        self._queue_lock = threading.Lock()
        self._run_lock = threading.Lock()

    def submit(self, key: Any, items: list[Any], run: Callable[[list[Any]], list[Any]]) -> list:
        request = _Request(key, items)
        with self._queue_lock:
            self._queue.append(request)
        with self._run_lock:
            if not request.done:
                with self._queue_lock:
                    batch = [r for r in self._queue if r.key == key]
                    self._queue = [r for r in self._queue if r.key != key]
                try:
                    results = run([item for r in batch for item in r.items])
                except BaseException as err:  # every request of the batch sees the error
                    for r in batch:
                        r.error, r.done = err, True
                else:
                    at = 0
                    for r in batch:
                        r.result, r.done = results[at : at + len(r.items)], True
                        at += len(r.items)
        if request.error is not None:
            raise request.error
        return request.result


class LocalChatModel:
    """A model rlvr loads and decodes with its torch engine (see the module docstring).

    Args:
        spec: a model spec (:mod:`rlvr.models`), a checkpoint or a run directory.
        dtype: the judge's weights and compute dtype.
        device: where it runs.
        max_batch: most sequences decoded at once.
        system_prompt: prepended to chats that have no system message (None: the template's).
        seed: seed of the judge's own sampling streams (used when sampling, not when greedy).
        engine: what decodes replies: ``torch`` (rlvr's torch engine) or ``vllm`` (rlvr's vLLM
            engine over the same weights, in this process); verdict probabilities are read
            from the torch model's forward either way (exact, one pass).
        kv_cache_gb: vLLM's KV cache on the CPU (None: 1 GiB).
    """

    def __init__(
        self,
        spec: str,
        dtype: torch.dtype = torch.float32,
        device: str = "cpu",
        max_batch: int = 64,
        system_prompt: str | None = None,
        seed: int = 0,
        engine: str = "torch",
        kv_cache_gb: float | None = None,
    ) -> None:
        from rlvr.models import load_model, load_tokenizer, quiet_transformers, stop_token_ids
        from rlvr.rollout import TorchEngine

        quiet_transformers()
        source = resolve_model_spec(spec)
        self.name = spec
        self.tokenizer = load_tokenizer(source)
        self.model = load_model(source, dtype).to(device).eval()
        self.model.requires_grad_(False)
        self.device = torch.device(device)
        self.system_prompt = system_prompt
        self.stops = stop_token_ids(self.tokenizer)
        if engine not in ("torch", "vllm"):
            raise ValueError(f"judge engine {engine!r}: torch or vllm")
        if engine == "vllm":
            from rlvr.rollout.vllm_engine import VLLMEngine

            self.engine: Any = VLLMEngine(
                self.model, self.tokenizer, dtype, seed=seed, kv_cache_gb=kv_cache_gb
            )
        else:
            self.engine = TorchEngine(
                self.model,
                self.tokenizer.pad_token_id,
                dtype=dtype,
                max_batch=max_batch,
                decode=self.decode,
            )
        self.max_batch = max_batch
        self._batcher = _Batcher()
        self._generator = torch.Generator().manual_seed(seed)

    def decode(self, ids: list[int]) -> str:
        """Token ids as text, special tokens skipped."""
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def encode(self, chat: Chat) -> list[int]:
        """A chat's prompt ids: the chat template's rendering, ending with the assistant's turn
        header (the system prompt first when the chat has none)."""
        if self.system_prompt is not None and not (chat and chat[0].get("role") == "system"):
            chat = [{"role": "system", "content": self.system_prompt}, *chat]
        text = self.tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def generate(
        self,
        chats: Sequence[Chat],
        *,
        max_new_tokens: int,
        temperature: float = 0.0,
        n: int = 1,
        stop: Sequence[str] = (),
    ) -> list[list[Generation]]:
        prompts = [self.encode(c) for c in chats]
        return self.generate_ids(
            prompts, max_new_tokens=max_new_tokens, temperature=temperature, n=n, stop=stop
        )

    def generate_ids(
        self,
        prompts: Sequence[list[int]],
        *,
        max_new_tokens: int,
        temperature: float = 0.0,
        n: int = 1,
        stop: Sequence[str] = (),
        top_p: float = 1.0,
    ) -> list[list[Generation]]:
        """:meth:`generate` on prompts given as token ids (the server's ``/v1/completions``)."""
        from rlvr.rollout import SamplingParams

        sampling = SamplingParams(
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=max_new_tokens,
            stop_token_ids=self.stops,
            stop=tuple(stop),
        )
        key = ("generate", sampling, n)
        return self._batcher.submit(key, list(prompts), lambda ps: self._generate(ps, sampling, n))

    def _generate(self, prompts: list[list[int]], sampling: Any, n: int) -> list[list[Generation]]:
        from rlvr.rollout.streams import random_keys

        # the judge's own random streams: sampling here never moves torch's global generator
        keys = random_keys(len(prompts) * n, self._generator)
        rollout = self.engine.generate(prompts, n, sampling, keys)
        out: list[Generation] = []
        for i, ids in enumerate(rollout.completion_ids):
            prompt = rollout.prompt_ids[i // n]
            out.append(
                Generation(
                    text=self.decode(ids),
                    prompt_tokens=len(prompt),
                    completion_tokens=len(ids),
                    prompt_ids=list(prompt),
                    ids=list(ids),
                    logprobs=list(rollout.logprobs[i]),
                    finish_reason="stop" if rollout.finished[i] else "length",
                )
            )
        return [out[i * n : (i + 1) * n] for i in range(len(prompts))]

    def choice_tokens(self, choices: Sequence[str]) -> list[int]:
        """The first token of each choice; a ValueError when two share it (the verdict
        position cannot tell them apart) or a choice is empty."""
        firsts = []
        for choice in choices:
            ids = self.tokenizer(choice, add_special_tokens=False)["input_ids"]
            if not ids:
                raise ValueError(f"judge choice {choice!r} has no tokens")
            firsts.append(ids[0])
        for i, a in enumerate(firsts):
            for b, other in zip(firsts[i + 1 :], choices[i + 1 :], strict=True):
                if a == b:
                    raise ValueError(
                        f"judge choices {choices[i]!r} and {other!r} begin with the same token "
                        f"({self.tokenizer.convert_ids_to_tokens(a)!r}) for {self.name}: their "
                        "probabilities cannot be read at one position; use choices whose first "
                        "tokens differ (e.g. 1..9 rather than 1..10 for a digit-by-digit tokenizer)"
                    )
        return firsts

    def choice_probs(self, chats: Sequence[Chat], choices: Sequence[str]) -> list[list[float]]:
        tokens = self.choice_tokens(choices)
        prompts = [self.encode(c) for c in chats]
        dist = self._batcher.submit(("next", None), prompts, self._next_token_probs)
        return [[float(d[t]) for t in tokens] for d in dist]

    @torch.no_grad()
    def _next_token_probs(self, prompts: list[list[int]]) -> list[torch.Tensor]:
        """``[V]`` softmax of the logits after each prompt (fp32): left-padded batches with
        the positions of the unpadded prompts, and only the last position through the output
        layer (``logits_to_keep=1``: the ``[B, T, V]`` logits of a batch of judge questions
        would take gigabytes)."""
        out: list[torch.Tensor] = []
        for lo in range(0, len(prompts), self.max_batch):
            chunk = prompts[lo : lo + self.max_batch]
            ids, mask = _left_pad(chunk, self.tokenizer.pad_token_id, self.device)
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            logits = self.model(
                input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=1
            ).logits[:, -1]
            out += list(torch.softmax(logits.float(), dim=-1).cpu())
        return out

    @torch.no_grad()
    def reply_logprobs(
        self, prompt_ids: list[int], ids: list[int], k: int
    ) -> tuple[list[float], list[list[tuple[int, float]]]]:
        """For each reply token, its log-prob and the ``k`` most likely tokens with theirs at
        its position: the model's own distribution (temperature 1), one forward over prompt +
        reply."""
        if not ids:
            return [], []
        seq = torch.tensor([prompt_ids + ids], device=self.device)
        logits = self.model(input_ids=seq).logits[0, len(prompt_ids) - 1 : -1].float()
        logp = torch.log_softmax(logits, dim=-1)
        own = logp.gather(1, torch.tensor(ids, device=self.device)[:, None])[:, 0].tolist()
        values, index = logp.topk(k, dim=-1)
        top = [
            list(zip(index[i].tolist(), values[i].tolist(), strict=True)) for i in range(len(ids))
        ]
        return own, top


def _left_pad(
    rows: list[list[int]], pad: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[B, T]`` ids and attention mask of left-padded rows (each row ends at column T-1)."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r)
        mask[i, width - len(r) :] = 1
    return ids.to(device), mask.to(device)
