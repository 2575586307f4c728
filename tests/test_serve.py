"""`rlvr serve` under abuse: requests checked before any work (an oversized max_tokens, a prompt
longer than the context, out-of-range settings: a 400 with OpenAI's error body), a client that
disconnects stops its generation, and a long generation does not hold up short requests (the
model's turns); turns of a few tokens sample exactly what one turn samples."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import pytest
from test_judges import serving

from rlvr.reward_models.chat_model import LocalChatModel

CONTEXT = 1024  # the tiny model's max_position_embeddings
LONG = CONTEXT - 3  # a greedy reply to PROMPT that runs to the end of the context
PROMPT = [1, 2, 3]


@dataclass
class Served:
    """The tiny model behind `rlvr serve`'s app on 127.0.0.1."""

    model: LocalChatModel
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@pytest.fixture(scope="module")
def served():
    """Turns of 4 tokens (the server's are 32), the default limits."""
    model = LocalChatModel("tiny-random-llama", slice_tokens=4)
    assert model.context_length == CONTEXT
    with serving(model) as port:
        yield Served(model, port)


class Steps:
    """Counts the decode steps of the served model (the engine's decoder steps), each slowed to
    at least 5 ms so that a long generation lasts seconds on any machine."""

    def __init__(self, step: Callable) -> None:
        self.step, self.count = step, 0

    def __call__(self, tokens):
        self.count += 1
        time.sleep(0.005)
        return self.step(tokens)

    def settled(self, quiet_s: float = 1.0, timeout_s: float = 20.0) -> int:
        """The count once it has not moved for ``quiet_s`` seconds."""
        deadline = time.monotonic() + timeout_s
        last, since = self.count, time.monotonic()
        while time.monotonic() - since < quiet_s:
            assert time.monotonic() < deadline, f"still decoding after {timeout_s} s"
            time.sleep(0.05)
            if self.count != last:
                last, since = self.count, time.monotonic()
        return last


@pytest.fixture
def steps(served, monkeypatch) -> Steps:
    decoder = served.model.engine.decoder
    counter = Steps(decoder.step)
    monkeypatch.setattr(decoder, "step", counter)
    return counter


def _send(served: Served, path: str, body: dict) -> socket.socket:
    """A POST sent on a socket left open: closing it is the client vanishing."""
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", served.port))
    head = (
        f"POST /v1{path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    )
    sock.sendall(head.encode() + data)
    return sock


def _wait_for(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _error(reply: httpx.Response) -> dict:
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    return error


def _chat(**body) -> dict:
    return {"model": "tiny", "messages": [{"role": "user", "content": "Say hi"}], **body}


def test_an_oversized_max_tokens_is_a_400_before_any_decoding(served, steps):
    """max_tokens over the server's limit (greedy, the reply would never end), or over the
    context left after the prompt (vLLM's check), or not a positive integer: a 400 naming the
    parameter, answered at once."""
    cases = [
        ({"max_tokens": 10**9, "temperature": 0}, "max_tokens", "is too large: 1000000000"),
        (
            {"max_completion_tokens": 2000},
            "max_completion_tokens",
            "maximum context length is 1024",
        ),
        ({"max_tokens": 0}, "max_tokens", "must be a positive integer"),
        ({"max_completion_tokens": 0, "max_tokens": 8}, "max_completion_tokens", "positive"),
    ]
    for body, param, words in cases:
        reply = httpx.post(f"{served.url}/chat/completions", json=_chat(**body), timeout=10)
        error = _error(reply)
        assert error["param"] == param and words in error["message"], error
    assert steps.count == 0  # nothing was decoded


def test_a_400k_character_prompt_is_a_400_before_the_model_sees_it(served, monkeypatch):
    """Its token count and the context in the message, and the model never given it (its
    attention mask alone would take ~1 TB)."""

    def refuse(*args, **kwargs):
        raise AssertionError("the model was given the prompt")

    monkeypatch.setattr(served.model.engine.decoder, "prefill", refuse)
    text = "word " * 80_000
    messages = [{"role": "user", "content": text}]
    for path, body, tokens, param in [
        ("chat/completions", _chat(messages=messages), served.model.encode(messages), "messages"),
        ("completions", {"prompt": text}, served.model.tokenizer(text)["input_ids"], "prompt"),
    ]:
        start = time.monotonic()
        error = _error(httpx.post(f"{served.url}/{path}", json=body, timeout=60))
        assert time.monotonic() - start < 10
        assert error["param"] == param and error["code"] == "context_length_exceeded"
        assert f"{len(tokens)} tokens" in error["message"], error
        assert "maximum context length is 1024 tokens" in error["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"temperature": 2.5}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"n": 0}, "n"),
        ({"n": 65}, "n"),  # more than --max-batch sequences
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"logit_bias": {"5": 100}}, "logit_bias"),
        ({"presence_penalty": 1.0}, "presence_penalty"),
        ({"max_tokens": "8"}, "max_tokens"),
        ({"prompt": [5, 10**6]}, "prompt"),
        ({"prompt": ""}, "prompt"),
    ],
)
def test_out_of_range_settings_are_a_400_naming_them(served, body, param):
    request = json.dumps({"model": "tiny", "prompt": PROMPT, "max_tokens": 4, **body})  # NaN too
    headers = {"Content-Type": "application/json"}
    reply = httpx.post(f"{served.url}/completions", content=request, headers=headers, timeout=30)
    error = _error(reply)
    assert error["param"] == param, error


