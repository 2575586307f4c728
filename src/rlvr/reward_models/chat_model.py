"""A language model that answers chats: what a judge reward asks and what ``rlvr serve`` serves.

:class:`ChatModel` is the protocol of the two kinds of judge model: :class:`LocalChatModel`,
a model rlvr loads itself (any model spec, or a trained run's latest checkpoint) decoded by
rlvr's torch engine (:class:`~rlvr.rollout.TorchEngine`: batched, no_grad, its own dtype and
device) or its vLLM engine (:class:`~rlvr.rollout.vllm_engine.VLLMEngine`), and
:class:`~rlvr.reward_models.http_model.HttpChatModel`, an OpenAI-compatible endpoint
(``rlvr serve``, vLLM's server, a hosted API).

Two questions are asked of a judge:

* :meth:`ChatModel.generate`: its reply to each chat (a verdict to parse, or reasoning then a
  verdict), with the reply's token ids and log-probs where the model is local;
* :meth:`ChatModel.choice_probs`: the probability of each of a few answers (``"Yes"``/``"No"``,
  ``"1"``..``"9"``) as the first token of its reply, read from one forward pass, which needs
  no sampling. For a local model it is exactly ``softmax(logits)[first token of the choice]`` at
  the position after the assistant's turn header (the choices' first tokens must differ).

:class:`LocalChatModel` shares its model between callers' threads (the reward's worker threads,
the server's concurrent requests). A caller queues its request and waits for its own answer,
given as soon as its own samples end; one thread, running while there is work, decodes for all
of them. Requests with the same
settings that wait together form one job, decoded as one batch, and jobs start in the order
their requests came as long as their samples fit: at most ``max_batch`` samples are live across
the jobs started and not over (a later job waits for room). Jobs take turns on the model.

With ``slice_tokens``, where the engine keeps the samples' key/value caches between turns
(rlvr's torch engine with its lean decoder, Llama and Qwen2 models:
:func:`~rlvr.rollout.torch_engine.open_session`), a turn decodes at most that many tokens of
each sample, and the job then waits behind the jobs started meanwhile (round robin), so a long
generation does not hold up the short ones that arrive after it; the tokens sampled are the
same as in one turn (each position draws from its own stream, whichever turn samples it).
Elsewhere (the vLLM engine, other architectures), and without ``slice_tokens``, a job is one
call of the engine's ``generate``: a turn there would prefill each sample's whole history again
(quadratic in its length), and vLLM would sample other tokens (a seed per request and turn).

A caller's ``cancelled()`` is read while its request waits and at each turn: a cancelled
request leaves its job, raising :class:`Cancelled`, and its samples are not decoded further.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

if TYPE_CHECKING:
    from rlvr.rollout.base import SamplingParams
    from rlvr.rollout.turns import TurnSession

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


class ChoiceProbs(list[float]):
    """One chat's choice probabilities (a list of floats, one per choice) with the tokens the
    question cost: an endpoint's ``usage`` of its one-token reply."""

    def __init__(self, probs: Sequence[float], prompt_tokens: int, completion_tokens: int) -> None:
        super().__init__(probs)
        self.prompt_tokens, self.completion_tokens = prompt_tokens, completion_tokens


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
        token (not renormalised: they sum to at most 1); a :class:`ChoiceProbs` where the model
        reports the tokens the question cost."""


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


class Cancelled(Exception):
    """A request given up because its caller no longer wants it (its ``cancelled()`` turned
    true, e.g. the client of ``rlvr serve`` disconnected)."""


def _never() -> bool:
    """A caller that never cancels."""
    return False


@dataclass(eq=False)
class _Request:
    """One caller's items, answered by a job started with ``start`` (``samples``: what its
    items decode at once)."""

    key: Any
    items: list[Any]
    samples: int
    start: Callable[[list[_Request]], _Job]
    cancelled: Callable[[], bool]
    done: threading.Event = field(default_factory=threading.Event)
    result: list[Any] = field(default_factory=list)
    error: BaseException | None = None

    def answer(self, result: list[Any] | None = None, error: BaseException | None = None) -> None:
        self.result, self.error = result or [], error
        self.done.set()


class _Job(Protocol):
    """The work on a batch of requests, done a turn at a time."""

    def step(self) -> bool:
        """Run one turn; True once every request of the batch is answered."""


class _Started:
    """A batch of requests taken from the queue (``samples``: theirs in all): its job is made
    at its first turn."""

    def __init__(self, batch: list[_Request]) -> None:
        self.batch = batch
        self.samples = sum(r.samples for r in batch)
        self.job: _Job | None = None

    def turn(self) -> bool:
        """One turn of the job: whether it is over (an error, in making the job or in its
        turn, answers every request still open)."""
        try:
            if self.job is None:
                self.job = self.batch[0].start(self.batch)
            return self.job.step()
        except BaseException as err:
            self.fail(err)
            return True

    def fail(self, err: BaseException) -> None:
        """Answer every request still open with ``err``."""
        for r in self.batch:
            if not r.done.is_set():
                r.answer(error=err)


class _Scheduler:
    """Shares a model between callers' threads (see the module docstring): callers queue
    requests and wait for their own answers, while one thread, running while there is work,
    starts jobs from the queue and gives them turns on the model.

    Args:
        max_batch: most samples of the jobs started and not over (a job alone may have more).
    """

    def __init__(self, max_batch: int) -> None:
        self.max_batch = max_batch
        self._lock = threading.Lock()  # guards the four below
        self._queue: list[_Request] = []  # in the order they came
        self._jobs: deque[_Started] = deque()  # started, in the order of their next turns
        self._live = 0  # samples of the jobs started and not over
        self._driving = False  # whether the scheduler's thread runs

    def submit(
        self,
        key: Any,
        items: list[Any],
        start: Callable[[list[_Request]], _Job],
        per_item: int = 1,
        cancelled: Callable[[], bool] = _never,
    ) -> list[Any]:
        """The results of ``items`` (one per item, in order) from jobs ``start(batch)`` of the
        requests with ``key``; an item decodes ``per_item`` samples, and a request has at most
        ``max_batch`` samples (more items: several requests). Raises the job's error, or
        :class:`Cancelled` once ``cancelled()``."""
        per_request = max(1, self.max_batch // per_item)
        given_up = threading.Event()  # the caller stopped waiting: its other requests too

        def abandoned() -> bool:
            return given_up.is_set() or cancelled()

        requests = [
            _Request(key, chunk, len(chunk) * per_item, start, abandoned)
            for chunk in (items[lo : lo + per_request] for lo in range(0, len(items), per_request))
        ]
        with self._lock:
            self._queue += requests
            if not self._driving:
                self._driving = True
                # a new thread starts with OpenMP's default thread count, not the one set here
                # (vLLM's CPU attention refuses a count other than its engine's)
                threads = torch.get_num_threads()
                threading.Thread(
                    target=self._drive, args=(threads,), name="rlvr-chat-model", daemon=True
                ).start()
        out: list[Any] = []
        try:
            for request in requests:
                request.done.wait()
                if request.error is not None:
                    raise request.error
                out += request.result
        except BaseException:
            given_up.set()
            raise
        return out

    def _drive(self, threads: int) -> None:
        """The scheduler's thread, with ``threads`` torch threads: each job started takes a turn
        after the jobs started before it; a job that is not over goes on after the jobs started
        during its turn (round robin). Returns once no job is left."""
        torch.set_num_threads(threads)
        last: _Started | None = None  # the job that had the last turn
        over = False
        while True:
            with self._lock:
                if last is not None and over:
                    self._live -= last.samples
                self._start_waiting()
                if last is not None and not over:
                    self._jobs.append(last)
                if not self._jobs:
                    self._driving = False
                    return
                last = self._jobs.popleft()
            over = last.turn()

    def _start_waiting(self) -> None:
        """Start jobs from the queue (called holding ``_lock``): the first request waiting and
        the waiting ones with its key, in the order they came, as long as their samples fit
        within ``max_batch`` with the jobs started (later requests wait for room, a job alone
        always starts). A waiting request whose caller cancelled is answered so."""
        for r in self._queue:
            try:
                if r.cancelled():
                    r.answer(error=Cancelled("the caller cancelled the request"))
            except Exception as err:  # the caller's own check failed: so does its request
                r.answer(error=err)
        self._queue = [r for r in self._queue if not r.done.is_set()]
        while self._queue:
            first = self._queue[0]
            room = self.max_batch - self._live
            if self._live and first.samples > room:
                return
            batch, size = [first], first.samples
            for other in self._queue[1:]:
                if other.key == first.key and size + other.samples <= room:
                    batch.append(other)
                    size += other.samples
            self._queue = [r for r in self._queue if r not in batch]
            job = _Started(batch)
            self._jobs.append(job)
            self._live += job.samples


class _OneTurn:
    """A job answering its batch in one turn: ``run`` over all the requests' items."""

    def __init__(self, batch: list[_Request], run: Callable[[list[Any]], list[Any]]) -> None:
        self.batch, self.run = batch, run

    def step(self) -> bool:
        results = self.run([item for r in self.batch for item in r.items])
        at = 0
        for r in self.batch:
            r.answer(results[at : at + len(r.items)])
            at += len(r.items)
        return True


