"""Turn rollouts into training tensors and compute per-token log-probs of completions.

A training batch of ``N`` samples keeps each distinct prompt once (``P`` prompts, left-padded
to ``Lp``) and maps every sample to its prompt (``prompt_index``); completions are
right-padded to ``T``. Two forwards give the same log-probs and gradients:

* :func:`completion_logprobs` with ``shared_prefix=False`` (the plain padded forward): each
  sample is the sequence ``[pad.. prompt | completion ..pad]`` of width ``Lp + T``;
* ``shared_prefix=True`` (Prefix Grouper, Liu et al. 2025): each distinct prompt is encoded
  once, its key/value cache (with gradient) is gathered for the samples that share it, and
  only completion tokens are run through the model. A group of G samples of a prompt of length
  ``Lp`` then costs ``Lp + G*T`` token-passes instead of ``G*(Lp + T)``.

Only the logits that predict completion tokens are computed: with a 50k vocabulary they are
the expensive part of the output layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel

from rlvr.rollout.torch_engine import left_pad


@dataclass
class Batch:
    """Token tensors of ``N`` samples over ``P`` distinct prompts.

    Attributes:
        prompt_ids: [P, Lp] left-padded prompts.
        prompt_mask: [P, Lp] 1 on real prompt tokens.
        prompt_index: [N] long, the prompt row of each sample.
        completion_ids: [N, T] sampled tokens, right-padded.
        completion_mask: [N, T] 1 on completion tokens the loss sees.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    prompt_index: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor

    def select(self, rows: torch.Tensor) -> Batch:
        """The sub-batch of the given sample rows: only their prompts, trimmed to the widest
        prompt and completion among them."""
        used, index = torch.unique(self.prompt_index[rows], return_inverse=True)
        prompt_mask = self.prompt_mask[used]
        left = self.prompt_mask.shape[1] - int(prompt_mask.sum(-1).max())
        mask = self.completion_mask[rows]
        width = int(mask.sum(-1).max().clamp(min=1))
        return Batch(
            prompt_ids=self.prompt_ids[used, left:],
            prompt_mask=prompt_mask[:, left:],
            prompt_index=index,
            completion_ids=self.completion_ids[rows, :width],
            completion_mask=mask[:, :width],
        )

    @property
    def tokens(self) -> int:
        """Real tokens of the plain padded layout (prompt repeated per sample + completion)."""
        per_prompt = self.prompt_mask.sum(-1)[self.prompt_index]
        return int(per_prompt.sum() + self.completion_mask.sum())


def make_batch(
    prompts: list[list[int]],
    completions: list[list[int]],
    pad_id: int,
    prompt_index: list[int] | torch.Tensor | None = None,
) -> Batch:
    """Build a :class:`Batch` from unpadded token lists.

    Args:
        prompts: distinct prompts (P lists), or one per sample when ``prompt_index`` is None.
        completions: N lists of completion tokens.
        prompt_index: the prompt of each completion (default: ``i``).
    """
    n = len(completions)
    index = torch.as_tensor(range(n) if prompt_index is None else prompt_index, dtype=torch.long)
    if index.shape != (n,) or int(index.max()) >= len(prompts):
        raise ValueError(f"prompt_index must map {n} completions to {len(prompts)} prompts")
    prompt_ids, prompt_mask = left_pad(prompts, pad_id)
    t = max(1, max(len(c) for c in completions))
    completion_ids = torch.full((n, t), pad_id, dtype=torch.long)
    completion_mask = torch.zeros((n, t), dtype=torch.long)
    for i, c in enumerate(completions):
        if c:
            completion_ids[i, : len(c)] = torch.tensor(c, dtype=torch.long)
            completion_mask[i, : len(c)] = 1
    return Batch(prompt_ids, prompt_mask, index, completion_ids, completion_mask)


