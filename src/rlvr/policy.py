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

* ``tree=True`` (the tree forward, :func:`_tree_forward`): the completions of a prompt are
  merged into a prefix trie, so tokens they share from their start (the shared segments of
  tree rollouts) run once, under a tree attention mask.

* ``packed=True`` (sequence packing): each sample's whole sequence, prompt and completion
  without padding, is packed back to back into rows as wide as the longest sequence, under a
  block-diagonal causal mask with positions restarting at each sequence: for batches whose
  prompts are not shared (SFT on demonstrations), where it removes the padding of the plain
  forward.

Only the logits that predict completion tokens are computed: with a 50k vocabulary they are
the expensive part of the output layer. With ``chunk_tokens`` they are not even all in memory at
once: the output layer and the log-softmax run a chunk of tokens at a time, each chunk
checkpointed so that its logits are recomputed in the backward pass instead of kept.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields

import torch
from torch.utils.checkpoint import checkpoint
from transformers import Cache, PreTrainedModel
from transformers.cache_utils import DynamicLayer
from transformers.modeling_layers import GradientCheckpointingLayer

from rlvr.algorithms.lp_reg import min_p_proxy_logprobs
from rlvr.config import ConfigError
from rlvr.rollout.torch_engine import left_pad


@dataclass
class Batch:
    """Token tensors of ``N`` samples over ``P`` distinct prompts.

    Attributes:
        prompt_ids: [P, Lp] left-padded prompts.
        prompt_mask: [P, Lp] 1 on real prompt tokens.
        prompt_index: [N] long, the prompt row of each sample.
        completion_ids: [N, T] sampled tokens, right-padded.
        completion_mask: [N, T] 1 on completion tokens (0 on right padding).
        action_mask: [N, T] 1 on completion tokens the loss sees: the sampled ones (an agent
            episode's observation tokens are completion tokens but not actions).
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    prompt_index: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    action_mask: torch.Tensor

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
            action_mask=self.action_mask[rows, :width],
        )

    def to(self, device: torch.device | str) -> Batch:
        """The same batch with every tensor on ``device``."""
        return Batch(*(getattr(self, f.name).to(device) for f in fields(self)))

    @property
    def tokens(self) -> int:
        """Real tokens of the plain padded layout (prompt repeated per sample + completion)."""
        per_prompt = self.prompt_mask.sum(-1)[self.prompt_index]
        return int(per_prompt.sum() + self.completion_mask.sum())


def enable_gradient_checkpointing(model: PreTrainedModel) -> None:
    """Recompute each decoder layer's activations in the backward pass (non-reentrant), with
    the API of the installed transformers (``activation_checkpointing_enable`` from 5.2x,
    ``gradient_checkpointing_enable`` before)."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def make_batch(
    prompts: list[list[int]],
    completions: list[list[int]],
    pad_id: int,
    prompt_index: list[int] | torch.Tensor | None = None,
    action_masks: list[list[int]] | None = None,
) -> Batch:
    """Build a :class:`Batch` from unpadded token lists.

    Args:
        prompts: distinct prompts (P lists), or one per sample when ``prompt_index`` is None.
        completions: N lists of completion tokens.
        prompt_index: the prompt of each completion (default: ``i``).
        action_masks: N lists (as long as the completions) of 1 on sampled tokens (default:
            every completion token).
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
    action_mask = completion_mask
    if action_masks is not None:
        action_mask = torch.zeros((n, t), dtype=torch.long)
        for i, (c, m) in enumerate(zip(completions, action_masks, strict=True)):
            if len(m) != len(c):
                raise ValueError(f"sample {i}: action mask of {len(m)} for {len(c)} tokens")
            action_mask[i, : len(m)] = torch.tensor(m, dtype=torch.long)
    return Batch(prompt_ids, prompt_mask, index, completion_ids, completion_mask, action_mask)


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


def _chunked_token_logprobs(
    output: torch.nn.Module,
    states: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    with_entropy: bool,
    entropy_grad: bool,
    chunk: int,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`_token_logprobs` of the logits ``output(states)`` [K, V], ``chunk`` rows at a time.

    Only one chunk's [chunk, V] logits exist at once. With gradient, each chunk runs under
    ``torch.utils.checkpoint`` (non-reentrant): the forward keeps only its inputs (the [chunk, H]
    states) and the backward recomputes its logits, so the output layer's activation memory is
    O(chunk * V) instead of O(K * V), for one more output-layer matmul per token.
    """

    def piece(h: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        return _token_logprobs(output(h), y, temperature, with_entropy, entropy_grad)

    parts = []
    for lo in range(0, max(1, states.shape[0]), chunk):  # K = 0 still yields empty outputs
        h, y = states[lo : lo + chunk], targets[lo : lo + chunk]
        grad = torch.is_grad_enabled()
        parts.append(checkpoint(piece, h, y, use_reentrant=False) if grad else piece(h, y))
    logp = torch.cat([p[0] for p in parts])
    entropy = torch.cat([p[1] for p in parts]) if parts[0][1] is not None else None
    return logp, entropy


# Config settings with which a transformers 5.x ``*ForCausalLM`` transforms the output layer's
# input or output (found by reading every ``*ForCausalLM.forward`` of transformers 5.23), and the
# value that means "no transform". A model with another value is rejected by chunking, whose
# logits are exactly ``get_output_embeddings()(last_hidden_state)``.
_LOGIT_SETTINGS: dict[str, float | None] = {
    "final_logit_softcapping": None,  # Gemma 2/3/3n/4, VaultGemma, NanoChat: c * tanh(z / c)
    "logits_soft_cap": None,  # RecurrentGemma: c * tanh(z / c)
    "logit_scale": 1.0,  # Cohere, Cohere2: z * s
    "logits_scaling": 1.0,  # Granite: z / s; HyperCLOVAX: z * s; MiniCPM3: W (h / s)
    "lm_head_multiplier": 1.0,  # FalconH1: z * m
    "logits_mup_width_multiplier": 1.0,  # Inkling: W (h / m)
    "unpadded_vocab_size": None,  # Inkling: z[..., :n]
}


def _check_plain_output_layer(model: torch.nn.Module) -> None:
    """Raise a :class:`ConfigError` (a ValueError) unless ``model``'s logits are
    ``output(base_model(...))`` exactly: its children are only the base model and the output
    layer, and no setting of :data:`_LOGIT_SETTINGS` transforms them."""
    inner = getattr(model, "_orig_mod", model)  # a torch.compile'd model wraps the original
    base, output = inner.base_model, inner.get_output_embeddings()
    children = {id(m) for m in inner.children()}
    if base is inner or output is None or children != {id(base), id(output)}:
        raise ConfigError(
            f"train.logprob_chunk_tokens > 0 needs a model made of a base model and an output "
            f"layer only; {type(inner).__name__} has {[n for n, _ in inner.named_children()]}. "
            "Set train.logprob_chunk_tokens: 0 for this model."
        )
    config = inner.config.get_text_config()
    for name, neutral in _LOGIT_SETTINGS.items():
        value = getattr(config, name, neutral)
        if value is not None and value != neutral:
            raise ConfigError(
                f"train.logprob_chunk_tokens > 0 computes the logits as the output layer of the "
                f"last hidden state, but this model's config sets {name}={value!r}, which "
                "transforms them. Set train.logprob_chunk_tokens: 0 for this model."
            )


def _unflatten(flat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Scatter [K] values of the K real tokens back to the padded [N, T] layout (0 elsewhere)."""
    out = flat.new_zeros(mask.shape)
    out[mask.bool()] = flat
    return out


def take_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``x[index]`` along dim 0 (``index`` [K] long, repeats allowed) with a backward that sums
    a repeated row's gradients in a fixed order on each device: on a CPU ``index_select``
    (its backward ``index_add_`` adds in index order, where advanced indexing's ``index_put_``
    accumulates from several threads in any order), on CUDA advanced indexing (whose
    accumulation sorts the indices, where ``index_add_`` uses atomics)."""
    return x.index_select(0, index) if x.device.type == "cpu" else x[index]


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
    chunk_tokens: int = 0,
    packed: bool = False,
    tree: bool = False,
) -> (
    tuple[torch.Tensor, torch.Tensor | None]
    | tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]
):
    """Per-token log-probs of the completion tokens under ``model`` at ``temperature``.

    Args:
        chunk_tokens: when > 0, the [K, V] logits of the K completion tokens are never all in
            memory: the base model gives the final hidden states [K, H] and the output layer and
            log-softmax run ``chunk_tokens`` tokens at a time (checkpointed when gradients are
            on, see :func:`_chunked_token_logprobs`). Same values and gradients as 0 (all at
            once) up to fp32 rounding; a :class:`ConfigError` for models whose logits are not
            the output layer of the last hidden state (logit soft-capping or scaling, see
            :data:`_LOGIT_SETTINGS`).
        packed: sequence packing (:func:`_packed_forward`); ``shared_prefix`` and ``tree`` are
            then unused.
        tree: the tree forward (:func:`_tree_forward`): the completions of a prompt that share
            their first tokens (the leaves of tree rollouts) run those tokens once;
            ``shared_prefix`` is then unused.

    Returns:
        logp [N, T] (fp32; zero where the completion mask is 0), and the per-token entropy of
        the temperature-scaled distribution [N, T] when ``with_entropy`` (without gradient) or
        ``entropy_grad`` (with gradient, for an entropy bonus); with a ``value_head``, also the
        values [N, T] of the states that predict each completion token.
    """
    if chunk_tokens < 0:
        raise ValueError(f"chunk_tokens must be >= 0 (0: all at once), got {chunk_tokens}")
    if chunk_tokens:
        _check_plain_output_layer(model)
    mask = batch.completion_mask
    targets = batch.completion_ids[mask.bool()]
    want = value_head is not None
    expand = None  # the tree forward's logits are per trie node: token k is node expand[k]
    if packed:
        logits, states = _packed_forward(model, batch, want, chunk_tokens > 0)  # [K,V], [K,H]
    elif tree:
        logits, states, expand = _tree_forward(model, batch, want, chunk_tokens > 0)
        nodes = (states if logits is None else logits).shape[0]
        targets = targets.new_zeros(nodes).index_put_((expand,), targets)  # a node's token
    else:
        forward = _grouped_forward if shared_prefix else _padded_forward
        logits, states = forward(model, batch, want, chunk_tokens > 0)
    if chunk_tokens:
        output = model.get_output_embeddings()
        args = (temperature, with_entropy, entropy_grad, chunk_tokens)
        logp, entropy = _chunked_token_logprobs(output, states, targets, *args)
    else:
        logp, entropy = _token_logprobs(logits, targets, temperature, with_entropy, entropy_grad)
    values = value_head(states) if value_head is not None else None
    if expand is not None:  # back from nodes to tokens (the backward sums over a node's tokens)
        logp = take_rows(logp, expand)
        entropy = take_rows(entropy, expand) if entropy is not None else None
        values = take_rows(values, expand) if values is not None else None
    logp = _unflatten(logp, mask)
    entropy = _unflatten(entropy, mask) if entropy is not None else None
    if values is None:
        return logp, entropy
    return logp, entropy, _unflatten(values, mask)


