"""An OpenAI-compatible API over rlvr's engine: ``/v1/chat/completions``, ``/v1/completions``
and ``/v1/models``, served by uvicorn (FastAPI).

One machine serves a judge (or any model rlvr loads: a spec, a checkpoint, a run's latest
checkpoint) to several runs, and the ``openai`` client works against it. The model is a
:class:`~rlvr.reward_models.chat_model.LocalChatModel`: concurrent requests are decoded in one
batch by rlvr's torch engine.

Beyond OpenAI's schema each choice carries ``token_ids`` (the reply's ids exactly as sampled)
and the response ``prompt_token_ids``, so a client can rebuild an episode token-exactly without
re-tokenising text. With ``logprobs`` the log-probs are the model's own (temperature 1, from one
forward pass over prompt + reply, as vLLM's default ``raw_logprobs``), with the ``top_logprobs``
most likely tokens at each position. Not supported (a 400 error saying so): ``stream``, tools,
``response_format``, several prompts in one ``/v1/completions`` request.
"""

# No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations at runtime.
import time
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from rlvr.reward_models.chat_model import Generation, LocalChatModel

#: Most ``top_logprobs`` per position (OpenAI's limit).
MAX_TOP_LOGPROBS = 20


class RequestError(ValueError):
    """A request the server cannot answer (400, with OpenAI's error body)."""


def _int(body: dict[str, Any], key: str, default: int, lo: int, hi: int | None = None) -> int:
    value = body.get(key, default)
    if value is None:
        value = default
    if not isinstance(value, int) or isinstance(value, bool) or value < lo or (hi and value > hi):
        bound = f"in [{lo}, {hi}]" if hi else f">= {lo}"
        raise RequestError(f"{key} must be an integer {bound}, got {value!r}")
    return value


def _sampling(body: dict[str, Any]) -> dict[str, Any]:
    """The generation settings of a request body (OpenAI's names and defaults)."""
    if body.get("stream"):
        raise RequestError("stream is not supported by rlvr serve")
    for unsupported in ("tools", "functions", "response_format"):
        if body.get(unsupported):
            raise RequestError(f"{unsupported} is not supported by rlvr serve")
    temperature = body.get("temperature", 1.0)
    temperature = 1.0 if temperature is None else temperature
    top_p = body.get("top_p", 1.0)
    top_p = 1.0 if top_p is None else top_p
    if not isinstance(temperature, int | float) or temperature < 0:
        raise RequestError(f"temperature must be a number >= 0, got {temperature!r}")
    if not isinstance(top_p, int | float) or not 0 < top_p <= 1:
        raise RequestError(f"top_p must be in (0, 1], got {top_p!r}")
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else list(stop)
    if not all(isinstance(s, str) and s for s in stop):
        raise RequestError(f"stop must be a string or a list of non-empty strings, got {stop!r}")
    tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    return {
        "max_new_tokens": _int({"max_tokens": tokens}, "max_tokens", 256, 1),
        "temperature": float(temperature),
        "top_p": float(top_p),
        "n": _int(body, "n", 1, 1, 128),
        "stop": stop,
    }


class Server:
    """The API's logic, independent of the web framework (tested directly and through HTTP)."""

    def __init__(self, model: LocalChatModel, name: str) -> None:
        self.model = model
        self.name = name

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
            raise RequestError(f"model {asked!r} is not served here; this server has {self.name!r}")

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """A ``/v1/chat/completions`` request body answered."""
        self._check_model(body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError("messages must be a non-empty list of {role, content}")
        for m in messages:
            if not (
                isinstance(m, dict)
                and m.get("role") in ("system", "user", "assistant")
                and isinstance(m.get("content", ""), str)
            ):
                raise RequestError(
                    "each message needs a role (system, user or assistant) and a string content"
                )
        settings = _sampling(body)
        want = bool(body.get("logprobs"))
        k = _int(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS)
        prompt = self.model.encode(
            [{"role": m["role"], "content": m.get("content") or ""} for m in messages]
        )
        (replies,) = self.model.generate_ids([prompt], **settings)
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

    def completions(self, body: dict[str, Any]) -> dict[str, Any]:
        """A ``/v1/completions`` request body answered (one prompt: text or token ids)."""
        self._check_model(body)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]
        if isinstance(prompt, str):
            ids = self.model.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            ids = list(prompt)
        else:
            raise RequestError("prompt must be one string or one list of token ids")
        settings = _sampling(body)
        k = body.get("logprobs")
        k = None if k is None else _int(body, "logprobs", 0, 0, MAX_TOP_LOGPROBS)
        (replies,) = self.model.generate_ids([ids], **settings)
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


def create_app(model: LocalChatModel, name: str) -> Any:
    """The FastAPI application serving ``model`` under the model name ``name``."""
    server = Server(model, name)
    app = FastAPI(title="rlvr serve", version="1")

    def error(status: int, message: str, kind: str) -> JSONResponse:
        body = {"error": {"message": message, "type": kind, "param": None, "code": None}}
        return JSONResponse(body, status_code=status)

    async def body_of(request: Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError:
            raise RequestError("the request body is not JSON") from None
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        return body

    def answer(handler: Any, body: dict[str, Any]) -> JSONResponse:
        try:
            return JSONResponse(handler(body))
        except RequestError as err:
            return error(400, str(err), "invalid_request_error")

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return server.models()

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    def endpoint(handler: Any) -> Any:
        """A POST endpoint: the JSON body checked, ``handler`` run on a worker thread."""

        async def run(request: Request) -> JSONResponse:
            try:
                body = await body_of(request)
            except RequestError as err:
                return error(400, str(err), "invalid_request_error")
            return await run_in_threadpool(answer, handler, body)

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
) -> None:
    """Load ``spec`` (a model spec, checkpoint or run directory) and serve it until interrupted;
    ``on_ready(url)`` is called once the server listens (the URL of its ``/v1`` API);
    ``engine``: ``torch`` or ``vllm`` decodes the replies."""
    import torch
    import uvicorn

    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    model = LocalChatModel(spec, dtypes[dtype], device, max_batch=max_batch, engine=engine)
    app = create_app(model, name or spec)
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
