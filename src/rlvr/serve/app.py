"""An OpenAI-compatible API over rlvr's engine: ``/v1/chat/completions``, ``/v1/completions``
and ``/v1/models``, served by uvicorn (FastAPI).

One machine serves a judge (or any model rlvr loads: a spec, a checkpoint, a run's latest
checkpoint) to several runs, and the ``openai`` client works against it. The model is a
:class:`~rlvr.reward_models.chat_model.LocalChatModel`: concurrent requests with the same
settings are decoded in one batch by rlvr's engine.

Beyond OpenAI's schema each choice carries ``token_ids`` (the reply's ids exactly as sampled)
and the response ``prompt_token_ids``, so a client can rebuild an episode token-exactly without
re-tokenising text. With ``logprobs`` the log-probs are the model's own (temperature 1, from one
forward pass over prompt + reply, as vLLM's default ``raw_logprobs``), with the ``top_logprobs``
most likely tokens at each position. Not supported (a 400 error saying so): ``stream``, tools,
``response_format``, ``logit_bias``, penalties, several prompts in one ``/v1/completions``
request.

One server is shared, so no request may hold it:

* Requests are checked before any work; a bad one is a 400 with OpenAI's error body naming the
  parameter. ``max_tokens`` (or ``max_completion_tokens``) is a positive integer of at most
  ``max_tokens_limit`` (``rlvr serve --max-tokens-limit``), and the prompt plus it must fit the
  context (the model's ``max_position_embeddings``, or ``--max-model-len``), as vLLM's server
  refuses. Omitted, it is OpenAI's and vLLM's default: :data:`COMPLETIONS_MAX_TOKENS` for
  ``/v1/completions``, the context left after the prompt for ``/v1/chat/completions``, each at
  most ``max_tokens_limit`` and the context left. A prompt that leaves no room is refused with
  its token count and the limit, before the model sees it. ``n``, ``temperature``, ``top_p``,
  ``stop``, ``logprobs`` and token ids are checked against OpenAI's ranges (and the
  vocabulary).
* With rlvr's torch engine on a Llama or Qwen2 model (which keeps the samples' key/value caches
  between turns), jobs take turns of :data:`SLICE_TOKENS` tokens per sample on the model
  (round robin, see :mod:`rlvr.reward_models.chat_model`): a request that arrives while a long
  one decodes waits at most one turn of each job ahead of it, not for their ends. With the vLLM
  engine or another architecture, a job decodes to its end in one turn. At most ``--max-batch``
  samples are decoded at once: a job waits for room.
* A request whose client disconnects (the connection is polled every
  :data:`DISCONNECT_POLL_S` seconds) is cancelled: its samples are not decoded past the turn
  under way.
"""

# No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations at runtime.
import asyncio
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from rlvr.reward_models.chat_model import Cancelled, Generation, LocalChatModel

#: Most ``top_logprobs`` per position (OpenAI's limit).
MAX_TOP_LOGPROBS = 20
#: Most completions and stop strings per request (OpenAI's limits; at most ``--max-batch``
#: completions too, the sequences decoded at once).
MAX_N = 128
MAX_STOPS = 4
#: The default of ``rlvr serve --max-tokens-limit``: most tokens of one completion.
MAX_TOKENS_LIMIT = 4096
#: ``max_tokens`` of a ``/v1/completions`` request that gives none (OpenAI's and vLLM's default).
COMPLETIONS_MAX_TOKENS = 16
#: Tokens a job decodes per sample in one turn before the jobs waiting get theirs (where the
#: engine keeps the caches between turns: ``LocalChatModel``'s ``slice_tokens``).
SLICE_TOKENS = 32
#: Seconds between two checks that a request's client is still connected.
DISCONNECT_POLL_S = 0.2


