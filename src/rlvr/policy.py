"""Turn rollouts into training tensors and compute per-token log-probs of completions.

Layout of a training batch (``N`` samples): the prompt of each sample is left-padded to ``Lp``,
its completion right-padded to ``T``, so the sequence is ``[pad.. prompt | completion ..pad]``
of width ``Lp + T`` and every completion occupies the same columns ``Lp .. Lp+T-1``. Only the
logits that predict completion tokens are computed (``logits_to_keep``), the expensive part
of a vocabulary of 50k.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel


@dataclass
class Batch:
    """Token tensors of ``N`` samples; rows are samples.

    Attributes:
        input_ids: [N, Lp + T] prompt (left-padded) then completion (right-padded).
        attention_mask: [N, Lp + T] 1 on real tokens.
        position_ids: [N, Lp + T] positions counting real tokens only.
        completion_ids: [N, T] the sampled tokens.
        completion_mask: [N, T] 1 on completion tokens the loss sees.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor

    def select(self, rows: torch.Tensor) -> Batch:
        """The sub-batch of the given rows, trimmed to its own widest prompt and completion."""
        mask = self.completion_mask[rows]
        prompt_mask = self.attention_mask[rows, : self.prompt_width]
        width = int(mask.sum(-1).max().clamp(min=1))
        left = self.prompt_width - int(prompt_mask.sum(-1).max())
        cols = slice(left, self.prompt_width + width)
        return Batch(
            input_ids=self.input_ids[rows, cols],
            attention_mask=self.attention_mask[rows, cols],
            position_ids=self.position_ids[rows, cols],
            completion_ids=self.completion_ids[rows, :width],
            completion_mask=mask[:, :width],
        )

    @property
    def prompt_width(self) -> int:
        return self.input_ids.shape[1] - self.completion_ids.shape[1]


def make_batch(prompts: list[list[int]], completions: list[list[int]], pad_id: int) -> Batch:
    """Build a :class:`Batch` from unpadded prompt and completion token lists (one per sample)."""
    n = len(completions)
    lp = max(len(p) for p in prompts)
    t = max(1, max(len(c) for c in completions))
    input_ids = torch.full((n, lp + t), pad_id, dtype=torch.long)
    attention = torch.zeros((n, lp + t), dtype=torch.long)
    comp_mask = torch.zeros((n, t), dtype=torch.long)
    for i, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        input_ids[i, lp - len(p) : lp] = torch.tensor(p)
        attention[i, lp - len(p) : lp] = 1
        if c:
            input_ids[i, lp : lp + len(c)] = torch.tensor(c)
            attention[i, lp : lp + len(c)] = 1
            comp_mask[i, : len(c)] = 1
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    return Batch(input_ids, attention, positions, input_ids[:, lp:].clone(), comp_mask)


def completion_logprobs(
    model: PreTrainedModel,
    batch: Batch,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs of the completion tokens under ``model`` at ``temperature``.

    Returns:
        logp [N, T] (fp32; zero where the completion mask is 0), and the per-token entropy of
        the temperature-scaled distribution [N, T] (no gradient) when ``with_entropy``.
    """
    t = batch.completion_ids.shape[1]
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        use_cache=False,
        logits_to_keep=t + 1,
    )
    logits = out.logits[:, :-1, :].float() / temperature  # position k predicts token k+1
    logz = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, batch.completion_ids[..., None])[..., 0] - logz
    logp = logp * batch.completion_mask
    entropy = None
    if with_entropy:
        with torch.no_grad():
            probs = torch.softmax(logits, dim=-1)
            entropy = logz - (probs * logits).sum(-1)
    return logp, entropy
