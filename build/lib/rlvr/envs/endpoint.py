"""The recording endpoint's web app (:class:`rlvr.envs.harness.RecordingEndpoint`): OpenAI's
``/v1/chat/completions`` and ``/v1/models`` under ``/s/<session>``, answered whole or as
server-sent chunks (``stream: true``; tool calls in the first chunk); an :class:`~rlvr.envs.episodes.EnvFault` is a 400 with
OpenAI's error body."""

# No ``from __future__ import annotations``: FastAPI reads the endpoints' annotations at runtime.
import json
from collections.abc import Callable, Iterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse

from rlvr.envs.episodes import EnvFault


def make_app(chat: Callable[[str, dict[str, Any]], dict[str, Any]], model: str) -> FastAPI:
    """The app; ``chat(session, body)`` answers a chat request (blocking: run in a thread)."""
    app = FastAPI()

    @app.get("/s/{session}/v1/models")
    def models(session: str) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "rlvr"}]}

    @app.post("/s/{session}/v1/chat/completions")
    async def completions(session: str, request: Request) -> Any:
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return _error("the body must be a JSON object")
        try:
            answer = await run_in_threadpool(chat, session, body)
        except EnvFault as err:
            return _error(str(err))
        if body.get("stream"):
            return StreamingResponse(_chunks(answer), media_type="text/event-stream")
        return JSONResponse(answer)

    return app


def _error(message: str) -> JSONResponse:
    body = {"error": {"message": message, "type": "invalid_request_error"}}
    return JSONResponse(body, status_code=400)


def _chunks(answer: dict[str, Any]) -> Iterator[str]:
    """A whole answer as OpenAI's server-sent chat chunks: the content, the finish, the usage."""
    choice = answer["choices"][0]
    head = {k: answer[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    delta: dict[str, Any] = {"role": "assistant", "content": choice["message"]["content"]}
    if choice["message"].get("tool_calls"):
        calls = choice["message"]["tool_calls"]
        delta["tool_calls"] = [{"index": k, **call} for k, call in enumerate(calls)]
    deltas = [
        {"index": 0, "delta": delta},
        {"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]},
    ]
    for delta in deltas:
        yield f"data: {json.dumps({**head, 'choices': [delta]})}\n\n"
    yield f"data: {json.dumps({**head, 'choices': [], 'usage': answer['usage']})}\n\n"
    yield "data: [DONE]\n\n"
