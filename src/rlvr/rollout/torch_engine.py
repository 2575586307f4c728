"""A batched KV-cache sampler in plain PyTorch + transformers.

Per call: prompts are left-padded and prefilled once; the samples of a group share their prompt's
KV cache (the prompt is encoded once per group, not ``n`` times); decoding runs one token per step
for all live samples, and finished samples leave the batch (compaction), so late steps only pay for
the samples still generating. A sample ends at a stop token, at a stop string (only the tail of
its completion is decoded to check), or after ``max_new_tokens``. The forward pass of a step is a
:class:`~rlvr.rollout.decoder.Decoder`: a lean loop over the model's weights for Llama-family
models, the transformers forward otherwise; the decode loop itself is
:meth:`TorchEngine._generate_chunk`.

The engine keeps its own copy of the weights in the rollout dtype (``rollout.dtype``; what
``auto`` stands for is measured, :mod:`rlvr.precision`); :meth:`TorchEngine.update_weights` copies the policy's
weights into it in memory after every optimiser step.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable

import torch
from transformers import PreTrainedModel

from rlvr.rollout import attention as decode_attention
from rlvr.rollout.base import Rollout, SamplingParams, checked_keys, throughput
from rlvr.rollout.decoder import LlamaDecoder, make_decoder
from rlvr.rollout.sampling import sample_next, token_stats
from rlvr.rollout.streams import derive, uniforms
from rlvr.rollout.tree import Branching, BranchView, Segments, TreeRollout, tree_rollout
from rlvr.rollout.turns import ReprefillSession, TurnSample, TurnSession


def _cpuinfo() -> str:
    """The text of /proc/cpuinfo ("" where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            return f.read()
    except OSError:
        return ""


def _cpu_bf16_flags() -> str:
    """The CPU's bf16 feature flags (``avx512_bf16``, ``amx_bf16``), or "no bf16 flags". A flag
    says what a CPU can execute, not what is fast: :mod:`rlvr.precision` measures that."""
    flags = set(_cpuinfo().split())
    found = [f for f in ("avx512_bf16", "amx_bf16") if f in flags]
    return "+".join(found) if found else "no bf16 flags"


def attention_for(device: torch.device, capped: bool = False) -> str:
    """The engine's attention implementation on ``device``: rlvr's decode attention on the CPU
    (:mod:`rlvr.rollout.attention`), and for a model whose attention scores are soft-capped
    (``capped``: Gemma 2, which SDPA cannot compute); PyTorch's SDPA elsewhere (CUDA kernels)."""
    return decode_attention.NAME if device.type == "cpu" or capped else "sdpa"


def describe_device(device: torch.device | str = "cpu") -> str:
    """The device in words for benchmark records, e.g. "cpu (Intel(R) Xeon(R) Processor @ 2.00GHz,
    2 threads, avx512_bf16)" or "cuda (NVIDIA H100 80GB HBM3)"."""
    device = torch.device(device)
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    names = [
        line.split(":", 1)[1].strip()
        for line in _cpuinfo().splitlines()
        if line.startswith("model name")
    ]
    flags = _cpu_bf16_flags()
    return f"cpu ({names[0] if names else 'unknown'}, {torch.get_num_threads()} threads, {flags})"


def left_pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, L] left-padded ids and the matching attention mask."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, width - len(s) :] = torch.tensor(s, dtype=torch.long)
        mask[i, width - len(s) :] = 1
    return ids, mask


def fill_holes(ended: list[bool]) -> list[int]:
    """Rows to keep after compaction, as old row indices in their new order.

    Live rows keep their place and the last live rows move into the places of ended ones, so
    only as many rows move as have ended before the new end of the batch.
    """
    kept = len(ended) - sum(ended)
    movers = iter(r for r in range(kept, len(ended)) if not ended[r])
    return [next(movers) if ended[r] else r for r in range(kept)]


