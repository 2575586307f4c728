"""A judge model behind an OpenAI-compatible endpoint (``rlvr serve``, vLLM's server, a hosted
API), asked with the ``openai`` client.

Each chat is one ``/v1/chat/completions`` request; a batch's requests run concurrently, at most
``max_concurrency`` at a time per endpoint. A request gets ``timeout_s`` and is retried up to
``retries`` times (what the openai client retries: connection errors, timeouts, 408/409/429 and
5xx answers): at once after a timeout (it has waited its time), after a backoff of 0.5 s, 1 s,
2 s, ... (at most 8 s) otherwise; so a request to an endpoint that stops answering fails
``timeout_s`` x (``retries`` + 1) after it got one of the ``max_concurrency`` slots, no later
(the wait for a slot, behind the batch's other requests, comes before). A request that still
fails raises :class:`JudgeError` naming the endpoint, its tries and the time they took, which
the reward handles per ``reward.on_error``. The API key is read from the environment variable
``api_key_env`` names, never from a config file.

:meth:`HttpChatModel.choice_probs` asks for one token with ``top_logprobs`` and reads each
choice's probability from them (0 when a choice is not among the top 20).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rlvr.errors import RlvrError
from rlvr.reward_models.chat_model import Chat, ChoiceProbs, Generation

#: Most alternatives an OpenAI-compatible endpoint returns per position.
TOP_LOGPROBS = 20
#: HTTP statuses a request is retried on (with every 5xx), as the openai client retries.
RETRIED_STATUSES = frozenset({408, 409, 429})


class JudgeError(RlvrError, RuntimeError):
    """A judge model could not answer (the endpoint failed after its retries, timed out, or
    answered something that is not a chat completion)."""


class HttpChatModel:
    """An OpenAI-compatible chat endpoint (see the module docstring).

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1``.
        model: the model name the endpoint serves.
        api_key_env: the environment variable holding the API key (None: no key, as for a
            local server).
        max_concurrency: most requests in flight to this endpoint from this process.
        timeout_s: time limit of one request.
        retries: retries of a failed request, with exponential backoff.
        system_prompt: prepended to chats without a system message.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str | None = None,
        max_concurrency: int = 8,
        timeout_s: float = 60.0,
        retries: int = 2,
        system_prompt: str | None = None,
    ) -> None:
        try:
            import openai
        except ImportError:
            raise JudgeError(
                "a judge at an HTTP endpoint needs the openai client: pip install 'rlvr[serve]'"
            ) from None

        key = "EMPTY"
        if api_key_env is not None:
            key = os.environ.get(api_key_env, "")
            if not key:
                raise JudgeError(
                    f"judge endpoint {base_url}: the environment variable {api_key_env!r} "
                    "(api_key_env) holding its API key is not set"
                )
        self.name = model
        self.base_url = base_url
        self.system_prompt = system_prompt
        self.max_concurrency = max_concurrency
        self.timeout_s, self.retries = timeout_s, retries
        self._client = openai.OpenAI(  # retried here: no backoff after a timeout
            base_url=base_url, api_key=key, timeout=timeout_s, max_retries=0
        )
        self._slots = threading.BoundedSemaphore(max_concurrency)

    def _messages(self, chat: Chat) -> Chat:
        if self.system_prompt is not None and not (chat and chat[0].get("role") == "system"):
            return [{"role": "system", "content": self.system_prompt}, *chat]
        return list(chat)

    def _ask(self, chat: Chat, **kwargs: Any) -> Any:
        import openai

        with self._slots:
            start, attempt, timeouts = time.monotonic(), 0, 0
            while True:
                try:
                    return self._client.chat.completions.create(
                        model=self.name, messages=self._messages(chat), **kwargs
                    )
                except openai.OpenAIError as err:
                    timeouts += isinstance(err, openai.APITimeoutError)
                    if attempt == self.retries or not _retried(err):
                        elapsed = time.monotonic() - start
                        raise JudgeError(
                            self._failure(err, attempt + 1, timeouts, elapsed)
                        ) from None
                    if not isinstance(err, openai.APITimeoutError):
                        time.sleep(min(0.5 * 2**attempt, 8.0))
                attempt += 1

    def _failure(self, err: Exception, tries: int, timeouts: int, elapsed: float) -> str:
        """What went wrong with a request after ``tries`` tries (``timeouts`` of them timed out)
        that took ``elapsed`` seconds in all, and for a timeout or an unreachable endpoint the
        settings that decide how long it is waited for."""
        import openai

        counted = f"{tries} {'try' if tries == 1 else 'tries'} (retries={self.retries})"
        where = f"judge {self.name!r} at {self.base_url}: {type(err).__name__}"
        if isinstance(err, openai.APITimeoutError):
            if tries == 1:
                which = f"on its {counted}"
            elif timeouts == tries:
                which = f"on each of {counted}"
            else:
                which = f"on {timeouts} of {counted}, the others failing otherwise (then a backoff)"
            return (
                f"{where}: no answer within timeout_s = {self.timeout_s:g} s {which}: "
                f"{elapsed:.1f} s in all; raise the judge's timeout_s or retries "
                "(reward.judges), or set reward.on_error: zero to score a judge call that fails "
                "during training 0"
            )
        if isinstance(err, openai.APIConnectionError):
            return (
                f"{where}: {str(err).rstrip('.')} after {counted}, {elapsed:.1f} s in all; is "
                "its server up at base_url?"
            )
        return f"{where}: {err}"

    def _map(self, chats: Sequence[Chat], **kwargs: Any) -> list[Any]:
        """Each chat's answer, asked concurrently; once one request has failed, the chats still
        queued are not sent (the batch fails with it, without waiting for them)."""
        if len(chats) <= 1:
            return [self._ask(c, **kwargs) for c in chats]
        failed = threading.Event()

        def ask(chat: Chat) -> Any:
            if failed.is_set():  # after a failure of a chat before it, which is raised first
                return None
            try:
                return self._ask(chat, **kwargs)
            except JudgeError:
                failed.set()
                raise

        with ThreadPoolExecutor(min(len(chats), self.max_concurrency)) as pool:
            return list(pool.map(ask, chats))

    def generate(
        self,
        chats: Sequence[Chat],
        *,
        max_new_tokens: int,
        temperature: float = 0.0,
        n: int = 1,
        stop: Sequence[str] = (),
    ) -> list[list[Generation]]:
        extra: dict[str, Any] = {"stop": list(stop)} if stop else {}
        answers = self._map(chats, max_tokens=max_new_tokens, temperature=temperature, n=n, **extra)
        out = []
        for answer in answers:
            try:
                usage = answer.usage
                choices = sorted(answer.choices, key=lambda c: c.index)
                replies = [
                    Generation(
                        text=c.message.content or "",
                        prompt_tokens=usage.prompt_tokens if usage else 0,
                        completion_tokens=(usage.completion_tokens // len(choices)) if usage else 0,
                        finish_reason=c.finish_reason or "stop",
                    )
                    for c in choices
                ]
            except (AttributeError, TypeError) as err:
                raise JudgeError(
                    f"judge {self.name!r} at {self.base_url}: not a chat completion ({err})"
                ) from None
            if len(replies) != n:
                raise JudgeError(
                    f"judge {self.name!r} at {self.base_url}: asked for {n} replies, got "
                    f"{len(replies)}"
                )
            out.append(replies)
        return out

    def choice_probs(self, chats: Sequence[Chat], choices: Sequence[str]) -> list[ChoiceProbs]:
        answers = self._map(
            chats, max_tokens=1, temperature=0.0, logprobs=True, top_logprobs=TOP_LOGPROBS
        )
        out = []
        for answer in answers:
            try:
                top = answer.choices[0].logprobs.content[0].top_logprobs
                found = {t.token: math.exp(t.logprob) for t in top}
            except (AttributeError, IndexError, TypeError) as err:
                raise JudgeError(
                    f"judge {self.name!r} at {self.base_url}: no top_logprobs in its answer "
                    f"({err}); the endpoint must support logprobs for verdict probabilities"
                ) from None
            usage = answer.usage
            out.append(
                ChoiceProbs(
                    [_choice_prob(found, c) for c in choices],
                    usage.prompt_tokens if usage else 0,
                    usage.completion_tokens if usage else 0,
                )
            )
        return out


def _retried(err: Exception) -> bool:
    """Whether a failed request is tried again: no connection or no answer in time, or an HTTP
    status of :data:`RETRIED_STATUSES` or 5xx."""
    import openai

    if isinstance(err, openai.APIConnectionError):  # APITimeoutError is one
        return True
    status = getattr(err, "status_code", None)
    return isinstance(status, int) and (status in RETRIED_STATUSES or status >= 500)


def _choice_prob(found: dict[str, float], choice: str) -> float:
    """The probability of the tokens that spell ``choice`` once whitespace is stripped
    (``"Yes"`` and ``" Yes"``), 0 when none is listed."""
    return sum(p for token, p in found.items() if token.strip() == choice.strip())
