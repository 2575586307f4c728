"""Turn rollouts into training tensors and compute per-token log-probs of completions.

A training batch of ``N`` samples keeps each distinct prompt once (``P`` prompts, left-padded
to ``Lp``) and maps every sample to its prompt (``prompt_index``); completions are
right-padded to ``T``. Two forwards give the same log-probs and gradients:

* :func:`completion_logprobs` with ``shared_prefix=False`` (the plain padded forward): each
  sample is the sequence ``[pad.. prompt | completion ..pad]`` of width ``Lp + T``;
* ``shared_prefix=True`` (Prefix Grouper, Liu et al. 2025, with packing): each distinct prompt
  is encoded once and the completions that share it are packed back to back into rows as wide
  as the longest completion, which attend to the prompt's key/value cache (with gradient)
  under a block mask. A group of G samples of lengths ``T_i`` of a prompt of length ``Lp`` then
  costs about ``Lp + sum_i T_i`` token-passes instead of ``G*(Lp + max_i T_i)``.

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
    logits: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    with_entropy: bool,
    entropy_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log pi(y_k) [K] from logits [K, V] that predict the K completion tokens ``targets``."""
    logits = logits.float() / temperature
    logz = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, targets[:, None])[:, 0] - logz
    entropy = None
    if with_entropy or entropy_grad:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = logz - (torch.softmax(logits, dim=-1) * logits).sum(-1)  # H = log Z - E[z]
    return logp, entropy


def _unflatten(flat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Scatter [K] values of the K real tokens back to the padded [N, T] layout (0 elsewhere)."""
    out = flat.new_zeros(mask.shape)
    out[mask.bool()] = flat
    return out


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
    forward = _grouped_forward if shared_prefix else _padded_forward
    logits, hidden = forward(model, batch, value_head is not None)  # [K, V], [K, H]
    mask = batch.completion_mask
    targets = batch.completion_ids[mask.bool()]
    logp, entropy = _token_logprobs(logits, targets, temperature, with_entropy, entropy_grad)
    logp = _unflatten(logp, mask)
    entropy = _unflatten(entropy, mask) if entropy is not None else None
    if value_head is None:
        return logp, entropy
    return logp, entropy, _unflatten(value_head(hidden), mask)


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
    real = batch.completion_mask.bool()
    states = out.hidden_states[-1][:, -(t + 1) : -1][real] if hidden else None
    return out.logits[:, :-1, :][real], states  # position k predicts token k+1


def pack_rows(prompt_index: list[int], lengths: list[int]) -> list[tuple[int, list[int]]]:
    """Bin-pack completions into rows as wide as the longest one, a row per prompt's samples.

    First-fit decreasing per prompt (samples of one prompt only share a row, so a row attends
    to one prompt). Returns ``[(prompt, [sample, ...]), ...]``; samples keep ascending order
    within a row. Rows of capacity ``max(lengths)`` keep attention per row as cheap as in the
    per-sample layout while removing most padding.
    """
    width = max(lengths, default=0)
    rows: list[tuple[int, list[int], int]] = []  # (prompt, samples, used)
    order = sorted(range(len(lengths)), key=lambda i: (prompt_index[i], -lengths[i], i))
    for i in order:
        for r, (j, members, used) in enumerate(rows):
            if j == prompt_index[i] and used + lengths[i] <= width:
                rows[r] = (j, members + [i], used + lengths[i])
                break
        else:
            rows.append((prompt_index[i], [i], lengths[i]))
    return [(j, sorted(members)) for j, members, _ in rows]


def _grouped_forward(
    model: PreTrainedModel, batch: Batch, hidden: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Prefix Grouper (Liu et al. 2025) with packing: each distinct prompt is encoded once, and
    its samples' completions are packed back to back into rows (:func:`pack_rows`) that attend
    to the prompt's key/value cache (with gradient, gathered per row).

    A block mask lets each completion token attend to its row's prompt and causally to its own
    completion only, with positions continuing from the prompt, so every token sees exactly
    what it sees in the plain forward. Rows are as wide as the longest completion, so attention
    costs what the per-sample layout costs per row, and most padding is gone.

    Returns logits [K, V] (and last hidden states [K, H]) predicting the K real completion
    tokens, in the row-major order of ``batch.completion_mask``.
    """
    lp = batch.prompt_ids.shape[1]
    lengths = batch.completion_mask.sum(-1).tolist()
    rows = pack_rows(batch.prompt_index.tolist(), lengths)
    row_prompt = torch.tensor([j for j, _ in rows], dtype=torch.long)
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
    cache.batch_select_indices(row_prompt)  # gather (with gradient) each row's prompt KV
    n_rows, width = len(rows), max(1, max(lengths))
    ids = torch.zeros((n_rows, width), dtype=torch.long)
    owner = torch.full((n_rows, width), -1, dtype=torch.long)  # sample of each slot
    positions = torch.zeros((n_rows, width), dtype=torch.long)
    prompt_len = batch.prompt_mask.sum(-1).tolist()
    slot = [0] * len(lengths)  # flat slot of each sample's first token
    for r, (j, members) in enumerate(rows):
        o = 0
        for i in members:
            length = lengths[i]
            ids[r, o : o + length] = batch.completion_ids[i, :length]
            owner[r, o : o + length] = i
            positions[r, o : o + length] = prompt_len[j] + torch.arange(length)
            slot[i] = r * width + o
            o += length
    # where the logits predicting each real token are (flat order): token 0 <- the prompt's
    # last position (row j of the prefix logits); token t <- slot + t - 1 of the packed rows
    n_prompts = batch.prompt_ids.shape[0]
    source = []
    for i, length in enumerate(lengths):
        if length:
            j = int(batch.prompt_index[i])
            source += [j] + [n_prompts + slot[i] + t for t in range(length - 1)]
    # [rows, 1, width, Lp + width], True = attend: every slot sees its row's real prompt tokens
    # (so padding slots attend to something and stay finite) and its own completion causally
    same = (owner[:, :, None] == owner[:, None, :]) & (owner[:, :, None] >= 0)
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    see_prompt = batch.prompt_mask.bool()[row_prompt][:, None, :].expand(n_rows, width, lp)
    mask = torch.cat([see_prompt, same & causal], dim=-1)[:, None]
    out = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
        output_hidden_states=hidden,
    )
    index = torch.tensor(source, dtype=torch.long)
    vocab = out.logits.shape[-1]
    logits = torch.cat([prefix.logits[:, -1], out.logits.reshape(-1, vocab)])[index]
    if not hidden:
        return logits, None
    size = out.hidden_states[-1].shape[-1]
    states = torch.cat([prefix.hidden_states[-1][:, -1], out.hidden_states[-1].reshape(-1, size)])
    return logits, states[index]
