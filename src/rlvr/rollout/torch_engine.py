"""A batched KV-cache sampler in plain PyTorch + transformers.

Per call: prompts are left-padded and prefilled once; the prompt KV cache is then repeated
for the ``n`` samples of each group (the prompt is encoded once per group, not ``n`` times);
decoding runs one token per step for all live samples, and finished samples leave the batch
(compaction), so late steps only pay for the samples still generating.

The engine keeps its own copy of the weights in the rollout dtype (bf16 on CPUs with native
bf16 support, see :func:`auto_dtype`); :meth:`TorchEngine.update_weights` copies the policy's
weights into it in memory after every optimiser step.
"""

from __future__ import annotations

import copy
import time

import torch
from transformers import PreTrainedModel

from rlvr.rollout import attention as decode_attention
from rlvr.rollout.base import Rollout, SamplingParams
from rlvr.rollout.sampling import sample_next, token_stats


def auto_dtype(device: torch.device | str = "cpu") -> torch.dtype:
    """bf16 where the hardware computes it natively (CUDA with bf16, CPUs with AVX512-BF16 or
    AMX), else fp32."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return torch.float32
    return torch.bfloat16 if ("avx512_bf16" in flags or "amx_bf16" in flags) else torch.float32


def left_pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, L] left-padded ids and the matching attention mask."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, width - len(s) :] = torch.tensor(s, dtype=torch.long)
        mask[i, width - len(s) :] = 1
    return ids, mask


class TorchEngine:
    """Rollout engine over a transformers causal LM (see module docstring).

    Args:
        policy: the trained model; its weights are copied (cast to ``dtype``) unless the dtype
            matches, in which case the engine shares the policy's parameters.
        pad_token_id: id used for left padding (masked out).
        dtype: rollout compute dtype.
        max_batch: most samples decoded at once; prompts are processed in chunks of
            ``max_batch // n`` so that memory stays bounded as n grows.
    """

    def __init__(
        self,
        policy: PreTrainedModel,
        pad_token_id: int,
        dtype: torch.dtype = torch.float32,
        max_batch: int = 256,
    ) -> None:
        self.dtype = dtype
        self.pad_token_id = pad_token_id
        self.max_batch = max_batch
        if next(policy.parameters()).dtype == dtype:
            self.model = policy
        else:
            self.model = copy.deepcopy(policy).to(dtype)
            self.model.requires_grad_(False)
        self.model.eval()
        self.model.set_attn_implementation(decode_attention.NAME)

    @torch.no_grad()
    def update_weights(self, policy: torch.nn.Module) -> None:
        """Copy the policy's weights into the engine's copy (no-op when shared)."""
        if self.model is policy:
            return
        own = dict(self.model.named_parameters())
        for name, param in policy.named_parameters():
            own[name].copy_(param)

    @torch.inference_mode()
    def generate(
        self,
        prompts: list[list[int]],
        n: int,
        sampling: SamplingParams,
        generator: torch.Generator | None = None,
    ) -> Rollout:
        """Sample ``n`` completions per prompt; see :class:`rlvr.rollout.base.Rollout`."""
        start = time.perf_counter()
        total = len(prompts) * n
        completions: list[list[int]] = []
        logprobs: list[list[float]] = []
        finished: list[bool] = []
        entropies: list[list[float]] = []
        certainties: list[list[float]] = []
        # Samples are decoded in chunks of at most max_batch (sample i belongs to prompt i // n):
        # memory stays flat as n grows (Infinite Sampling's micro sampling groups); a group
        # split across chunks has its prompt prefilled once per chunk.
        for lo in range(0, total, self.max_batch):
            owner = torch.arange(lo, min(total, lo + self.max_batch)) // n
            c, lp, f, ent, sc = self._generate_chunk(prompts, owner, sampling, generator)
            completions += c
            logprobs += lp
            finished += f
            entropies += ent
            certainties += sc
        seconds = time.perf_counter() - start
        tokens = sum(len(c) for c in completions)
        stats = {"rollout/seconds": seconds, "rollout/tokens_per_s": tokens / max(seconds, 1e-9)}
        return Rollout(prompts, completions, logprobs, finished, n, stats, entropies, certainties)

    def _generate_chunk(
        self,
        prompts: list[list[int]],
        owner: torch.Tensor,
        sampling: SamplingParams,
        generator: torch.Generator | None,
    ) -> tuple[
        list[list[int]], list[list[float]], list[bool], list[list[float]], list[list[float]]
    ]:
        """Decode one sample per entry of ``owner`` (its prompt index); returns token ids,
        log-probs, finished flags, and per-token entropy / self-certainty (empty lists unless
        ``sampling.token_stats``)."""
        device = next(self.model.parameters()).device
        used, row_prompt = torch.unique(owner, return_inverse=True)
        ids, mask = left_pad([prompts[i] for i in used.tolist()], self.pad_token_id)
        ids, mask = ids.to(device), mask.to(device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
        )
        # Each prompt is encoded once; its KV cache is shared by the samples it owns.
        cache = out.past_key_values
        row_prompt = row_prompt.to(device)
        cache.batch_select_indices(row_prompt)
        logits = out.logits[row_prompt, -1, :]
        mask = mask[row_prompt]
        next_pos = mask.sum(-1)  # [B] position of the next token
        total = logits.shape[0]
        live = list(range(total))  # original sample index of each batch row
        stop = torch.tensor(sorted(set(sampling.stop_token_ids)), dtype=torch.long, device=device)
        tokens_out: list[list[int]] = [[] for _ in range(total)]
        logps_out: list[list[float]] = [[] for _ in range(total)]
        done = [False] * total
        n_stats = total if sampling.token_stats else 0
        entropy_out: list[list[float]] = [[] for _ in range(n_stats)]
        certainty_out: list[list[float]] = [[] for _ in range(n_stats)]
        for step in range(sampling.max_new_tokens):
            tok, logp = sample_next(logits, sampling, generator)
            for row, (t, lp) in enumerate(zip(tok.tolist(), logp.tolist(), strict=True)):
                tokens_out[live[row]].append(t)
                logps_out[live[row]].append(lp)
            if sampling.token_stats:
                ent, sc = token_stats(logits)
                for row, (e, c) in enumerate(zip(ent.tolist(), sc.tolist(), strict=True)):
                    entropy_out[live[row]].append(e)
                    certainty_out[live[row]].append(c)
            hit = torch.isin(tok, stop) if stop.numel() else torch.zeros_like(tok, dtype=torch.bool)
            if step == sampling.max_new_tokens - 1:
                for row in hit.nonzero()[:, 0].tolist():
                    done[live[row]] = True
                break
            if hit.any():
                for row in hit.nonzero()[:, 0].tolist():
                    done[live[row]] = True
                keep = (~hit).nonzero()[:, 0]
                if keep.numel() == 0:
                    break
                cache.batch_select_indices(keep)  # compaction: finished samples leave the batch
                live = [live[row] for row in keep.tolist()]
                tok, mask, next_pos = tok[keep], mask[keep], next_pos[keep]
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
            out = self.model(
                input_ids=tok[:, None],
                attention_mask=mask,
                position_ids=next_pos[:, None],
                past_key_values=cache,
                use_cache=True,
            )
            logits = out.logits[:, -1, :]
            next_pos = next_pos + 1
        return tokens_out, logps_out, done, entropy_out, certainty_out