@torch.no_grad()
def min_p_logprobs(
    model: PreTrainedModel,
    batch: Batch,
    temperature: float,
    kappa: float,
    shared_prefix: bool = False,
    chunk_tokens: int = 0,
) -> torch.Tensor:
    """Lp-Reg's proxy log-probs [N, T] of the completion tokens: ``model``'s temperature-scaled
    distribution filtered by min-p at ``kappa`` and renormalised
    (:func:`rlvr.algorithms.min_p_proxy_logprobs`), -inf where a token was filtered, 0 on
    padding. No gradient; the plain (or, with ``shared_prefix``, the grouped) forward. With
    ``chunk_tokens`` > 0 the [K, V] logits are never all in memory: the output layer runs on the
    last hidden states ``chunk_tokens`` tokens at a time, as in :func:`completion_logprobs`."""
    if chunk_tokens < 0:
        raise ValueError(f"chunk_tokens must be >= 0 (0: all at once), got {chunk_tokens}")
    if chunk_tokens:
        _check_plain_output_layer(model)
    mask = batch.completion_mask
    targets = batch.completion_ids[mask.bool()]
    forward = _grouped_forward if shared_prefix else _padded_forward
    logits, states = forward(model, batch, False, chunk_tokens > 0)  # [K, V] or [K, H]
    if not chunk_tokens:
        assert logits is not None
        return _unflatten(min_p_proxy_logprobs(logits, targets, kappa, temperature), mask)
    assert states is not None
    output = model.get_output_embeddings()
    parts = [
        min_p_proxy_logprobs(output(states[i : i + chunk_tokens]), part, kappa, temperature)
        for i, part in zip(
            range(0, len(targets), chunk_tokens), targets.split(chunk_tokens), strict=True
        )
    ]
    flat = torch.cat(parts) if parts else targets.new_zeros(0, dtype=torch.float32)
    return _unflatten(flat, mask)