class RequestError(ValueError):
    """A request the server cannot answer (400, with OpenAI's error body): ``param`` names the
    parameter at fault, ``code`` is OpenAI's (e.g. ``context_length_exceeded``)."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param, self.code = param, code


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(body: dict[str, Any], key: str, default: int, lo: int, hi: int) -> int:
    """``body[key]`` (``default`` when absent or null), an integer in [lo, hi]."""
    value = body.get(key)
    if value is None:
        return default
    if not _is_int(value) or not lo <= value <= hi:
        raise RequestError(f"{key} must be an integer in [{lo}, {hi}], got {value!r}", key)
    return value


def _number(body: dict[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    """``body[key]`` (``default`` when absent or null), a number in [lo, hi]."""
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, int | float) or isinstance(value, bool) or not lo <= value <= hi:
        raise RequestError(f"{key} must be a number in [{lo}, {hi}], got {value!r}", key)
    return float(value)


def _sampling(body: dict[str, Any], max_n: int) -> dict[str, Any]:
    """The generation settings of a request body but its length (OpenAI's names, defaults and
    ranges; at most ``max_n`` completions)."""
    if body.get("stream"):
        raise RequestError("stream is not supported by rlvr serve", "stream")
    for unsupported in ("tools", "functions", "response_format", "logit_bias"):
        if body.get(unsupported):
            raise RequestError(f"{unsupported} is not supported by rlvr serve", unsupported)
    for penalty in ("presence_penalty", "frequency_penalty"):
        if _number(body, penalty, 0.0, -2.0, 2.0) != 0:
            raise RequestError(f"{penalty} is not supported by rlvr serve (only 0)", penalty)
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0)
    if top_p == 0:
        raise RequestError("top_p must be a number in (0, 1], got 0", "top_p")
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if (
        not isinstance(stop, list)
        or len(stop) > MAX_STOPS
        or not all(isinstance(s, str) and s for s in stop)
    ):
        raise RequestError(
            f"stop must be a string or a list of at most {MAX_STOPS} non-empty strings, "
            f"got {stop!r}",
            "stop",
        )
    return {
        "temperature": _number(body, "temperature", 1.0, 0.0, 2.0),
        "top_p": top_p,
        "n": _int(body, "n", 1, 1, max_n),
        "stop": stop,
    }


class Server:
    """The API's logic, independent of the web framework (tested directly and through HTTP).

    Args:
        model: what answers.
        name: the model name clients ask for.
        max_tokens_limit: most tokens of one completion.
        max_model_len: longest prompt + completion, in tokens (None: the model's context).
    """

    def __init__(
        self,
        model: LocalChatModel,
        name: str,
        max_tokens_limit: int = MAX_TOKENS_LIMIT,
        max_model_len: int | None = None,
    ) -> None:
        context = model.context_length
        if max_model_len is not None and context is not None and max_model_len > context:
            raise ValueError(
                f"max_model_len {max_model_len} exceeds the context of {model.name} "
                f"({context} tokens)"
            )
        context = max_model_len or context
        if context is None:
            raise ValueError(f"{model.name}'s config has no context length: give max_model_len")
        if max_tokens_limit < 1 or context < 2:
            raise ValueError(
                f"max_tokens_limit ({max_tokens_limit}) and the context ({context}) leave no room "
                "for a prompt and a completion"
            )
        self.model = model
        self.name = name
        self.max_tokens_limit = max_tokens_limit
        self.context = context
        self.vocab = model.model.get_input_embeddings().num_embeddings
        self.max_n = min(MAX_N, model.max_batch)

    def _asked_tokens(self, body: dict[str, Any]) -> tuple[str, int | None]:
        """The completion length a request asks for (its key and value; None: not given),
        checked against ``max_tokens_limit``."""
        key = (
            "max_completion_tokens"
            if body.get("max_completion_tokens") is not None
            else "max_tokens"
        )
        value = body.get(key)
        if value is None:
            return key, None
        if not _is_int(value) or value < 1:
            raise RequestError(f"{key} must be a positive integer, got {value!r}", key)
        if value > self.max_tokens_limit:
            raise RequestError(
                f"{key} is too large: {value}. This server generates at most "
                f"{self.max_tokens_limit} tokens per completion (rlvr serve --max-tokens-limit)",
                key,
            )
        return key, value

    def _max_new_tokens(
        self,
        asked: tuple[str, int | None],
        prompt_tokens: int,
        where: str,
        default: int | None = None,
    ) -> int:
        """The completion length of a request that asks for ``asked`` (from
        :meth:`_asked_tokens`) and whose prompt (its ``where``: messages or prompt) has
        ``prompt_tokens`` tokens: as asked, else ``default`` (None: the room the context
        leaves) at most ``max_tokens_limit`` and that room; a :class:`RequestError` when they
        do not fit the context."""
        key, tokens = asked
        if prompt_tokens >= self.context:
            raise RequestError(
                f"This model's maximum context length is {self.context} tokens. However, your "
                f"{where} has {prompt_tokens} tokens, leaving no room for a completion. Please "
                f"reduce the length of the {where}.",
                where,
                "context_length_exceeded",
            )
        if tokens is None:
            room = self.context - prompt_tokens
            return min(self.max_tokens_limit, room, room if default is None else default)
        if prompt_tokens + tokens > self.context:
            raise RequestError(
                f"This model's maximum context length is {self.context} tokens. However, you "
                f"requested {prompt_tokens + tokens} tokens ({prompt_tokens} in the {where}, "
                f"{tokens} in the completion). Please reduce the length of the {where} or "
                "completion.",
                key,
                "context_length_exceeded",
            )
        return tokens

    def _logprobs(self, g: Generation, k: int) -> list[dict[str, Any]]:
        """Per reply token: its text, log-prob, bytes and the ``k`` most likely tokens."""
        ids = g.ids
        own, top = self.model.reply_logprobs(g.prompt_ids, ids, max(k, 1))
        out = []
        for tid, lp, alts in zip(ids, own, top, strict=True):
            text = self.model.decode([tid])
            out.append(
                {
                    "token": text,
                    "logprob": lp,
                    "bytes": list(text.encode()),
                    "top_logprobs": [
                        {
                            "token": self.model.decode([a]),
                            "logprob": alp,
                            "bytes": list(self.model.decode([a]).encode()),
                        }
                        for a, alp in alts[:k]
                    ],
                }
            )
        return out

    def models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": self.name, "object": "model", "created": 0, "owned_by": "rlvr"}],
        }

    def _check_model(self, body: dict[str, Any]) -> None:
        asked = body.get("model")
        if asked not in (None, self.name):
            raise RequestError(
                f"model {asked!r} is not served here; this server has {self.name!r}", "model"
            )

    def chat(self, body: dict[str, Any], cancelled: Callable[[], bool]) -> dict[str, Any]:
        """A ``/v1/chat/completions`` request body answered (:class:`Cancelled` raised once
        ``cancelled()``)."""
        self._check_model(body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError("messages must be a non-empty list of {role, content}", "messages")
        for m in messages:
            if not (
                isinstance(m, dict)
                and m.get("role") in ("system", "user", "assistant")
                and isinstance(m.get("content", ""), str)
            ):
                raise RequestError(
                    "each message needs a role (system, user or assistant) and a string content",
                    "messages",
                )
        settings = _sampling(body, self.max_n)
        want = body.get("logprobs") or False
        if not isinstance(want, bool):
            raise RequestError(f"logprobs must be true or false, got {want!r}", "logprobs")
        k = _int(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS)
        asked = self._asked_tokens(body)  # before the prompt is encoded
        prompt = self.model.encode(
            [{"role": m["role"], "content": m.get("content") or ""} for m in messages]
        )
        settings["max_new_tokens"] = self._max_new_tokens(asked, len(prompt), "messages")
        (replies,) = self.model.generate_ids([prompt], cancelled=cancelled, **settings)
        choices = []
        for i, g in enumerate(replies):
            choice: dict[str, Any] = {
                "index": i,
                "message": {"role": "assistant", "content": g.text},
                "finish_reason": g.finish_reason,
                "logprobs": {"content": self._logprobs(g, k)} if want else None,
                "token_ids": g.ids,
            }
            choices.append(choice)
        return self._response("chat.completion", prompt, replies, choices)

    def completions(self, body: dict[str, Any], cancelled: Callable[[], bool]) -> dict[str, Any]:
        """A ``/v1/completions`` request body answered (one prompt: text or token ids;
        :class:`Cancelled` raised once ``cancelled()``)."""
        self._check_model(body)
        settings = _sampling(body, self.max_n)
        k = body.get("logprobs")
        k = None if k is None else _int(body, "logprobs", 0, 0, MAX_TOP_LOGPROBS)
        asked = self._asked_tokens(body)  # before the prompt is encoded
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]
        if isinstance(prompt, str):
            ids = self.model.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        elif isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
            ids = list(prompt)
            if not all(0 <= t < self.vocab for t in ids):
                raise RequestError(
                    f"prompt token ids must be in [0, {self.vocab}) (the model's vocabulary)",
                    "prompt",
                )
        else:
            raise RequestError("prompt must be one string or one list of token ids", "prompt")
        if not ids:
            raise RequestError("the prompt has no tokens", "prompt")
        settings["max_new_tokens"] = self._max_new_tokens(
            asked, len(ids), "prompt", COMPLETIONS_MAX_TOKENS
        )
        (replies,) = self.model.generate_ids([ids], cancelled=cancelled, **settings)
        choices = []
        for i, g in enumerate(replies):
            logprobs = None
            if k is not None:
                per = self._logprobs(g, k)
                logprobs = {
                    "tokens": [p["token"] for p in per],
                    "token_logprobs": [p["logprob"] for p in per],
                    "top_logprobs": [
                        {t["token"]: t["logprob"] for t in p["top_logprobs"]} for p in per
                    ],
                    "text_offset": _offsets([p["token"] for p in per]),
                }
            choices.append(
                {
                    "index": i,
                    "text": g.text,
                    "finish_reason": g.finish_reason,
                    "logprobs": logprobs,
                    "token_ids": g.ids,
                }
            )
        return self._response("text_completion", ids, replies, choices)

    def _response(
        self, kind: str, prompt: list[int], replies: list[Generation], choices: list[dict]
    ) -> dict[str, Any]:
        completion = sum(g.completion_tokens for g in replies)
        return {
            "id": f"{'chatcmpl' if kind == 'chat.completion' else 'cmpl'}-{uuid.uuid4().hex}",
            "object": kind,
            "created": int(time.time()),
            "model": self.name,
            "choices": choices,
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": completion,
                "total_tokens": len(prompt) + completion,
            },
            "prompt_token_ids": prompt,
        }


def _offsets(tokens: list[str]) -> list[int]:
    out, at = [], 0
    for t in tokens:
        out.append(at)
        at += len(t)
    return out


def create_app(
    model: LocalChatModel,
    name: str,
    max_tokens_limit: int = MAX_TOKENS_LIMIT,
    max_model_len: int | None = None,
) -> Any:
    """The FastAPI application serving ``model`` under the model name ``name`` (limits: see
    :class:`Server`)."""
    server = Server(model, name, max_tokens_limit, max_model_len)
    app = FastAPI(title="rlvr serve", version="1")

    def error(status: int, err: Exception, kind: str) -> JSONResponse:
        body = {
            "error": {
                "message": str(err),
                "type": kind,
                "param": getattr(err, "param", None),
                "code": getattr(err, "code", None),
            }
        }
        return JSONResponse(body, status_code=status)

    async def body_of(request: Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError:
            raise RequestError("the request body is not JSON") from None
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        return body

    def answer(handler: Any, body: dict[str, Any], cancelled: Callable[[], bool]) -> JSONResponse:
        try:
            return JSONResponse(handler(body, cancelled))
        except RequestError as err:
            return error(400, err, "invalid_request_error")
        except Cancelled as err:  # the client is gone: nobody reads this
            return error(499, err, "cancelled")

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return server.models()

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    def endpoint(handler: Any) -> Any:
        """A POST endpoint: the JSON body checked, ``handler`` run on a worker thread while the
        connection is watched; a client that disconnects cancels its request."""

        async def run(request: Request) -> JSONResponse:
            try:
                body = await body_of(request)
            except RequestError as err:
                return error(400, err, "invalid_request_error")
            gone = threading.Event()
            work = asyncio.ensure_future(run_in_threadpool(answer, handler, body, gone.is_set))
            try:
                while not work.done():
                    await asyncio.wait({work}, timeout=DISCONNECT_POLL_S)
                    if not work.done() and await request.is_disconnected():
                        gone.set()
                return work.result()
            finally:
                gone.set()  # also when this coroutine is cancelled (the server stopping)

        return run

    app.post("/v1/chat/completions")(endpoint(server.chat))
    app.post("/v1/completions")(endpoint(server.completions))
    return app


def serve(
    spec: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    name: str | None = None,
    dtype: str = "fp32",
    device: str = "cpu",
    max_batch: int = 64,
    on_ready: Any = None,
    engine: str = "torch",
    max_tokens_limit: int = MAX_TOKENS_LIMIT,
    max_model_len: int | None = None,
) -> None:
    """Load ``spec`` (a model spec, checkpoint or run directory) and serve it until interrupted;
    ``on_ready(url)`` is called once the server listens (the URL of its ``/v1`` API);
    ``engine``: ``torch`` or ``vllm`` decodes the replies; limits: see :class:`Server`."""
    import torch
    import uvicorn

    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    # turns only where the engine keeps the caches between them (LocalChatModel.slice_tokens)
    model = LocalChatModel(
        spec,
        dtypes[dtype],
        device,
        max_batch=max_batch,
        engine=engine,
        slice_tokens=SLICE_TOKENS,
    )
    app = create_app(model, name or spec, max_tokens_limit, max_model_len)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    server = uvicorn.Server(config)
    if on_ready is not None:
        original = server.startup

        async def startup(sockets: Any = None) -> None:
            await original(sockets)
            bound = server.servers[0].sockets[0].getsockname()[1] if server.servers else port
            on_ready(f"http://{host}:{bound}/v1")

        server.startup = startup  # type: ignore[method-assign]
    server.run()
