"""One decoding step of a batch of samples: the forward pass behind :class:`TorchEngine`.

A decoder prefills the prompts of a chunk once, then appends one token per live sample and step,
and drops finished samples (compaction). Two implementations share this interface:

* :class:`LlamaDecoder`, for Llama-family models (Llama, Qwen2, Qwen3's per-head q/k norms,
  Mistral without a sliding window): a lean loop over the model's own
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
from transformers.models.llama.modeling_llama import LlamaForCausalLM
from transformers.models.mistral.modeling_mistral import MistralForCausalLM
from transformers.models.qwen2.modeling_qwen2 import Qwen2ForCausalLM
from transformers.models.qwen3.modeling_qwen3 import Qwen3ForCausalLM

from rlvr.adapters import MergedWeights, is_quantized
from rlvr.rollout.attention import shared_prefix_attention
from rlvr.rollout.linear import PackedLinear


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
        """Keep rows ``order`` [B'] (old row indices), in that order."""


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


@dataclass
class _Layer:
    """What a decode step reads of one decoder layer."""

    input_norm: torch.Tensor
    post_norm: torch.Tensor
    q: Projection
    k: Projection
    v: Projection
    o: Projection
    gate: Projection
    up: Projection
    down: Projection
    q_norm: torch.Tensor | None = None  # Qwen3: RMSNorm of each head's query and key [D]
    k_norm: torch.Tensor | None = None


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
    dtype: torch.dtype


class LlamaDecoder:
    """Lean decode steps for Llama-family models (see the module docstring).

    Cache layout (``P`` prompts, ``B`` live rows, ``KV`` key/value heads, head dim ``D``):

    * prompt keys/values of layer ``i``: ``self.prefix_k[i]``, ``self.prefix_v[i]`` [P, KV, Lp, D],
      written by the prefill, read by every sample of the prompt;
    * generated keys/values: ``self.kv`` [2, layers, B, KV, S, D], ``S`` slots grown by ``block``;
      slot ``t`` holds the key/value of the ``t``-th generated token of every row;
    * ``self.bias`` [B, 1, 1, Lp + S] float32 additive mask: 0 where a row attends, -inf at its
      prompt's left padding and at slots not written yet;
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
        self.eps = model.model.norm.variance_epsilon
        self.act = model.model.layers[0].mlp.act_fn
        head = model.lm_head.weight
        self.linear = PackedLinear(head.dtype, head.device)
        self.merged = MergedWeights()  # a LoRA model's projections: W + (alpha / r) B A
        self._prefilled: _Prefill | None = None  # the last prefill, reused for the same prompts

    ARCHITECTURES = (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM)

    @staticmethod
    def supports(model: PreTrainedModel) -> bool:
        """Llama, Qwen2, Qwen3 and Mistral causal LMs with full attention in every layer (no
        sliding window), weights not quantised (a QLoRA base runs through its own quantised
        layers: the lean decoder would need a dequantised copy, the memory QLoRA saves)."""
        if not isinstance(model, LlamaDecoder.ARCHITECTURES) or is_quantized(model):
            return False
        if isinstance(model, MistralForCausalLM) and model.config.sliding_window is not None:
            return False
        layer_types = getattr(model.config, "layer_types", None) or ["full_attention"]
        return all(t == "full_attention" for t in layer_types)

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
        self.layers = [
            _Layer(
                b.input_layernorm.weight,
                b.post_attention_layernorm.weight,
                *projections[7 * i : 7 * i + 7],
                *_head_norms(b.self_attn),
            )
            for i, b in enumerate(blocks)
        ]

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
            self._start_rows(kept.prompt_bias, row_prompt, mask.sum(-1)[row_prompt], kept.dtype)
            return kept.logits[row_prompt]
        self._read_weights()
        n_prompts, prompt_len = ids.shape
        heads, d, device = self.heads, self.head_dim, ids.device
        inner = self.model.model
        hidden = inner.embed_tokens(ids).view(n_prompts * prompt_len, -1)  # [P * Lp, hidden]
        cos, sin = self._rotary(hidden, (mask.cumsum(-1) - 1).clamp(min=0).view(-1))
        # causal over the prompt's own tokens; a padding query attends to itself (no empty row)
        causal = torch.ones((prompt_len, prompt_len), dtype=torch.bool, device=device).tril()
        diagonal = torch.eye(prompt_len, dtype=torch.bool, device=device)
        attend = ((causal & mask.bool()[:, None, :]) | diagonal)[:, None]  # [P, 1, Lp, Lp]
        self.prefix_k, self.prefix_v = [], []
        for w in self.layers:
            q, k, v = (
                t.view(n_prompts, prompt_len, -1, d).transpose(1, 2)  # [P, heads, Lp, D]
                for t in self._qkv(self._norm(hidden, w.input_norm), w, cos, sin)
            )
            self.prefix_k.append(k.contiguous())
            self.prefix_v.append(v.contiguous())
            attn = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attend, scale=self.scaling, enable_gqa=True
            )
            out = attn.transpose(1, 2).reshape(n_prompts * prompt_len, heads * d)
            hidden = self._mlp(hidden + self.linear(out, *w.o), w)
        last = hidden.view(n_prompts, prompt_len, -1)[:, -1]
        logits = self.linear(self._norm(last, inner.norm.weight), *self.lm_head)
        prompt_bias = torch.zeros((n_prompts, prompt_len), device=device)
        prompt_bias.masked_fill_(mask == 0, float("-inf"))
        self._start_rows(prompt_bias, row_prompt, mask.sum(-1)[row_prompt], hidden.dtype)
        self._prefilled = _Prefill(
            ids, mask, versions, self.prefix_k, self.prefix_v, logits, prompt_bias, hidden.dtype
        )
        return logits[row_prompt]

    def _start_rows(
        self,
        prompt_bias: torch.Tensor,
        row_prompt: torch.Tensor,
        next_pos: torch.Tensor,
        dtype: torch.dtype,
    ) -> None:
        """Start decoding rows over the prefixes in :attr:`prefix_k` / :attr:`prefix_v`:
        ``prompt_bias`` [P, Lp] (0 where a prefix column is real, -inf elsewhere), the prefix of
        each row ``row_prompt`` [B], the position of its next token ``next_pos`` [B]."""
        device = row_prompt.device
        n_prompts, prompt_len = prompt_bias.shape
        # rows: each prompt's samples, placed in the grid of shared-prefix attention
        rows, kv_heads = row_prompt.numel(), self.kv_heads
        counts = torch.bincount(row_prompt, minlength=n_prompts)
        self.group = int(counts.max())  # n: grid slots per prompt
        slot = torch.arange(rows, device=device) - (counts.cumsum(0) - counts)[row_prompt]
        kv_index = torch.arange(kv_heads, device=device)
        flat = (row_prompt[:, None] * kv_heads + kv_index) * self.group + slot[:, None]
        self.grid_index = flat.view(-1)
        self.row_prompt = row_prompt
        self.next_pos = next_pos  # [B] position of the next token
        shape = (2, len(self.layers), rows, kv_heads, self.block, self.head_dim)
        self.kv = torch.zeros(shape, dtype=dtype, device=device)
        slots_bias = torch.full((rows, self.block), float("-inf"), device=device)
        self.bias = torch.cat([prompt_bias[row_prompt], slots_bias], dim=1)[:, None, None, :]
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
        cos, sin = self._rotary(hidden, (h[:, None] + j).view(-1))
        for i, w in enumerate(self.layers):
            q, k, v = (
                t.view(rows, lo, -1, d).transpose(1, 2)
                for t in self._qkv(self._norm(hidden, w.input_norm), w, cos, sin)
            )
            keys[i, :, :, lh:] = k
            values[i, :, :, lh:] = v
            attn = F.scaled_dot_product_attention(
                q, keys[i], values[i], attn_mask=attend, scale=self.scaling, enable_gqa=True
            )
            out = attn.transpose(1, 2).reshape(rows * lo, self.heads * d)
            hidden = self._mlp(hidden + self.linear(out, *w.o), w)
        last = hidden.view(rows, lo, -1)[torch.arange(rows, device=device), o - 1]
        logits = self.linear(self._norm(last, inner.norm.weight), *self.lm_head)
        self.prefix_k, self.prefix_v = list(keys.unbind(0)), list(values.unbind(0))
        bias = torch.zeros(real.shape, device=device).masked_fill_(~real, float("-inf"))
        self._start_rows(bias, torch.arange(rows, device=device), h + o, keys.dtype)
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
        self.bias[..., self.prompt_len + t] = 0.0
        self.length = t + 1
        return t

    def select(self, order: torch.Tensor) -> None:
        moved = (order != torch.arange(order.numel(), device=order.device)).nonzero()[:, 0]
        if moved.numel():  # rows that change place copy their generated keys/values only
            self.kv[:, :, moved] = self.kv[:, :, order[moved]]
        self.kv = self.kv[:, :, : order.numel()]
        self.bias, self.next_pos = self.bias[order], self.next_pos[order]
        self.row_prompt = self.row_prompt[order]
        self.grid_index = self.grid_index.view(-1, self.kv_heads)[order].view(-1)

    def _norm(self, h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """RMSNorm as LlamaRMSNorm computes it: normalised in fp32, cast back, then scaled (the
        fused kernel accumulates a half-precision input in fp32)."""
        return weight * F.rms_norm(h, (h.shape[-1],), eps=self.eps)

    def _rotary(
        self, hidden: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin [N, 1, D] of the model's rotary embedding at ``positions`` [N]:
        rotate_half(x) * sin == roll(x, D/2) * [-sin_1, sin_2] (x = [x_1, x_2]), bit for bit."""
        cos, sin = self.model.model.rotary_emb(hidden, positions[None])
        half = self.head_dim // 2
        sin = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
        return cos[0, :, None], sin[0, :, None]

    def _qkv(
        self, x: torch.Tensor, w: _Layer, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries [N, H, D] and keys [N, KV, D] with the rotary embedding, values [N, KV, D],
        of the normalised hidden states ``x`` [N, hidden]."""
        n, heads, d = x.shape[0], self.heads, self.head_dim
        q = self.linear(x, *w.q).view(n, heads, d)
        k = self.linear(x, *w.k).view(n, self.kv_heads, d)
        if w.q_norm is not None:  # Qwen3: each head's query and key normalised
            q, k = self._norm(q, w.q_norm), self._norm(k, w.k_norm)
        qk = torch.cat((q, k), dim=1)
        qk = qk * cos + qk.roll(d // 2, dims=-1) * sin
        return qk[:, :heads], qk[:, heads:], self.linear(x, *w.v).view(n, self.kv_heads, d)

    def _mlp(self, hidden: torch.Tensor, w: _Layer) -> torch.Tensor:
        """The residual MLP block on hidden states [N, hidden]."""
        x = self._norm(hidden, w.post_norm)
        up = self.act(self.linear(x, *w.gate)) * self.linear(x, *w.up)
        return hidden + self.linear(up, *w.down)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        t = self._open_slot()
        b, heads, kv_heads, d = tokens.shape[0], self.heads, self.kv_heads, self.head_dim
        inner = self.model.model
        hidden = inner.embed_tokens(tokens)  # [B, hidden]
        cos, sin = self._rotary(hidden, self.next_pos)
        self.next_pos = self.next_pos + 1
        for i, w in enumerate(self.layers):
            q, k, v = self._qkv(self._norm(hidden, w.input_norm), w, cos, sin)
            keys, values = self.kv[0, i], self.kv[1, i]  # [B, KV, S, D]
            keys[:, :, t] = k
            values[:, :, t] = v
            attn = shared_prefix_attention(
                q.view(b, kv_heads, heads // kv_heads, d),
                self.prefix_k[i],
                self.prefix_v[i],
                keys,
                values,
                self.bias,
                self.grid_index,
                self.group,
                self.scaling,
            )
            hidden = self._mlp(hidden + self.linear(attn.reshape(b, heads * d), *w.o), w)
        return self.linear(self._norm(hidden, inner.norm.weight), *self.lm_head)
