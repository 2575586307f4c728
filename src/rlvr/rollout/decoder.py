"""One decoding step of a batch of samples: the forward pass behind :class:`TorchEngine`.

A decoder prefills the prompts of a chunk once, then appends one token per live sample and step,
and drops finished samples (compaction). Two implementations share this interface:

* :class:`LlamaDecoder`, for Llama-family models (Llama, Qwen2, Qwen3's per-head q/k norms,
  Mistral, Gemma 2 and 3: sliding-window layers, soft-capped attention and logits, Gemma's
  (1 + w) norms around attention and MLP, Gemma 3's rotary embedding per layer type): a lean
  loop over the model's own
  weights and modules (embedding, rotary embedding, norm weights, projections, LM head) without
  the transformers forward's per-layer overhead; projections on prepacked weights
  (:class:`~rlvr.rollout.linear.PackedLinear`); a KV cache that keeps each prompt's keys/values
  once per group (shared-prefix attention, :func:`~rlvr.rollout.attention.shared_prefix_attention`)
  and the generated tokens' keys/values in a buffer grown in blocks (no ``torch.cat`` of the
  whole cache per step). The prefill is the same loop over all prompt tokens with SDPA, and is
  kept: a call with the same prompts under the same weights (the greedy, then the sampled
  held-out evaluation) starts from it. It computes the transformers forward's function
  (checked to tolerance in tests/test_rollout.py).
* :class:`HFDecoder`, for any other causal LM: the transformers forward with its
  ``DynamicCache``, the prompt cache repeated for the samples of each group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from rlvr.adapters import MergedWeights, is_quantized
from rlvr.rollout.attention import shared_prefix_attention
from rlvr.rollout.linear import PackedLinear


def _is(model: PreTrainedModel, names: tuple[str, ...]) -> bool:
    """Whether ``model`` is an instance of one of the transformers classes ``names``, compared
    by name and module along its class hierarchy: the modeling modules of the architectures a
    run does not use are never imported (about 1 s of CPU at every process start)."""
    return any(
        c.__name__ in names and c.__module__.startswith("transformers.models.")
        for c in type(model).__mro__
    )


class Decoder(Protocol):
    """Batched incremental decoding; rows are the live samples of one chunk."""

    def prefill(
        self, ids: torch.Tensor, mask: torch.Tensor, row_prompt: torch.Tensor
    ) -> torch.Tensor:
        """Encode left-padded prompts ``ids``/``mask`` [P, Lp] once; start one row per entry of
        ``row_prompt`` [B] (its prompt index). Returns the next-token logits [B, V]."""

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Append ``tokens`` [B] (one per row); returns the next-token logits [B, V]."""

    def select(self, order: torch.Tensor) -> None:
        """Keep rows ``order`` [B'] (old row indices), in that order. A row listed more than
        once is forked: each copy continues from the same cache (a tree rollout's branch
        point)."""


def make_decoder(model: PreTrainedModel) -> Decoder:
    """The lean decoder where the architecture is known, else the transformers forward."""
    return LlamaDecoder(model) if LlamaDecoder.supports(model) else HFDecoder(model)


class HFDecoder:
    """The transformers forward with a ``DynamicCache`` (any causal LM)."""

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model

    def prefill(
        self, ids: torch.Tensor, mask: torch.Tensor, row_prompt: torch.Tensor
    ) -> torch.Tensor:
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
            use_cache=True,
            logits_to_keep=1,
        )
        self.cache = out.past_key_values
        self.cache.batch_select_indices(row_prompt)  # each prompt's cache, once per sample
        self.mask = mask[row_prompt]  # [B, L] attention mask over the cache
        self.next_pos = self.mask.sum(-1)  # [B] position of the next token
        return out.logits[row_prompt, -1, :]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        self.mask = torch.cat([self.mask, self.mask.new_ones((self.mask.shape[0], 1))], dim=1)
        out = self.model(
            input_ids=tokens[:, None],
            attention_mask=self.mask,
            position_ids=self.next_pos[:, None],
            past_key_values=self.cache,
            use_cache=True,
        )
        self.next_pos = self.next_pos + 1
        return out.logits[:, -1, :]

    def select(self, order: torch.Tensor) -> None:
        self.cache.batch_select_indices(order)
        self.mask, self.next_pos = self.mask[order], self.next_pos[order]