class _Decoding:
    """A job sampling ``n`` replies to each prompt of its batch in turns of at most
    ``slice_tokens`` tokens per sample, in one :class:`~rlvr.rollout.turns.TurnSession` (the
    engine's, which keeps the samples' key/value caches between turns)."""

    def __init__(
        self,
        chat: LocalChatModel,
        batch: list[_Request],
        sampling: SamplingParams,
        n: int,
        slice_tokens: int,
    ) -> None:
        self.chat, self.batch, self.sampling, self.n = chat, batch, sampling, n
        self.slice = slice_tokens
        self.prompts = [p for r in batch for p in r.items]
        total = len(self.prompts) * n  # sample i answers prompt i // n
        self.keys = torch.empty(0, dtype=torch.long)  # each sample's stream, drawn at the start
        self.request_of = [i for i, r in enumerate(batch) for _ in range(len(r.items) * n)]
        self.ids: list[list[int]] = [[] for _ in range(total)]
        self.logprobs: list[list[float]] = [[] for _ in range(total)]
        self.stopped = [False] * total
        self.live: list[int] = []  # the sample of each row of the session
        self.session: TurnSession | None = None

    def step(self) -> bool:
        for r in self.batch:
            if not r.done.is_set() and r.cancelled():
                r.answer(error=Cancelled("the caller cancelled the request"))
        if not self._finished():
            if self.session is None:
                self._open()
            else:
                keep = [row for row, s in enumerate(self.live) if self._going(s)]
                self.session.extend(keep, [[] for _ in keep])
                self.live = [self.live[row] for row in keep]
            self._sample()
            self._answer()
        if self._finished() and self.session is not None:
            self.session.close()
        return self._finished()

    def _finished(self) -> bool:
        return all(r.done.is_set() for r in self.batch)

    def _going(self, sample: int) -> bool:
        """Whether ``sample`` is still decoded: not ended, its request still open."""
        return (
            not self.stopped[sample]
            and len(self.ids[sample]) < self.sampling.max_new_tokens
            and not self.batch[self.request_of[sample]].done.is_set()
        )

    def _open(self) -> None:
        """The samples' streams, and the session over the prompts of the requests still
        open."""
        from rlvr.rollout.streams import random_keys
        from rlvr.rollout.torch_engine import open_session

        # the model's own random streams: sampling here never moves torch's global generator
        self.keys = random_keys(len(self.ids), self.chat._generator)
        self.live = [s for s in range(len(self.ids)) if self._going(s)]
        prompts = [self.prompts[s // self.n] for s in self.live[:: self.n]]
        self.session = open_session(self.chat.engine, prompts, self.n)

    def _sample(self) -> None:
        """One turn's tokens of the live samples."""
        assert self.session is not None
        budgets = [
            min(self.slice, self.sampling.max_new_tokens - len(self.ids[s])) for s in self.live
        ]
        # position t of a sample draws from uniforms(key, t) = uniforms(key + t0, t - t0): this
        # turn's first position t0 is what the sample has, whichever turn samples it
        done = torch.tensor([len(self.ids[s]) for s in self.live], dtype=torch.long)
        out = self.session.sample(self.sampling, self.keys[self.live] + done, budgets)
        for s, ids, logprobs, stopped in zip(
            self.live, out.completion_ids, out.logprobs, out.finished, strict=True
        ):
            keep, self.stopped[s] = self._settle(self.ids[s], ids, stopped)
            self.ids[s] += ids[:keep]
            self.logprobs[s] += logprobs[:keep]

    def _settle(self, before: list[int], new: list[int], stopped: bool) -> tuple[int, bool]:
        """How many of a turn's tokens ``new`` to keep and whether the sample ended there, as
        one long turn over ``before + new`` decides. The engine reads stop strings in the
        decoded tail of the turn's own tokens; a stop string spans at most ``window - 1``
        tokens, so the first ones of ``new`` are read again here with the ``window`` tokens that
        end at each: a stop string that began in ``before`` ends there, and a tail cut short
        by the turn's start may decode differently (a partial UTF-8 character)."""
        stops = self.sampling.stop
        if not stops or not before:
            return len(new), stopped
        window = max(len(s.encode()) for s in stops) + 1
        for j in range(min(len(new), window - 1)):
            text = self.chat.decode((before + new[: j + 1])[-window:])
            if any(s in text for s in stops):
                return j + 1, True
        if stopped and len(new) < window and new[-1] not in self.sampling.stop_token_ids:
            return len(new), False  # a stop string read in a tail cut short: not one
        return len(new), stopped

    def _answer(self) -> None:
        """Answer the open requests whose samples have all ended."""
        at = 0
        for r in self.batch:
            samples = range(at, at + len(r.items) * self.n)
            at = samples.stop
            if r.done.is_set() or any(self._going(s) for s in samples):
                continue
            replies = [
                self.chat.reply(
                    self.prompts[s // self.n], self.ids[s], self.logprobs[s], self.stopped[s]
                )
                for s in samples
            ]
            r.answer([replies[k : k + self.n] for k in range(0, len(replies), self.n)])


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
        slice_tokens: most tokens a job decodes per sample in one turn before the jobs waiting
            get theirs, where the engine keeps the caches between turns (rlvr's torch engine
            with its lean decoder; see the module docstring). None, or another engine: a job
            is one call of the engine's ``generate`` (the effective value is
            :attr:`slice_tokens`).
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
        slice_tokens: int | None = None,
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
        if slice_tokens is not None and slice_tokens < 1:
            raise ValueError(f"slice_tokens must be >= 1 or None, got {slice_tokens}")
        self.max_batch = max_batch
        self.slice_tokens = slice_tokens if self._keeps_caches() else None
        self._scheduler = _Scheduler(max_batch)
        self._generator = torch.Generator().manual_seed(seed)

    def _keeps_caches(self) -> bool:
        """Whether the engine keeps a job's key/value caches between turns (the session
        :func:`~rlvr.rollout.torch_engine.open_session` gives it is a
        :class:`~rlvr.rollout.torch_engine.KVSession`). Elsewhere a turn would prefill each
        sample's whole history again (quadratic in its length), and vLLM would draw from
        another seed at each turn."""
        from rlvr.rollout.torch_engine import KVSession, open_session

        return isinstance(open_session(self.engine, [], 1), KVSession)

    @property
    def context_length(self) -> int | None:
        """The longest prompt + reply the model takes, in tokens (its config's
        ``max_position_embeddings``; None where the config does not say)."""
        return getattr(self.model.config, "max_position_embeddings", None) or None

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
        cancelled: Callable[[], bool] = _never,
    ) -> list[list[Generation]]:
        """:meth:`generate` on prompts given as token ids (the server's ``/v1/completions``);
        raises :class:`Cancelled` once ``cancelled()`` is true (read while the request waits
        and at each turn)."""
        from rlvr.rollout import SamplingParams

        sampling = SamplingParams(
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=max_new_tokens,
            stop_token_ids=self.stops,
            stop=tuple(stop),
        )
        slice_tokens = self.slice_tokens

        def start(batch: list[_Request]) -> _Job:
            if slice_tokens is None:
                return _OneTurn(batch, lambda prompts: self._generate(prompts, sampling, n))
            return _Decoding(self, batch, sampling, n, slice_tokens)

        return self._scheduler.submit(("generate", sampling, n), list(prompts), start, n, cancelled)

    def _generate(
        self, prompts: list[list[int]], sampling: SamplingParams, n: int
    ) -> list[list[Generation]]:
        """``n`` replies to each prompt from one call of the engine's ``generate``."""
        from rlvr.rollout.streams import random_keys

        # the model's own random streams: sampling here never moves torch's global generator
        keys = random_keys(len(prompts) * n, self._generator)
        rollout = self.engine.generate(prompts, n, sampling, keys)
        out = [
            self.reply(prompts[i // n], ids, rollout.logprobs[i], rollout.finished[i])
            for i, ids in enumerate(rollout.completion_ids)
        ]
        return [out[i * n : (i + 1) * n] for i in range(len(prompts))]

    def reply(
        self, prompt: list[int], ids: list[int], logprobs: list[float], stopped: bool
    ) -> Generation:
        """The :class:`Generation` of reply ``ids`` (``stopped``: at a stop token or string)
        to ``prompt``."""
        return Generation(
            text=self.decode(ids),
            prompt_tokens=len(prompt),
            completion_tokens=len(ids),
            prompt_ids=list(prompt),
            ids=list(ids),
            logprobs=list(logprobs),
            finish_reason="stop" if stopped else "length",
        )

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
        dist = self._scheduler.submit(
            "next", prompts, lambda batch: _OneTurn(batch, self._next_token_probs)
        )
        return [[float(d[t]) for t in tokens] for d in dist]

    @torch.no_grad()
    def _next_token_probs(self, prompts: list[list[int]]) -> list[torch.Tensor]:
        """``[V]`` softmax of the logits after each prompt (fp32; at most ``max_batch`` prompts,
        the scheduler's jobs): a left-padded batch with the positions of the unpadded prompts,
        and only the last position through the output layer (``logits_to_keep=1``: the
        ``[B, T, V]`` logits of a batch of judge questions would take gigabytes)."""
        ids, mask = _left_pad(prompts, self.tokenizer.pad_token_id, self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=1
        ).logits[:, -1]
        return list(torch.softmax(logits.float(), dim=-1).cpu())

    @torch.no_grad()
    def reply_logprobs(
        self, prompt_ids: list[int], ids: list[int], k: int
    ) -> tuple[list[float], list[list[tuple[int, float]]]]:
        """For each reply token, its log-prob and the ``k`` most likely tokens with theirs at
        its position: the model's own distribution (temperature 1), one forward over prompt +
        reply (only the reply's positions through the output layer)."""
        if not ids:
            return [], []
        seq = torch.tensor([prompt_ids + ids], device=self.device)
        logits = self.model(input_ids=seq, logits_to_keep=len(ids) + 1).logits[0, :-1].float()
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