def test_max_tokens_omitted_is_16_for_completions_and_the_room_left_for_chat(served):
    """OpenAI's and vLLM's defaults: 16 tokens for /v1/completions, the context left after the
    prompt for /v1/chat/completions; either at most --max-tokens-limit and the room left. And
    --max-model-len bounds the context below the model's."""
    from rlvr.serve.app import Server

    def tokens(reply: dict) -> int:
        return reply["usage"]["completion_tokens"]

    server = Server(served.model, "tiny")
    assert tokens(server.completions({"prompt": PROMPT, "temperature": 0}, lambda: False)) == 16
    long = [5] * (CONTEXT - 4)
    reply = server.completions({"prompt": long, "temperature": 0}, lambda: False)
    assert 1 <= tokens(reply) <= 4  # to the end of the context
    limited = Server(served.model, "tiny", max_tokens_limit=3)
    assert tokens(limited.completions({"prompt": PROMPT, "temperature": 0}, lambda: False)) == 3
    chat = Server(served.model, "tiny", max_tokens_limit=40)
    assert tokens(chat.chat(_chat(temperature=0), lambda: False)) == 40  # more than 16
    header = len(served.model.encode([{"role": "user", "content": ""}]))
    messages = [{"role": "user", "content": "a" * (CONTEXT - 4 - header)}]
    assert len(served.model.encode(messages)) == CONTEXT - 4
    reply = chat.chat(_chat(messages=messages, temperature=0), lambda: False)
    assert 1 <= tokens(reply) <= 4  # to the end of the context
    short = Server(served.model, "tiny", max_model_len=64)
    with pytest.raises(ValueError, match="maximum context length is 64 tokens"):
        short.completions({"prompt": list(range(3, 80)), "max_tokens": 1}, lambda: False)
    with pytest.raises(ValueError, match="exceeds the context"):
        Server(served.model, "tiny", max_model_len=CONTEXT + 1)


def test_a_client_that_disconnects_stops_its_generation(served, steps):
    """A greedy reply to the end of the context, its client gone after 20 steps: decoding
    stops within a turn of the server noticing, and the next request is answered."""
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": LONG, "temperature": 0}
    client = _send(served, "/completions", body)
    _wait_for(lambda: steps.count >= 20)
    client.close()
    gone = steps.count
    stopped = steps.settled()
    # 0.2 s of polling is 40 steps of 5 ms; a starved event loop may take a few times that,
    # and a generation left running would go on to LONG
    assert stopped < gone + 300 < LONG, (gone, stopped)
    reply = httpx.post(f"{served.url}/completions", json={**body, "max_tokens": 2}, timeout=30)
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 2


def test_short_requests_are_answered_while_a_long_one_decodes(served, steps):
    """A greedy reply of ~1000 tokens (5+ s) is decoding; two requests of 8 tokens that come
    after it are answered in a few turns, long before it ends."""
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": LONG, "temperature": 0}
    long = _send(served, "/completions", body)
    try:
        _wait_for(lambda: steps.count >= 20)
        for _ in range(2):
            start = time.monotonic()
            reply = httpx.post(
                f"{served.url}/chat/completions", json=_chat(max_tokens=8), timeout=60
            )
            assert reply.status_code == 200, reply.text
            assert reply.json()["usage"]["completion_tokens"] <= 8
            assert time.monotonic() - start < 10
        assert steps.count < LONG - 1  # the long reply is not done: it was not waited for
    finally:
        long.close()
    assert steps.settled() < LONG - 1  # and, its client gone, it stopped


def test_turns_are_taken_only_where_the_engine_keeps_the_caches(monkeypatch):
    """A model the lean decoder does not run (here: the transformers forward; vLLM likewise)
    would prefill each sample's whole history again at every turn: its requests are decoded in
    one call of the engine's generate, one prefill, whatever slice_tokens asks."""
    from rlvr.rollout import decoder, torch_engine

    monkeypatch.setattr(torch_engine, "make_decoder", decoder.HFDecoder)
    model = LocalChatModel("tiny-random-llama", slice_tokens=4)
    assert model.slice_tokens is None
    prefills = []
    prefill = model.engine.decoder.prefill

    def counted(*args, **kwargs):
        prefills.append(args[0].shape[0])
        return prefill(*args, **kwargs)

    monkeypatch.setattr(model.engine.decoder, "prefill", counted)
    ((reply,),) = model.generate_ids([PROMPT], max_new_tokens=12, temperature=0)
    assert len(reply.ids) == 12 and prefills == [1]


def test_turns_of_a_few_tokens_sample_what_one_turn_samples():
    """Sampled replies (n=2) with stop strings, in turns of 3 tokens and in one turn: the same
    tokens, finish reasons and log-probs, stop strings that span two turns included."""
    prompts = [[50, 60, 70, 80], [9, 10]]
    one = LocalChatModel("tiny-random-llama", seed=1)
    reference = one.generate_ids(prompts, max_new_tokens=24, temperature=1.0, n=2)
    ids = reference[0][0].ids
    stops = [one.decode(ids[k : k + 2]) for k in (2, 5, 8)]  # across the turns' boundaries
    stops = [s for s in stops if s.strip()]
    assert stops
    for stop in [[], stops]:
        a = LocalChatModel("tiny-random-llama", seed=1)
        b = LocalChatModel("tiny-random-llama", seed=1, slice_tokens=3)
        whole = a.generate_ids(prompts, max_new_tokens=24, temperature=1.0, n=2, stop=stop)
        turns = b.generate_ids(prompts, max_new_tokens=24, temperature=1.0, n=2, stop=stop)
        for x, y in zip(sum(whole, []), sum(turns, []), strict=True):
            assert (x.ids, x.finish_reason) == (y.ids, y.finish_reason)
            assert x.logprobs == pytest.approx(y.logprobs, abs=1e-5)
    assert any(g.finish_reason == "stop" for g in sum(turns, []))