def _head_norms(attention: torch.nn.Module) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The weights of an attention layer's per-head query and key RMSNorms (Qwen3), or None."""
    q_norm, k_norm = getattr(attention, "q_norm", None), getattr(attention, "k_norm", None)
    if q_norm is None or k_norm is None:
        return None, None
    return q_norm.weight, k_norm.weight


def _bias(module: torch.nn.Module) -> torch.Tensor | None:
    """A linear layer's bias (a LoRA layer's: its base layer's)."""
    base = module.get_base_layer() if hasattr(module, "get_base_layer") else module
    return base.bias


Projection = tuple[torch.Tensor, torch.Tensor | None]  # (weight packed for PackedLinear, bias)


def _window(model: PreTrainedModel, attention: torch.nn.Module) -> int | None:
    """The sliding window of an attention layer (a query attends to the keys fewer than this
    many positions back), None for full attention."""
    if hasattr(attention, "sliding_window"):  # Qwen2/3, Gemma 2/3: per layer type
        return attention.sliding_window
    if _is(model, ("MistralForCausalLM",)):  # every layer, from the config
        return model.config.sliding_window
    return None


@dataclass
class _Layer:
    """What a decode step reads of one decoder layer."""

    input_norm: torch.Tensor
    mlp_norm: torch.Tensor  # before the MLP (Gemma: pre_feedforward_layernorm)
    q: Projection
    k: Projection
    v: Projection
    o: Projection
    gate: Projection
    up: Projection
    down: Projection
    q_norm: torch.Tensor | None = None  # Qwen3, Gemma 3: RMSNorm of each head's query and key
    k_norm: torch.Tensor | None = None
    attn_out_norm: torch.Tensor | None = None  # Gemma: the attention output's norm
    mlp_out_norm: torch.Tensor | None = None  # Gemma: the MLP output's norm
    window: int | None = None  # sliding-window attention (None: full)
    rope: str | None = None  # Gemma 3: its layer type, which selects the rotary embedding


@dataclass(frozen=True)
class _Prefill:
    """What a prefill computed: for ``ids``/``mask`` [P, Lp] under the weights ``versions``,
    the prompts' keys/values per layer [P, KV, Lp, D], the next-token logits [P, V] and the
    additive mask of the prefix columns [P, Lp] (decoding never writes into them)."""

    ids: torch.Tensor
    mask: torch.Tensor
    versions: tuple[tuple[int, int], ...]
    prefix_k: list[torch.Tensor]
    prefix_v: list[torch.Tensor]
    logits: torch.Tensor
    prompt_bias: torch.Tensor
    positions: torch.Tensor
    dtype: torch.dtype


