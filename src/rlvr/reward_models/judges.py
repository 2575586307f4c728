"""Judges: a judge model (``reward.judges``) with an answer cache and usage accounting.

:func:`get_judge` builds a :class:`Judge` from its :class:`~rlvr.config.JudgeConfig` once per
process (a judge reward's params carry the config itself, so a reward worker process or a Ray
rollout worker builds the same judge on first use). A :class:`Judge` asks its
:class:`~rlvr.reward_models.chat_model.ChatModel` and remembers each answer under (kind,
question, settings) when ``cache`` is on (the ``cache_size`` most recently used answers): a
completion repeated within a group or across steps is judged once. Every call returns a :class:`Usage` (calls, cache hits, tokens, seconds) that the
reward attaches to its scores, so the run's metrics show ``judge/*`` and ``time/judge`` wherever
the reward ran.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rlvr.config import JudgeConfig
from rlvr.reward_models.chat_model import (
    Chat,
    ChatModel,
    ChoiceProbs,
    Generation,
    LocalChatModel,
)
from rlvr.reward_models.http_model import HttpChatModel

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Usage:
    """What a judge call cost: model calls (questions not answered from the cache), cache
    hits, prompt and completion tokens, and seconds."""

    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.calls + other.calls,
            self.cache_hits + other.cache_hits,
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.seconds + other.seconds,
        )

    def metrics(self) -> dict[str, float]:
        """``judge/calls``, ``judge/cache_hits``, ``judge/prompt_tokens``,
        ``judge/completion_tokens`` and ``time/judge`` (seconds)."""
        return {
            "judge/calls": float(self.calls),
            "judge/cache_hits": float(self.cache_hits),
            "judge/prompt_tokens": float(self.prompt_tokens),
            "judge/completion_tokens": float(self.completion_tokens),
            "time/judge": self.seconds,
        }


class Judge:
    """A judge model with its settings and answer cache (see the module docstring)."""

    def __init__(self, config: JudgeConfig, model: ChatModel) -> None:
        self.config = config
        self.model = model
        self._cache: OrderedDict[str, Any] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.model.name

    def _cached(
        self, kind: str, chats: Sequence[Chat], settings: Any, ask: Any
    ) -> tuple[list[Any], Usage]:
        keys = [json.dumps([kind, chat, settings], sort_keys=True) for chat in chats]
        with self._lock:
            known = {k: self._cache[k] for k in keys if self.config.cache and k in self._cache}
            for k in known:
                self._cache.move_to_end(k)
        todo = list(dict.fromkeys(k for k in keys if k not in known))
        start = time.perf_counter()
        answers = ask([chats[keys.index(k)] for k in todo]) if todo else []
        seconds = time.perf_counter() - start
        fresh = dict(zip(todo, answers, strict=True))
        if self.config.cache:
            with self._lock:
                self._cache.update(fresh)
                while len(self._cache) > self.config.cache_size:
                    self._cache.popitem(last=False)
        counted = [_tokens(a) for a in answers]
        usage = Usage(
            calls=len(todo),
            cache_hits=len(keys) - len(todo),
            prompt_tokens=sum(p for p, _ in counted),
            completion_tokens=sum(c for _, c in counted),
            seconds=seconds,
        )
        return [{**known, **fresh}[k] for k in keys], usage

    def replies(
        self, chats: Sequence[Chat], n: int = 1, max_new_tokens: int | None = None
    ) -> tuple[list[list[Generation]], Usage]:
        """``n`` replies to each chat at the judge's temperature, and the usage."""
        cfg = self.config
        tokens = max_new_tokens or cfg.max_new_tokens
        settings = [n, tokens, cfg.temperature]
        return self._cached(
            "generate",
            chats,
            settings,
            lambda todo: self.model.generate(
                todo, max_new_tokens=tokens, temperature=cfg.temperature, n=n
            ),
        )

    def probabilities(
        self, chats: Sequence[Chat], choices: Sequence[str]
    ) -> tuple[list[list[float]], Usage]:
        """Each choice's probability as the first token of the reply to each chat."""
        return self._cached(
            "choices",
            chats,
            list(choices),
            lambda todo: self.model.choice_probs(todo, choices),
        )


def _tokens(answer: Any) -> tuple[int, int]:
    """(prompt, completion) tokens of one chat's answer: its replies' (a list of
    :class:`Generation`) or its choice probabilities' (:class:`ChoiceProbs`); 0 where the model
    reports none."""
    if isinstance(answer, ChoiceProbs):
        return answer.prompt_tokens, answer.completion_tokens
    replies = [g for g in answer if isinstance(g, Generation)] if isinstance(answer, list) else []
    return sum(g.prompt_tokens for g in replies), sum(g.completion_tokens for g in replies)


_JUDGES: dict[str, Judge] = {}
_BUILD_LOCK = threading.Lock()


def judge_config(spec: JudgeConfig | Mapping[str, Any]) -> JudgeConfig:
    """``spec`` as a :class:`JudgeConfig` (a mapping is validated)."""
    return spec if isinstance(spec, JudgeConfig) else JudgeConfig.model_validate(dict(spec))


def get_judge(spec: JudgeConfig | Mapping[str, Any]) -> Judge:
    """The judge of ``spec``, built once per process (thread-safe): a torch judge loads its
    model on first use."""
    config = judge_config(spec)
    key = config.model_dump_json()
    with _BUILD_LOCK:
        if key not in _JUDGES:
            _JUDGES[key] = Judge(config, build_chat_model(config))
        return _JUDGES[key]


def build_chat_model(config: JudgeConfig) -> ChatModel:
    """The model behind a judge: :class:`LocalChatModel` for ``torch`` and ``vllm``,
    :class:`HttpChatModel` for ``http``."""
    assert config.model is not None  # JudgeConfig checks it
    if config.engine == "http":
        assert config.base_url is not None
        return HttpChatModel(
            config.base_url,
            config.model,
            config.api_key_env,
            max_concurrency=config.max_concurrency,
            timeout_s=config.timeout_s,
            retries=config.retries,
            system_prompt=config.system_prompt,
        )
    return LocalChatModel(
        config.model,
        _DTYPES[config.dtype],
        config.device,
        max_batch=config.max_batch,
        system_prompt=config.system_prompt,
        seed=config.seed,
        engine=config.engine,
        kv_cache_gb=config.kv_cache_gb,
    )