class TorchEngine:
    """Rollout engine over a transformers causal LM (see module docstring).

    Args:
        policy: the trained model; its weights are copied (cast to ``dtype``) unless the dtype
            matches, in which case the engine shares the policy's parameters.
        pad_token_id: id used for left padding (masked out).
        dtype: rollout compute dtype.
        max_batch: most samples decoded at once; prompts are processed in chunks of
            ``max_batch // n`` so that memory stays bounded as n grows.
        decode: token ids -> text (e.g. ``tokenizer.decode``), needed for
            ``SamplingParams.stop`` strings.
    """

    name = "torch"

    def __init__(
        self,
        policy: PreTrainedModel,
        pad_token_id: int,
        dtype: torch.dtype = torch.float32,
        max_batch: int = 256,
        decode: Callable[[list[int]], str] | None = None,
    ) -> None:
        self.dtype = dtype
        self.pad_token_id = pad_token_id
        self.max_batch = max_batch
        self.decode = decode
        if next(policy.parameters()).dtype == dtype:
            self.model = policy
        else:
            self.model = copy.deepcopy(policy).to(dtype)
            self.model.requires_grad_(False)
        self.model.eval()
        capped = getattr(self.model.config, "attn_logit_softcapping", None) is not None
        device = next(self.model.parameters()).device
        self.model.set_attn_implementation(attention_for(device, capped))
        self.decoder = make_decoder(self.model)

    @torch.no_grad()
    def update_weights(self, policy: torch.nn.Module) -> None:
        """Copy the policy's trained weights into the engine's copy (no-op when shared; the
        frozen base of a LoRA policy never changes, only its adapter is copied)."""
        if self.model is policy:
            return
        own = dict(self.model.named_parameters())
        for name, param in policy.named_parameters():
            if param.requires_grad:
                own[name].copy_(param)

    @torch.inference_mode()
    def generate(
        self,
        prompts: list[list[int]],
        n: int,
        sampling: SamplingParams,
        keys: torch.Tensor | None = None,
    ) -> Rollout:
        """Sample ``n`` completions per prompt; see :class:`rlvr.rollout.base.Rollout` and
        :meth:`rlvr.rollout.base.RolloutEngine.generate` (``keys``: each sample's stream)."""
        self._check_stop(sampling)
        start = time.perf_counter()
        total = len(prompts) * n
        keys = checked_keys(keys, total, sampling)
        # Samples are decoded in chunks of at most max_batch (sample i belongs to prompt i // n):
        # memory stays flat as n grows (Infinite Sampling's micro sampling groups); a group
        # split across chunks has its prompt prefilled once per chunk.
        out = self._chunks(prompts, n, sampling, keys, self.max_batch, None)
        stats = throughput(out.tokens, time.perf_counter() - start)
        return Rollout(
            prompts, out.tokens, out.logprobs, out.finished, n, stats, out.entropy, out.certainty
        )

    @torch.inference_mode()
    def generate_tree(
        self,
        prompts: list[list[int]],
        trees: int,
        sampling: SamplingParams,
        branching: Branching,
        keys: torch.Tensor | None = None,
    ) -> TreeRollout:
        """Sample ``trees`` trees per prompt (:mod:`rlvr.rollout.tree`): tree r of the call
        (prompt ``r // trees``) starts from the stream ``keys[r]`` and branches by the rule
        ``branching``; the leaves are the completions. As many trees are decoded at once as
        ``max_batch`` holds at their most leaves (one at least)."""
        self._check_stop(sampling)
        start = time.perf_counter()
        keys = checked_keys(keys, len(prompts) * trees, sampling)
        per_chunk = max(1, self.max_batch // max(1, branching.max_leaves))
        out = self._chunks(prompts, trees, sampling, keys, per_chunk, branching)
        seconds = time.perf_counter() - start
        return tree_rollout(prompts, trees, out, sampling.token_stats, seconds)

    def _check_stop(self, sampling: SamplingParams) -> None:
        if sampling.stop and self.decode is None:
            raise ValueError(
                "SamplingParams.stop needs the engine's decode function: "
                "TorchEngine(..., decode=tokenizer.decode)"
            )

    def _chunks(
        self,
        prompts: list[list[int]],
        n: int,
        sampling: SamplingParams,
        keys: torch.Tensor,
        rows: int,
        branching: Branching | None,
    ) -> Segments:
        """:meth:`_decode` of ``n`` rows per prompt (row r: prompt ``r // n``, stream
        ``keys[r]``), ``rows`` rows at a time, as one :class:`Segments` (roots and parents
        numbered over the whole call)."""
        total = len(prompts) * n
        out = Segments([], [], [], [], [], [], [], [])  # no prompts or n = 0: no samples
        for lo in range(0, total, rows):
            owner = torch.arange(lo, min(total, lo + rows)) // n
            part = self._generate_chunk(
                prompts, owner, sampling, keys[lo : lo + len(owner)], branching
            )
            offset = len(out.tokens)
            out.parents += [p + offset if p >= 0 else -1 for p in part.parents]
            out.roots += [r + lo for r in part.roots]
            for name in ("tokens", "logprobs", "finished", "entropy", "certainty", "child_index"):
                getattr(out, name).extend(getattr(part, name))
        return out

    def _hits_stop_string(self, ids: list[int], stops: tuple[str, ...], window: int) -> bool:
        """Whether the decoded text of ``ids`` now contains a stop string.

        Checked after every token, so a new occurrence ends in the last token; it spans at most
        ``len(stop.encode())`` tokens (a token is at least one byte of text), and the one token
        more in ``window`` keeps decoding artefacts at the start of the tail (a partial UTF-8
        character, a dropped leading space) out of it. Only that tail is decoded (tokens that
        decode to nothing, such as skipped special tokens, shorten what the window covers).
        """
        text = self.decode(ids[-window:])
        return any(s in text for s in stops)

    def _generate_chunk(
        self,
        prompts: list[list[int]],
        owner: torch.Tensor,
        sampling: SamplingParams,
        keys: torch.Tensor,
        branching: Branching | None = None,
    ) -> Segments:
        """Decode one row per entry of ``owner`` (its prompt index) from its stream ``keys``
        [len(owner)] (:meth:`_decode`)."""
        device = next(self.model.parameters()).device
        used, row_prompt = torch.unique(owner, return_inverse=True)
        ids, mask = left_pad([prompts[i] for i in used.tolist()], self.pad_token_id)
        logits = self.decoder.prefill(ids.to(device), mask.to(device), row_prompt.to(device))
        budgets = [sampling.max_new_tokens] * logits.shape[0]
        return self._decode(logits, sampling, keys, budgets, branching=branching)

    def _decode(
        self,
        logits: torch.Tensor,
        sampling: SamplingParams,
        keys: torch.Tensor,
        budgets: list[int],
        on_leave: Callable[[list[int], list[int]], None] | None = None,
        branching: Branching | None = None,
    ) -> Segments:
        """The decode loop from the decoder's first logits [B, V]: row b samples from stream
        ``keys[b]`` (the uniform of position t is ``uniforms(key, t)``, whichever rows share the
        batch) until a stop token or string, or ``budgets[b]`` tokens. Rows that end leave the
        batch (compaction); ``on_leave(batch_rows, segments)`` is told of them first, while the
        decoder still holds them (their last sampled token is not in its cache).

        With ``branching`` (tree rollouts, :mod:`rlvr.rollout.tree`), before each position the
        rule may end a row's segment and continue it as several children, each with a fork of
        the row's cache; without it, segment b is row b's whole completion."""
        total = logits.shape[0]
        live = list(range(total))  # the segment of each batch row
        stop_ids = set(sampling.stop_token_ids)
        window = max((len(s.encode()) for s in sampling.stop), default=0) + 1
        out = Segments(
            tokens=[[] for _ in range(total)],
            logprobs=[[] for _ in range(total)],
            finished=[False] * total,
            entropy=[[] for _ in range(total)] if sampling.token_stats else [],
            certainty=[[] for _ in range(total)] if sampling.token_stats else [],
            parents=[-1] * total,
            roots=list(range(total)),
            child_index=[0] * total,
        )
        keys, budgets = list(keys.tolist()), list(budgets)
        depth = [0] * total
        branch_points: dict[int, int] = {}
        for step in range(max(budgets)):
            if branching is not None:
                live, logits = self._branch(
                    step, logits, live, branching, out, keys, budgets, depth, branch_points
                )
            u = None
            if sampling.temperature > 0:
                u = uniforms(torch.tensor([keys[s] for s in live], dtype=torch.long), step)
            tok, logp = sample_next(logits, sampling, u)
            for s, t, lp in zip(live, tok.tolist(), logp.tolist(), strict=True):
                out.tokens[s].append(t)
                out.logprobs[s].append(lp)
            if sampling.token_stats:
                ent, sc = token_stats(logits)
                for s, e, c in zip(live, ent.tolist(), sc.tolist(), strict=True):
                    out.entropy[s].append(e)
                    out.certainty[s].append(c)
            ended = [out.tokens[s][-1] in stop_ids for s in live]
            if sampling.stop:  # stop strings, on the decoded tail of each completion
                ended = [
                    e or self._hits_stop_string(self._tail(out, s, window), sampling.stop, window)
                    for s, e in zip(live, ended, strict=True)
                ]
            for s, e in zip(live, ended, strict=True):
                out.finished[s] = e
            leaving = [e or step + 1 >= budgets[s] for s, e in zip(live, ended, strict=True)]
            if any(leaving) and on_leave is not None:
                rows = [row for row, gone in enumerate(leaving) if gone]
                on_leave(rows, [live[row] for row in rows])
            if all(leaving):
                break
            if any(leaving):  # compaction: finished samples leave the batch
                order = fill_holes(leaving)
                live = [live[row] for row in order]
                order_t = torch.tensor(order, device=tok.device)
                self.decoder.select(order_t)
                tok = tok[order_t]
            logits = self.decoder.step(tok)
        return out

    def _branch(
        self,
        step: int,
        logits: torch.Tensor,
        live: list[int],
        branching: Branching,
        out: Segments,
        keys: list[int],
        budgets: list[int],
        depth: list[int],
        branch_points: dict[int, int],
    ) -> tuple[list[int], torch.Tensor]:
        """One position's branching (see :meth:`_decode`): the rows whose segment the rule
        ends are forked into their children, new segments of ``out`` (the first child keeps
        the parent's stream, child j > 0 takes ``derive(derive(key, step), j)``). Returns the
        new live segments and their logits."""
        view = BranchView(
            position=step,
            logits=logits,
            segment_tokens=[len(out.tokens[s]) for s in live],
            depth=[depth[s] for s in live],
            tree=[out.roots[s] for s in live],
            branch_points=branch_points,
        )
        children = branching(view)
        if all(c <= 1 for c in children):
            return live, logits
        order, new_live = [], []
        for row, (s, c) in enumerate(zip(live, children, strict=True)):
            if c <= 1:
                order.append(row)
                new_live.append(s)
                continue
            root = out.roots[s]
            branch_points[root] = branch_points.get(root, 0) + 1
            derived = derive(torch.full((c,), keys[s], dtype=torch.long), step)
            derived = derive(derived, torch.arange(c)).tolist()
            for j in range(c):
                child = len(out.tokens)
                for column in (out.tokens, out.logprobs):
                    column.append([])
                if out.entropy or out.certainty:
                    out.entropy.append([])
                    out.certainty.append([])
                out.finished.append(False)
                out.parents.append(s)
                out.roots.append(root)
                out.child_index.append(j)
                keys.append(keys[s] if j == 0 else derived[j])
                budgets.append(budgets[s])
                depth.append(depth[s] + 1)
                order.append(row)
                new_live.append(child)
        order_t = torch.tensor(order, device=logits.device)
        self.decoder.select(order_t)
        return new_live, logits[order_t]

    @staticmethod
    def _tail(out: Segments, segment: int, window: int) -> list[int]:
        """The last ``window`` tokens of ``segment``'s completion (its ancestors' tokens first)."""
        tail: list[int] = []
        while segment >= 0 and len(tail) < window:
            tail = out.tokens[segment] + tail
            segment = out.parents[segment]
        return tail[-window:]


class KVSession:
    """A :class:`~rlvr.rollout.turns.TurnSession` that keeps every episode's key/value cache
    across turns (the lean decoder's :meth:`~rlvr.rollout.decoder.LlamaDecoder.export` /
    ``resume``): the first turn prefills each prompt once for its ``n`` episodes, later turns
    run only the tokens not yet in an episode's cache (its last sampled token and the
    observation). All episodes are decoded in one batch."""

    def __init__(self, engine: TorchEngine, prompts: list[list[int]], n: int) -> None:
        self.engine, self.prompts, self.n = engine, prompts, n
        self.histories: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.pending: list[list[int]] = []  # per row: sampled ids not in its cache yet

    @torch.inference_mode()
    def sample(
        self, sampling: SamplingParams, keys: torch.Tensor, budgets: list[int]
    ) -> TurnSample:
        engine, start = self.engine, time.perf_counter()
        decoder = engine.decoder
        if not self.histories:  # the first turn: the prompts, each once for its n episodes
            device = next(engine.model.parameters()).device
            ids, mask = left_pad(self.prompts, engine.pad_token_id)
            owner = torch.arange(len(self.prompts) * self.n, device=device) // self.n
            logits = decoder.prefill(ids.to(device), mask.to(device), owner)
        else:
            logits = decoder.resume(self.histories, self.pending)
        saved: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

        def keep_cache(rows: list[int], samples: list[int]) -> None:
            for sample, history in zip(samples, decoder.export(rows), strict=True):
                saved[sample] = history

        out = engine._decode(logits, sampling, keys, budgets, keep_cache)
        self.histories = [saved[r] for r in range(len(out.tokens))]
        self.pending = [[c[-1]] for c in out.tokens]
        return TurnSample(out.tokens, out.logprobs, out.finished, time.perf_counter() - start)

    def extend(self, keep: list[int], observations: list[list[int]]) -> None:
        self.histories = [self.histories[r] for r in keep]
        self.pending = [self.pending[r] + obs for r, obs in zip(keep, observations, strict=True)]

    def close(self) -> None:
        self.histories, self.pending = [], []
        self.engine.decoder.release()


def open_session(engine: object, prompts: list[list[int]], n: int) -> TurnSession:
    """The engine's way to run episodes: the torch engine's :class:`KVSession` with the lean
    decoder, else a :class:`~rlvr.rollout.turns.ReprefillSession` over ``generate``."""
    if isinstance(engine, TorchEngine) and isinstance(engine.decoder, LlamaDecoder):
        return KVSession(engine, prompts, n)
    return ReprefillSession(engine, prompts, n)  # type: ignore[arg-type]