class LlamaDecoder:
    """Lean decode steps for Llama-family models (see the module docstring).

    Cache layout (``P`` prompts, ``B`` live rows, ``KV`` key/value heads, head dim ``D``):

    * prompt keys/values of layer ``i``: ``self.prefix_k[i]``, ``self.prefix_v[i]`` [P, KV, Lp, D],
      written by the prefill, read by every sample of the prompt;
    * generated keys/values: ``self.kv`` [2, layers, B, KV, S, D], ``S`` slots grown by ``block``;
      slot ``t`` holds the key/value of the ``t``-th generated token of every row;
    * ``self.bias`` [B, 1, 1, Lp + S] float32 additive mask: 0 where a row attends, -inf at its
      prompt's left padding and at slots not written yet; ``self.positions`` [B, Lp + S] the
      position of each column's token (a sliding-window layer masks the keys too far back);
    * ``self.grid_index`` [B * KV]: where each row's queries go in the grid of shared-prefix
      attention (its prompt, and its index among the prompt's rows).
    """

    def __init__(self, model: PreTrainedModel, block: int = 16) -> None:
        self.model = model
        self.block = block
        attn = model.model.layers[0].self_attn
        self.heads = model.config.num_attention_heads
        self.kv_heads = model.config.num_key_value_heads
        self.head_dim = attn.head_dim
        self.scaling = attn.scaling
        norm = model.model.norm
        self.eps = norm.variance_epsilon if hasattr(norm, "variance_epsilon") else norm.eps
        self.gemma = _is(model, LlamaDecoder.GEMMA)  # (1 + w) norms, in fp32
        self.softcap = getattr(model.config, "attn_logit_softcapping", None)
        self.final_softcap = getattr(model.config, "final_logit_softcapping", None)
        self.act = model.model.layers[0].mlp.act_fn
        head = model.lm_head.weight
        self.linear = PackedLinear(head.dtype, head.device)
        self.merged = MergedWeights()  # a LoRA model's projections: W + (alpha / r) B A
        self._prefilled: _Prefill | None = None  # the last prefill, reused for the same prompts

    GEMMA = ("Gemma2ForCausalLM", "Gemma3ForCausalLM")
    ARCHITECTURES = (
        "LlamaForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
        "MistralForCausalLM",
        *GEMMA,
    )

    @staticmethod
    def supports(model: PreTrainedModel) -> bool:
        """Llama, Qwen2, Qwen3, Mistral, Gemma 2 and Gemma 3 (text) causal LMs with causal
        attention (full or sliding-window), weights not quantised (a QLoRA base runs through its
        own quantised layers: the lean decoder would need a dequantised copy, the memory QLoRA
        saves)."""
        if not _is(model, LlamaDecoder.ARCHITECTURES) or is_quantized(model):
            return False
        if getattr(model.config, "use_bidirectional_attention", False):
            return False
        layer_types = getattr(model.config, "layer_types", None) or ["full_attention"]
        return all(t in ("full_attention", "sliding_attention") for t in layer_types)

    def _read_weights(self) -> None:
        """Take the model's current weights (at each prefill, so that in-place updates and
        replaced parameters are followed), the projections packed for :attr:`linear`; the
        projections of a LoRA model with its active adapter merged (:attr:`merged`: recomputed
        only when the base weight or the adapter changed)."""
        blocks = self.model.model.layers
        flat = [
            proj
            for b in blocks
            for proj in (b.self_attn.q_proj, b.self_attn.k_proj, b.self_attn.v_proj)
            + (b.self_attn.o_proj, b.mlp.gate_proj, b.mlp.up_proj, b.mlp.down_proj)
        ] + [self.model.lm_head]
        weights = [self.merged(m) for m in flat]
        packed = self.linear.pack(weights)
        if self.linear.enabled:  # the packed copies are what runs: free the merged ones' memory
            for w, m in zip(weights, flat, strict=True):
                if w is not getattr(m, "weight", None) and w.untyped_storage().size():
                    w.untyped_storage().resize_(0)  # same tensor and version: not repacked
        projections = [(w, _bias(m)) for w, m in zip(packed, flat, strict=True)]
        self.lm_head = projections.pop()
        per_type = hasattr(self.model.model.rotary_emb, "layer_types")  # Gemma 3
        self.layers = []
        for i, b in enumerate(blocks):
            attn = b.self_attn
            norms = (  # before the MLP; after attention and MLP
                (b.pre_feedforward_layernorm.weight, b.post_attention_layernorm.weight)
                + (b.post_feedforward_layernorm.weight,)
                if self.gemma
                else (b.post_attention_layernorm.weight, None, None)
            )
            self.layers.append(
                _Layer(
                    b.input_layernorm.weight,
                    norms[0],
                    *projections[7 * i : 7 * i + 7],
                    *_head_norms(attn),
                    *norms[1:],
                    window=_window(self.model, attn),
                    rope=attn.layer_type if per_type else None,
                )
            )

    def _versions(self) -> tuple[tuple[int, int], ...]:
        """Which weights the model holds: each parameter's identity and in-place version (an
        optimizer step or a weight copy bumps it)."""
        return tuple((id(p), p._version) for p in self.model.parameters())

    def prefill(
        self, ids: torch.Tensor, mask: torch.Tensor, row_prompt: torch.Tensor
    ) -> torch.Tensor:
        versions = self._versions()
        kept = self._prefilled
        if (
            kept is not None
            and kept.versions == versions
            and kept.ids.shape == ids.shape
            and torch.equal(kept.ids, ids)
            and torch.equal(kept.mask, mask)
        ):  # the same prompts under the same weights: e.g. the greedy, then the sampled eval
            self.prefix_k, self.prefix_v = list(kept.prefix_k), list(kept.prefix_v)
            self._start_rows(
                kept.prompt_bias, kept.positions, row_prompt, mask.sum(-1)[row_prompt], kept.dtype
            )
            return kept.logits[row_prompt]
        self._read_weights()
        n_prompts, prompt_len = ids.shape
        heads, d, device = self.heads, self.head_dim, ids.device
        inner = self.model.model
        hidden = inner.embed_tokens(ids).view(n_prompts * prompt_len, -1)  # [P * Lp, hidden]
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # [P, Lp]
        rotary = self._rotaries(hidden, positions.view(-1))
        # causal over the prompt's own tokens; a padding query attends to itself (no empty row)
        causal = torch.ones((prompt_len, prompt_len), dtype=torch.bool, device=device).tril()
        diagonal = torch.eye(prompt_len, dtype=torch.bool, device=device)
        attend = (causal & mask.bool()[:, None, :])[:, None]  # [P, 1, Lp, Lp]
        masks = self._windowed(attend, positions[:, :, None], positions, diagonal)
        self.prefix_k, self.prefix_v = [], []
        for w in self.layers:
            q, k, v = (
                t.view(n_prompts, prompt_len, -1, d).transpose(1, 2)  # [P, heads, Lp, D]
                for t in self._qkv(self._norm(hidden, w.input_norm), w, *rotary[w.rope])
            )
            self.prefix_k.append(k.contiguous())
            self.prefix_v.append(v.contiguous())
            attn = self._attention(q, k, v, masks[w.window])
            out = attn.transpose(1, 2).reshape(n_prompts * prompt_len, heads * d)
            hidden = self._residual(hidden, out, w)
        logits = self._logits(hidden.view(n_prompts, prompt_len, -1)[:, -1])
        prompt_bias = torch.zeros((n_prompts, prompt_len), device=device)
        prompt_bias.masked_fill_(mask == 0, float("-inf"))
        self._start_rows(prompt_bias, positions, row_prompt, mask.sum(-1)[row_prompt], hidden.dtype)
        self._prefilled = _Prefill(
            ids,
            mask,
            versions,
            self.prefix_k,
            self.prefix_v,
            logits,
            prompt_bias,
            positions,
            hidden.dtype,
        )
        return logits[row_prompt]

    def _windowed(
        self,
        attend: torch.Tensor,
        query_pos: torch.Tensor,
        key_pos: torch.Tensor,
        always: torch.Tensor | None = None,
    ) -> dict[int | None, torch.Tensor]:
        """The boolean attention mask of each of the layers' windows: ``attend`` [N, 1, Lq, Lk]
        (None: as given) and, for a window ``w``, only the keys fewer than ``w`` positions
        before the query (``query_pos`` [N, Lq, 1] and ``key_pos`` [N, Lk] the tokens'
        positions); ``always`` [Lq, Lk] is added to every mask (a padding query's own key)."""
        masks: dict[int | None, torch.Tensor] = {}
        for window in {w.window for w in self.layers}:
            near = attend
            if window is not None:
                near = attend & ((query_pos - key_pos[:, None, :]) < window)[:, None]
            masks[window] = near if always is None else near | always
        return masks

    def _attention(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attend: torch.Tensor
    ) -> torch.Tensor:
        """softmax(q k^T * scaling, soft-capped (Gemma 2), masked) v for queries q [N, H, Lq, D],
        keys and values [N, KV, Lk, D] and the boolean mask ``attend`` [N, 1, Lq, Lk]."""
        if self.softcap is None:
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=attend, scale=self.scaling, enable_gqa=True
            )
        groups = self.heads // self.kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        scores = torch.matmul(q, k.transpose(-1, -2)).float() * self.scaling
        scores = torch.tanh(scores / self.softcap) * self.softcap
        probs = scores.masked_fill(~attend, float("-inf")).softmax(-1).to(v.dtype)
        return torch.matmul(probs, v)

    def _start_rows(
        self,
        prompt_bias: torch.Tensor,
        prompt_pos: torch.Tensor,
        row_prompt: torch.Tensor,
        next_pos: torch.Tensor,
        dtype: torch.dtype,
    ) -> None:
        """Start decoding rows over the prefixes in :attr:`prefix_k` / :attr:`prefix_v`:
        ``prompt_bias`` [P, Lp] (0 where a prefix column is real, -inf elsewhere) and
        ``prompt_pos`` [P, Lp] (the position of each column's token), the prefix of each row
        ``row_prompt`` [B], the position of its next token ``next_pos`` [B]."""
        device = row_prompt.device
        n_prompts, prompt_len = prompt_bias.shape
        rows, kv_heads = row_prompt.numel(), self.kv_heads
        self._place(row_prompt, n_prompts)
        self.next_pos = next_pos  # [B] position of the next token
        shape = (2, len(self.layers), rows, kv_heads, self.block, self.head_dim)
        self.kv = torch.zeros(shape, dtype=dtype, device=device)
        slots_bias = torch.full((rows, self.block), float("-inf"), device=device)
        self.bias = torch.cat([prompt_bias[row_prompt], slots_bias], dim=1)[:, None, None, :]
        slots_pos = prompt_pos.new_zeros((rows, self.block))
        self.positions = torch.cat([prompt_pos[row_prompt], slots_pos], dim=1)
        self.prompt_len = prompt_len
        self.length = 0  # generated tokens in the cache

    def release(self) -> None:
        """Drop the cache of the last batch (its prefixes and generated keys/values), the
        kept prefill included."""
        self.prefix_k, self.prefix_v = [], []
        self.kv = self.bias = None
        self._prefilled = None

    def export(self, rows: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The keys and values [layers, KV, h, D] of the tokens in the cache of each of ``rows``
        (its prefix's real tokens, then its generated ones, in order): a history that
        :meth:`resume` continues."""
        out = []
        for r in rows:
            real = self.bias[r, 0, 0] == 0
            cols = real[: self.prompt_len].nonzero()[:, 0]
            slots = real[self.prompt_len : self.prompt_len + self.length].nonzero()[:, 0]
            p = int(self.row_prompt[r])
            k = torch.stack([pk[p][:, cols] for pk in self.prefix_k])
            v = torch.stack([pv[p][:, cols] for pv in self.prefix_v])
            gen_k, gen_v = self.kv[0, :, r][:, :, slots], self.kv[1, :, r][:, :, slots]
            out.append((torch.cat([k, gen_k], dim=2), torch.cat([v, gen_v], dim=2)))
        return out

    def resume(
        self, histories: list[tuple[torch.Tensor, torch.Tensor]], new_tokens: list[list[int]]
    ) -> torch.Tensor:
        """Start one row per history (from :meth:`export`, the weights unchanged since) with
        ``new_tokens`` appended: only the new tokens are run through the model, attending to
        their history's cached keys/values. Returns the next-token logits [R, V].

        Layout of the new prefixes [R, KV, Lh + Lo, D]: histories left-padded into the first
        ``Lh`` columns, new tokens right-padded into the last ``Lo``."""
        device = histories[0][0].device
        rows, d, inner = len(histories), self.head_dim, self.model.model
        h = torch.tensor([k.shape[2] for k, _ in histories], device=device)
        o = torch.tensor([len(t) for t in new_tokens], device=device)
        lh, lo = int(h.max()), int(o.max())
        shape = (len(self.layers), rows, self.kv_heads, lh + lo, d)
        keys = histories[0][0].new_zeros(shape)
        values = histories[0][0].new_zeros(shape)
        for r, (k, v) in enumerate(histories):
            keys[:, r, :, lh - k.shape[2] : lh] = k
            values[:, r, :, lh - k.shape[2] : lh] = v
        col = torch.arange(lh + lo, device=device)
        j = torch.arange(lo, device=device)
        real = ((col >= lh - h[:, None]) & (col < lh)) | ((col >= lh) & (col < lh + o[:, None]))
        causal = (col[None, :] < lh) | (col[None, :] - lh <= j[:, None])  # [Lo, Lh + Lo]
        attend = (real[:, None, :] & causal[None])[:, None]  # [R, 1, Lo, Lh + Lo]
        ids = torch.zeros((rows, lo), dtype=torch.long, device=device)
        for r, t in enumerate(new_tokens):
            ids[r, : len(t)] = torch.tensor(t, dtype=torch.long)
        hidden = inner.embed_tokens(ids).view(rows * lo, -1)
        query_pos = h[:, None] + j  # [R, Lo]
        rotary = self._rotaries(hidden, query_pos.view(-1))
        # each column's position: the history's from 0, then the new tokens' from h
        col_pos = torch.where(col < lh, col - (lh - h[:, None]), h[:, None] + col - lh)
        masks = self._windowed(attend, query_pos[:, :, None], col_pos)
        for i, w in enumerate(self.layers):
            q, k, v = (
                t.view(rows, lo, -1, d).transpose(1, 2)
                for t in self._qkv(self._norm(hidden, w.input_norm), w, *rotary[w.rope])
            )
            keys[i, :, :, lh:] = k
            values[i, :, :, lh:] = v
            attn = self._attention(q, keys[i], values[i], masks[w.window])
            out = attn.transpose(1, 2).reshape(rows * lo, self.heads * d)
            hidden = self._residual(hidden, out, w)
        logits = self._logits(hidden.view(rows, lo, -1)[torch.arange(rows, device=device), o - 1])
        self.prefix_k, self.prefix_v = list(keys.unbind(0)), list(values.unbind(0))
        bias = torch.zeros(real.shape, device=device).masked_fill_(~real, float("-inf"))
        rows_idx = torch.arange(rows, device=device)
        self._start_rows(bias, col_pos.clamp(min=0), rows_idx, h + o, keys.dtype)
        return logits

    def _open_slot(self) -> int:
        """Index of the slot for the next token, growing the buffer by ``block`` when full."""
        t = self.length
        if t == self.kv.shape[-2]:
            grown = self.kv.new_zeros((*self.kv.shape[:-2], t + self.block, self.kv.shape[-1]))
            grown[..., :t, :] = self.kv
            self.kv = grown
            pad = self.bias.new_full((*self.bias.shape[:-1], self.block), float("-inf"))
            self.bias = torch.cat([self.bias, pad], dim=-1)
            more = self.positions.new_zeros((self.positions.shape[0], self.block))
            self.positions = torch.cat([self.positions, more], dim=-1)
        self.bias[..., self.prompt_len + t] = 0.0
        self.positions[:, self.prompt_len + t] = self.next_pos
        self.length = t + 1
        return t

    def _place(self, row_prompt: torch.Tensor, n_prompts: int) -> None:
        """Place the rows (their prompts ``row_prompt`` [B]) in the grid of shared-prefix
        attention: each row a slot among its prompt's rows, in row order."""
        kv_heads = self.kv_heads
        of_prompt = F.one_hot(row_prompt, n_prompts)  # [B, P]
        slot = (of_prompt.cumsum(0) - 1).gather(1, row_prompt[:, None])[:, 0]
        self.group = int(of_prompt.sum(0).max())  # n: grid slots per prompt
        kv_index = torch.arange(kv_heads, device=row_prompt.device)
        flat = (row_prompt[:, None] * kv_heads + kv_index) * self.group + slot[:, None]
        self.grid_index = flat.view(-1)
        self.row_prompt = row_prompt

    def select(self, order: torch.Tensor) -> None:
        if order.numel() > self.kv.shape[2] or order.unique().numel() < order.numel():
            self._fork(order)
            return
        moved = (order != torch.arange(order.numel(), device=order.device)).nonzero()[:, 0]
        if moved.numel():  # rows that change place copy their generated keys/values only
            self.kv[:, :, moved] = self.kv[:, :, order[moved]]
        self.kv = self.kv[:, :, : order.numel()]
        self.bias, self.next_pos = self.bias[order], self.next_pos[order]
        self.positions = self.positions[order]
        self.row_prompt = self.row_prompt[order]
        self.grid_index = self.grid_index.view(-1, self.kv_heads)[order].view(-1)

    def _fork(self, order: torch.Tensor) -> None:
        """:meth:`select` with rows listed more than once: every row's generated keys/values,
        mask and positions copied to each of its places, the grid placed anew."""
        self.kv = self.kv[:, :, order]
        self.bias, self.next_pos = self.bias[order], self.next_pos[order]
        self.positions = self.positions[order]
        self._place(self.row_prompt[order], self.prefix_k[0].shape[0])

    def _norm(self, h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """RMSNorm as LlamaRMSNorm computes it: normalised in fp32, cast back, then scaled (the
        fused kernel accumulates a half-precision input in fp32); Gemma's: scaled by 1 + w in
        fp32, then cast back (Gemma2RMSNorm)."""
        if self.gemma:
            normed = F.rms_norm(h.float(), (h.shape[-1],), eps=self.eps)
            return (normed * (1.0 + weight.float())).to(h.dtype)
        return weight * F.rms_norm(h, (h.shape[-1],), eps=self.eps)

    def _rotaries(
        self, hidden: torch.Tensor, positions: torch.Tensor
    ) -> dict[str | None, tuple[torch.Tensor, torch.Tensor]]:
        """cos and signed sin [N, 1, D] of the model's rotary embedding at ``positions`` [N],
        for each layer type with its own (Gemma 3: local and global bases; else one, under
        None): rotate_half(x) * sin == roll(x, D/2) * [-sin_1, sin_2] (x = [x_1, x_2]), bit
        for bit."""
        out = {}
        for rope in {w.rope for w in self.layers}:
            args = (hidden, positions[None]) + ((rope,) if rope is not None else ())
            cos, sin = self.model.model.rotary_emb(*args)
            half = self.head_dim // 2
            sin = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
            out[rope] = (cos[0, :, None], sin[0, :, None])
        return out

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Next-token logits [N, V] of the last hidden states [N, hidden]: final norm, LM head,
        soft-capped where the model caps them (Gemma 2: cap * tanh(logits / cap))."""
        logits = self.linear(self._norm(hidden, self.model.model.norm.weight), *self.lm_head)
        if self.final_softcap is not None:
            logits = torch.tanh(logits / self.final_softcap) * self.final_softcap
        return logits

    def _qkv(
        self, x: torch.Tensor, w: _Layer, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries [N, H, D] and keys [N, KV, D] with the rotary embedding, values [N, KV, D],
        of the normalised hidden states ``x`` [N, hidden]."""
        n, heads, d = x.shape[0], self.heads, self.head_dim
        q = self.linear(x, *w.q).view(n, heads, d)
        k = self.linear(x, *w.k).view(n, self.kv_heads, d)
        if w.q_norm is not None:  # Qwen3, Gemma 3: each head's query and key normalised
            q, k = self._norm(q, w.q_norm), self._norm(k, w.k_norm)
        qk = torch.cat((q, k), dim=1)
        qk = qk * cos + qk.roll(d // 2, dims=-1) * sin
        return qk[:, :heads], qk[:, heads:], self.linear(x, *w.v).view(n, self.kv_heads, d)

    def _residual(self, hidden: torch.Tensor, out: torch.Tensor, w: _Layer) -> torch.Tensor:
        """The rest of layer ``w`` after attention: the attention output ``out`` [N, H * D]
        projected (and normalised, Gemma) onto the residual stream ``hidden`` [N, hidden], then
        the residual MLP block (its output normalised too in Gemma)."""
        attn = self.linear(out, *w.o)
        if w.attn_out_norm is not None:
            attn = self._norm(attn, w.attn_out_norm)
        hidden = hidden + attn
        x = self._norm(hidden, w.mlp_norm)
        down = self.linear(self.act(self.linear(x, *w.gate)) * self.linear(x, *w.up), *w.down)
        if w.mlp_out_norm is not None:
            down = self._norm(down, w.mlp_out_norm)
        return hidden + down

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        t = self._open_slot()
        b, heads, kv_heads, d = tokens.shape[0], self.heads, self.kv_heads, self.head_dim
        inner = self.model.model
        hidden = inner.embed_tokens(tokens)  # [B, hidden]
        rotary = self._rotaries(hidden, self.next_pos)
        biases = {  # a sliding window masks the keys too far back
            window: self.bias
            if window is None
            else self.bias.masked_fill(
                (self.next_pos[:, None] - self.positions >= window)[:, None, None], float("-inf")
            )
            for window in {w.window for w in self.layers}
        }
        self.next_pos = self.next_pos + 1
        for i, w in enumerate(self.layers):
            q, k, v = self._qkv(self._norm(hidden, w.input_norm), w, *rotary[w.rope])
            keys, values = self.kv[0, i], self.kv[1, i]  # [B, KV, S, D]
            keys[:, :, t] = k
            values[:, :, t] = v
            attn = shared_prefix_attention(
                q.view(b, kv_heads, heads // kv_heads, d),
                self.prefix_k[i],
                self.prefix_v[i],
                keys,
                values,
                biases[w.window],
                self.grid_index,
                self.group,
                self.scaling,
                self.softcap,
            )
            hidden = self._residual(hidden, attn.reshape(b, heads * d), w)
        return self._logits(hidden)