def _sharded(model: torch.nn.Module) -> bool:
    """Whether ``model`` is sharded (FSDP2: only then is its module imported)."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    return fsdp is not None and isinstance(model, fsdp.FSDPModule)


def _run(
    model: PreTrainedModel, logits: bool, hidden: bool, logits_to_keep: int = 0, **inputs
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """One forward on ``inputs``: the logits [B, L', V] of the last ``logits_to_keep`` positions
    (0: all) when ``logits``, and the last hidden states [B, L, H] when ``hidden``. Without
    ``logits`` only the base model runs (no output layer); a sharded model runs whole (its
    root unit gathers the embeddings and output layer), keeping the logits of one position."""
    if not logits and _sharded(model):
        out = model(**inputs, logits_to_keep=1, output_hidden_states=True)
        return None, out.hidden_states[-1]
    if not logits:
        return None, model.base_model(**inputs).last_hidden_state
    out = model(**inputs, logits_to_keep=logits_to_keep, output_hidden_states=hidden)
    return out.logits, out.hidden_states[-1] if hidden else None


def _padded_forward(
    model: PreTrainedModel, batch: Batch, hidden: bool, chunked: bool
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The plain forward: every sample carries its own copy of its prompt.

    Returns the logits [K, V] predicting the K real completion tokens (None when ``chunked``)
    and their last hidden states [K, H] (when ``hidden`` or ``chunked``).
    """
    t = batch.completion_ids.shape[1]
    idx = batch.prompt_index
    input_ids = torch.cat([batch.prompt_ids[idx], batch.completion_ids], dim=1)
    attention = torch.cat([batch.prompt_mask[idx], batch.completion_mask], dim=1)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    logits, states = _run(
        model,
        not chunked,
        hidden or chunked,
        logits_to_keep=t + 1,
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=positions,
        use_cache=False,
    )
    real = batch.completion_mask.bool()

    def take(x: torch.Tensor | None) -> torch.Tensor | None:
        return None if x is None else x[:, -(t + 1) : -1][real]  # position k predicts token k+1

    return take(logits), take(states)


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


def _packed_forward(
    model: PreTrainedModel, batch: Batch, hidden: bool, chunked: bool
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Sequence packing: every sample's sequence (its prompt's real tokens, then its completion)
    packed back to back into rows as wide as the longest sequence (first-fit decreasing,
    :func:`pack_rows` with one bin for all), each token attending causally to its own sequence
    only, with positions from 0 at each sequence's start: the logits of every token are those of
    the plain forward.

    Returns the logits [K, V] (None when ``chunked``) and last hidden states [K, H] (when
    ``hidden`` or ``chunked``) predicting the K real completion tokens, in the row-major order of
    ``batch.completion_mask``.
    """
    device = batch.prompt_ids.device
    lp = batch.prompt_ids.shape[1]
    prompt_len = batch.prompt_mask.sum(-1).tolist()
    index = batch.prompt_index.tolist()
    completion_len = batch.completion_mask.sum(-1).tolist()
    lengths = [prompt_len[j] + t for j, t in zip(index, completion_len, strict=True)]
    rows = pack_rows([0] * len(lengths), lengths)
    width = max(1, max(lengths))
    prompt_ids, completion_ids = batch.prompt_ids.cpu(), batch.completion_ids.cpu()
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    owner = torch.full((len(rows), width), -1, dtype=torch.long)
    positions = torch.zeros((len(rows), width), dtype=torch.long)
    source = []  # flat slot of the state predicting each real completion token, in order
    start = [0] * len(lengths)
    for r, (_, members) in enumerate(rows):
        o = 0
        for i in members:
            j, n_prompt, length = index[i], prompt_len[index[i]], lengths[i]
            ids[r, o : o + n_prompt] = prompt_ids[j, lp - n_prompt :]
            ids[r, o + n_prompt : o + length] = completion_ids[i, : length - n_prompt]
            owner[r, o : o + length] = i
            positions[r, o : o + length] = torch.arange(length)
            start[i] = r * width + o
            o += length
    for i, t in enumerate(completion_len):
        first = start[i] + prompt_len[index[i]] - 1  # the prompt's last token predicts token 0
        source += range(first, first + t)
    owner = owner.to(device)
    same = (owner[:, :, None] == owner[:, None, :]) & (owner[:, :, None] >= 0)
    causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
    alone = torch.eye(width, dtype=torch.bool, device=device) & (owner[:, :, None] < 0)
    mask = ((same & causal) | alone)[:, None]  # padding slots see themselves: finite
    logits, states = _run(
        model,
        not chunked,
        hidden or chunked,
        input_ids=ids.to(device),
        attention_mask=mask,
        position_ids=positions.to(device),
        use_cache=False,
    )
    flat = torch.tensor(source, dtype=torch.long, device=device)

    def take(x: torch.Tensor | None) -> torch.Tensor | None:
        return None if x is None else take_rows(x.reshape(-1, x.shape[-1]), flat)

    return take(logits), take(states)


# Most slots (prompt + trie nodes) of one row of the tree forward, unless a single sequence is
# longer: its attention mask and scores grow with the square of the row's width.
TREE_ROW_TOKENS = 2048


def trie_rows(
    prompt_index: list[int],
    prompt_len: list[int],
    completions: list[list[int]],
    capacity: int = TREE_ROW_TOKENS,
) -> tuple[list[tuple[int, list[int], list[int]]], list[list[int]]]:
    """The tree forward's layout: each row holds one prompt and the prefix trie of some of its
    completions, so tokens that completions of the prompt share from their start are one node.

    Samples of a prompt fill a row in order while its width (prompt + nodes) stays within
    ``capacity`` (or one sample's sequence, if longer); a sample that does not fit starts a
    new row (nodes it shares with an earlier row are computed again there). Returns the rows
    ``(prompt, node tokens, node parents)`` (parent -1: after the prompt; a node's parent comes
    before it) and, per sample, the global node of each completion token (nodes numbered row
    after row).
    """
    rows: list[tuple[int, list[int], list[int]]] = []
    children: list[dict[tuple[int, int], int]] = []  # per row: (parent, token) -> node
    placed: list[tuple[int, list[int]]] = [(0, []) for _ in completions]  # (row, row's nodes)
    for i in sorted(range(len(completions)), key=lambda i: (prompt_index[i], i)):
        j, tokens = prompt_index[i], completions[i]
        fits = bool(rows) and rows[-1][0] == j
        if fits:
            known, parent = 0, -1  # the sample's tokens already in the last row
            while known < len(tokens) and (parent, tokens[known]) in children[-1]:
                parent = children[-1][(parent, tokens[known])]
                known += 1
            width = prompt_len[j] + len(rows[-1][1]) + len(tokens) - known
            fits = width <= max(capacity, prompt_len[j] + len(tokens))
        if not fits:
            rows.append((j, [], []))
            children.append({})
        _, node_tokens, node_parents = rows[-1]
        parent, path = -1, []
        for token in tokens:
            node = children[-1].get((parent, token))
            if node is None:
                node = children[-1][(parent, token)] = len(node_tokens)
                node_tokens.append(token)
                node_parents.append(parent)
            path.append(node)
            parent = node
        placed[i] = (len(rows) - 1, path)
    offsets = [0]
    for _, node_tokens, _ in rows:
        offsets.append(offsets[-1] + len(node_tokens))
    nodes_of = [[offsets[r] + n for n in path] for r, path in placed]
    return rows, nodes_of


def _tree_forward(
    model: PreTrainedModel, batch: Batch, hidden: bool, chunked: bool
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor]:
    """The tree forward (tree training, as AReaL's and TreeRL's: each shared segment once): the
    completions of a prompt are merged into a prefix trie (:func:`trie_rows`), and each row,
    the prompt then the trie's nodes, runs under a tree attention mask, a node attending to the
    prompt and to its ancestors and itself, with the position of its depth after the prompt. A
    node's state is the one every completion through it has at that token in the plain forward,
    so log-probs and gradients equal the plain forward's over the expanded completions (the
    gradient of a node sums its completions'), while a segment shared by the leaves of a tree
    rollout runs once.

    Returns the logits [U, V] (None when ``chunked``) and last hidden states [U, H] (when
    ``hidden`` or ``chunked``) predicting the U nodes' tokens, and ``expand`` [K]: the node of
    each of the K real completion tokens, in the row-major order of ``batch.completion_mask``.
    """
    device, lp = batch.prompt_ids.device, batch.prompt_ids.shape[1]
    prompt_len = batch.prompt_mask.sum(-1).tolist()
    lengths = batch.completion_mask.sum(-1).tolist()
    completion_ids = batch.completion_ids.cpu()
    completions = [completion_ids[i, :n].tolist() for i, n in enumerate(lengths)]
    rows, nodes_of = trie_rows(batch.prompt_index.tolist(), prompt_len, completions)
    width = max(1, max(prompt_len[j] + len(tokens) for j, tokens, _ in rows))
    n_rows = len(rows)
    ids = torch.zeros((n_rows, width), dtype=torch.long)
    positions = torch.zeros((n_rows, width), dtype=torch.long)
    see = torch.zeros((n_rows, width, width), dtype=torch.bool)
    prompt_ids = batch.prompt_ids.cpu()
    source = []  # flat slot of the state predicting each node's token, node by node
    for r, (j, tokens, parents) in enumerate(rows):
        p = prompt_len[j]
        ids[r, :p] = prompt_ids[j, lp - p :]
        positions[r, :p] = torch.arange(p)
        see[r, :p, :p] = torch.ones(p, p, dtype=torch.bool).tril()
        depth = []
        for n, (token, parent) in enumerate(zip(tokens, parents, strict=True)):
            slot = p + n
            ids[r, slot] = token
            depth.append(0 if parent < 0 else depth[parent] + 1)
            positions[r, slot] = p + depth[n]
            # a node sees the prompt, its parent's view and itself
            see[r, slot] = see[r, p + parent] if parent >= 0 else see[r, p - 1]
            see[r, slot, slot] = True
            source.append(r * width + (p + parent if parent >= 0 else p - 1))
        for slot in range(p + len(tokens), width):  # padding slots see themselves: finite
            see[r, slot, slot] = True
    logits, states = _run(
        model,
        not chunked,
        hidden or chunked,
        input_ids=ids.to(device),
        attention_mask=see[:, None].to(device),
        position_ids=positions.to(device),
        use_cache=False,
    )
    flat = torch.tensor(source, dtype=torch.long, device=device)
    expand = torch.tensor([n for path in nodes_of for n in path], dtype=torch.long, device=device)

    def take(x: torch.Tensor | None) -> torch.Tensor | None:
        return None if x is None else take_rows(x.reshape(-1, x.shape[-1]), flat)

    return take(logits), take(states), expand


class _KeepLayer(DynamicLayer):
    """A cache layer that keeps the keys/values of the one forward that writes it (the prompt
    pass). Replacing instead of appending makes a replay of that forward (gradient
    checkpointing recomputes a decoder layer in the backward) leave it unchanged."""

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.keys, self.values = key_states, value_states
        return key_states, value_states


class _PrefixLayer(DynamicLayer):
    """A read-only prefix: each update returns ``[prefix | new]`` keys/values without storing
    the new ones, so a replayed forward (gradient checkpointing) sees the same prefix."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        super().__init__()
        self.lazy_initialization(keys, values)
        self.keys, self.values = keys, values

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        keys = torch.cat([self.keys, key_states], dim=-2)
        return keys, torch.cat([self.values, value_states], dim=-2)


@contextmanager
def _checkpoint_with_cache(model: torch.nn.Module) -> Iterator[None]:
    """Let gradient-checkpointed decoder layers use a cache (transformers drops it for layers
    without ``_can_checkpoint_with_cache``, as a replay would write a usual cache twice); the
    caches of :func:`_grouped_forward` are replay-safe (:class:`_KeepLayer`,
    :class:`_PrefixLayer`)."""
    layers = [
        m
        for m in model.modules()
        if isinstance(m, GradientCheckpointingLayer) and not m._can_checkpoint_with_cache
    ]
    for m in layers:
        m._can_checkpoint_with_cache = True
    try:
        yield
    finally:
        for m in layers:
            del m._can_checkpoint_with_cache  # back to the class attribute


def _grouped_forward(
    model: PreTrainedModel, batch: Batch, hidden: bool, chunked: bool
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Prefix Grouper (Liu et al. 2025) with packing: each distinct prompt is encoded once, and
    its samples' completions are packed back to back into rows (:func:`pack_rows`) that attend
    to the prompt's key/value cache (with gradient, gathered per row).

    A block mask lets each completion token attend to its row's prompt and causally to its own
    completion only, with positions continuing from the prompt, so every token sees exactly
    what it sees in the plain forward. Rows are as wide as the longest completion, so attention
    costs what the per-sample layout costs per row, and most padding is gone. The caches are
    replay-safe, so this works with gradient checkpointing too.

    Returns logits [K, V] (None when ``chunked``) and last hidden states [K, H] (when ``hidden``
    or ``chunked``) predicting the K real completion tokens, in the row-major order of
    ``batch.completion_mask``.
    """
    device, lp = batch.prompt_ids.device, batch.prompt_ids.shape[1]
    lengths = batch.completion_mask.sum(-1).tolist()
    rows = pack_rows(batch.prompt_index.tolist(), lengths)
    row_prompt = torch.tensor([j for j, _ in rows], dtype=torch.long, device=device)
    prompt_pos = (batch.prompt_mask.cumsum(-1) - 1).clamp(min=0)
    n_rows, width = len(rows), max(1, max(lengths))
    completion_ids = batch.completion_ids.cpu()
    ids = torch.zeros((n_rows, width), dtype=torch.long)
    owner = torch.full((n_rows, width), -1, dtype=torch.long)  # sample of each slot
    positions = torch.zeros((n_rows, width), dtype=torch.long)
    prompt_len = batch.prompt_mask.sum(-1).tolist()
    slot = [0] * len(lengths)  # flat slot of each sample's first token
    for r, (j, members) in enumerate(rows):
        o = 0
        for i in members:
            length = lengths[i]
            ids[r, o : o + length] = completion_ids[i, :length]
            owner[r, o : o + length] = i
            positions[r, o : o + length] = prompt_len[j] + torch.arange(length)
            slot[i] = r * width + o
            o += length
    # where the state predicting each real token is (flat order): token 0 <- the prompt's last
    # position (row j of the prompt pass); token t <- slot + t - 1 of the packed rows
    n_prompts, prompt_index = batch.prompt_ids.shape[0], batch.prompt_index.tolist()
    source = []
    for i, length in enumerate(lengths):
        if length:
            source += [prompt_index[i]] + [n_prompts + slot[i] + t for t in range(length - 1)]
    index = torch.tensor(source, dtype=torch.long, device=device)
    # [rows, 1, width, Lp + width], True = attend: every slot sees its row's real prompt tokens
    # (so padding slots attend to something and stay finite) and its own completion causally
    owner = owner.to(device)
    same = (owner[:, :, None] == owner[:, None, :]) & (owner[:, :, None] >= 0)
    causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
    see_prompt = batch.prompt_mask.bool()[row_prompt][:, None, :].expand(n_rows, width, lp)
    mask = torch.cat([see_prompt, same & causal], dim=-1)[:, None]
    want = hidden or chunked
    prompt_cache = Cache(layer_class_to_replicate=_KeepLayer)
    with _checkpoint_with_cache(model):
        prefix = _run(
            model,
            not chunked,
            want,
            logits_to_keep=1,
            input_ids=batch.prompt_ids,
            attention_mask=batch.prompt_mask,
            position_ids=prompt_pos,
            past_key_values=prompt_cache,
            use_cache=True,
        )
        if prompt_cache.get_seq_length() != lp:
            raise RuntimeError(
                "the shared-prefix forward got no prompt key/value cache from the model "
                "(transformers dropped it); set train.shared_prefix: false"
            )
        row_cache = Cache(
            layers=[
                _PrefixLayer(take_rows(c.keys, row_prompt), take_rows(c.values, row_prompt))
                for c in prompt_cache.layers
            ]
        )
        out = _run(
            model,
            not chunked,
            want,
            input_ids=ids.to(device),
            attention_mask=mask,
            position_ids=positions.to(device),
            past_key_values=row_cache,
            use_cache=True,
        )

    def take(first: torch.Tensor | None, packed: torch.Tensor | None) -> torch.Tensor | None:
        if first is None or packed is None:
            return None
        return take_rows(torch.cat([first[:, -1], packed.reshape(-1, packed.shape[-1])]), index)

    return take(prefix[0], out[0]), take(prefix[1], out[1])