def _token_logprobs(
    logits: torch.Tensor, batch: Batch, temperature: float, with_entropy: bool, entropy_grad: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log pi(y_t) [N, T] from logits [N, T, V] that predict the completion tokens."""
    logits = logits.float() / temperature
    logz = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, batch.completion_ids[..., None])[..., 0] - logz
    logp = logp * batch.completion_mask
    entropy = None
    if with_entropy or entropy_grad:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = logz - (torch.softmax(logits, dim=-1) * logits).sum(-1)  # H = log Z - E[z]
    return logp, entropy


class ValueHead(torch.nn.Module):
    """PPO's critic on the policy's last hidden state: V(s_t) = w . h_t + b (Ouyang et al. 2022,
    one scalar per position, zero-initialised so the first advantages are the returns)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.linear.weight)
        torch.nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[N, T, H] hidden states -> [N, T] values (fp32, also under autocast)."""
        with torch.autocast(hidden.device.type, enabled=False):
            return self.linear(hidden.float()).squeeze(-1)


def completion_logprobs(
    model: PreTrainedModel,
    batch: Batch,
    temperature: float = 1.0,
    with_entropy: bool = False,
    shared_prefix: bool = False,
    entropy_grad: bool = False,
    value_head: ValueHead | None = None,
) -> (
    tuple[torch.Tensor, torch.Tensor | None]
    | tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]
):
    """Per-token log-probs of the completion tokens under ``model`` at ``temperature``.

    Returns:
        logp [N, T] (fp32; zero where the completion mask is 0), and the per-token entropy of
        the temperature-scaled distribution [N, T] when ``with_entropy`` (without gradient) or
        ``entropy_grad`` (with gradient, for an entropy bonus); with a ``value_head``, also the
        values [N, T] of the states that predict each completion token.
    """
    forward = _shared_prefix_forward if shared_prefix else _padded_forward
    logits, hidden = forward(model, batch, value_head is not None)
    logp, entropy = _token_logprobs(logits, batch, temperature, with_entropy, entropy_grad)
    if value_head is None:
        return logp, entropy
    return logp, entropy, value_head(hidden) * batch.completion_mask


def _padded_forward(
    model: PreTrainedModel, batch: Batch, hidden: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The plain forward: every sample carries its own copy of its prompt."""
    t = batch.completion_ids.shape[1]
    idx = batch.prompt_index
    input_ids = torch.cat([batch.prompt_ids[idx], batch.completion_ids], dim=1)
    attention = torch.cat([batch.prompt_mask[idx], batch.completion_mask], dim=1)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    out = model(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=positions,
        use_cache=False,
        logits_to_keep=t + 1,
        output_hidden_states=hidden,
    )
    states = out.hidden_states[-1][:, -(t + 1) : -1] if hidden else None
    return out.logits[:, :-1, :], states  # position k predicts token k+1


def _shared_prefix_forward(
    model: PreTrainedModel, batch: Batch, hidden: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Prefix Grouper: encode each distinct prompt once, attend to its KV from every sample."""
    idx = batch.prompt_index
    prompt_pos = (batch.prompt_mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    prefix = model(
        input_ids=batch.prompt_ids,
        attention_mask=batch.prompt_mask,
        position_ids=prompt_pos,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
        output_hidden_states=hidden,
    )
    cache.batch_select_indices(idx)  # gather (with gradient) each sample's prompt KV
    t = batch.completion_ids.shape[1]
    start = batch.prompt_mask.sum(-1)[idx]  # position of the first completion token
    positions = start[:, None] + torch.arange(t, device=start.device)[None, :]
    attention = torch.cat([batch.prompt_mask[idx], batch.completion_mask], dim=1)
    out = model(
        input_ids=batch.completion_ids,
        attention_mask=attention,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=t,
        output_hidden_states=hidden,
    )
    first = prefix.logits[idx, -1:, :]  # the prompt's last position predicts token 0
    logits = torch.cat([first, out.logits[:, :-1, :]], dim=1)
    if not hidden:
        return logits, None
    states = torch.cat([prefix.hidden_states[-1][idx, -1:], out.hidden_states[-1][:, :-1]], 1)
    return logits, states
