"""The learner's forward pass: the settings every log-prob call of an update shares, so a call is
one line (:class:`Forward`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.config import Config
from rlvr.policy import Batch, ValueHead, completion_logprobs, min_p_logprobs


@dataclass(frozen=True)
class Forward:
    """How the learner computes per-token log-probs of completions.

    Attributes:
        temperature: the sampling temperature (log-probs are of the temperature-scaled policy).
        dtype: the autocast dtype of the training forward (fp32: no autocast).
        shared_prefix: one prompt forward per group (``train.shared_prefix``).
        chunk_tokens: the output layer ``chunk_tokens`` tokens at a time (0: all at once).
        packed: sequence packing (``train.packing``; by default for the data's completions,
            whose prompts are seldom shared).
        tree: the tree forward (tree rollouts with ``train.shared_prefix``): completions of a
            prompt share their common first tokens' computation (:func:`rlvr.policy.
            completion_logprobs`).
        micro_batch_size: rows per forward of a no-grad pass.
    """

    temperature: float
    dtype: torch.dtype
    shared_prefix: bool
    chunk_tokens: int
    packed: bool
    micro_batch_size: int
    tree: bool = False

    @classmethod
    def of(cls, cfg: Config, samples: str, dtype: torch.dtype) -> Forward:
        """The settings of ``cfg`` for a preset whose ``samples`` are ``policy`` or ``data``."""
        packing = cfg.train.packing
        return cls(
            temperature=cfg.rollout.temperature,
            dtype=dtype,
            shared_prefix=cfg.train.shared_prefix,
            chunk_tokens=cfg.train.logprob_chunk_tokens,
            packed=samples == "data" if packing is None else packing,
            micro_batch_size=cfg.train.micro_batch_size,
            tree=cfg.rollout.tree is not None and cfg.train.shared_prefix and not packing,
        )

    def autocast(self, device: torch.device) -> torch.autocast:
        enabled = self.dtype != torch.float32
        return torch.autocast(device.type, dtype=self.dtype, enabled=enabled)

    def __call__(
        self,
        model: torch.nn.Module,
        batch: Batch,
        entropy: bool = False,
        entropy_grad: bool = False,
        value_head: ValueHead | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """log pi(y_t) [n, T] of ``batch``'s completions under ``model`` (with gradient when
        enabled), the entropies [n, T] (``entropy``; with gradient: ``entropy_grad``, else None
        without ``entropy``) and with a ``value_head`` the values [n, T]
        (:func:`rlvr.policy.completion_logprobs`)."""
        with self.autocast(batch.completion_mask.device):
            return completion_logprobs(
                model,
                batch,
                self.temperature,
                entropy,
                shared_prefix=self.shared_prefix,
                entropy_grad=entropy_grad,
                value_head=value_head,
                chunk_tokens=self.chunk_tokens,
                packed=self.packed,
                tree=self.tree,
            )

    def no_grad(
        self,
        model: torch.nn.Module,
        batch: Batch,
        rows: torch.Tensor | None = None,
        value_head: ValueHead | None = None,
        chunks: list[tuple[torch.Tensor, bool]] | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """log-probs, entropies (and values) [N, T] of the rows ``rows`` of ``batch`` (every row
        when None; zeros elsewhere) under ``model``, without gradient, ``micro_batch_size`` rows
        at a time; or of the micro-batches ``chunks`` (rows, kept), whose unkept ones only
        run (a sharded learner's padding: :meth:`rlvr.trainer.learner.Learner.micro_batches`)."""
        shape, device = batch.completion_mask.shape, batch.completion_mask.device
        outs = [torch.zeros(shape, device=device) for _ in range(3 if value_head else 2)]
        if chunks is None:
            todo = torch.arange(shape[0]) if rows is None else rows
            chunks = [(chunk, True) for chunk in todo.split(self.micro_batch_size)]
        with torch.no_grad():
            for chunk, kept in chunks:
                sub = batch.select(chunk)
                width = sub.completion_ids.shape[1]
                parts = self(model, sub, entropy=True, value_head=value_head)
                for out, part in zip(outs, parts, strict=True):
                    if kept:
                        out[chunk, :width] = part
        return tuple(outs)

    def min_p(self, model: torch.nn.Module, batch: Batch, kappa: float) -> torch.Tensor:
        """Lp-Reg's proxy log-probs [N, T] of every row of ``batch`` under ``model``
        (:func:`rlvr.policy.min_p_logprobs`), ``micro_batch_size`` rows at a time, the output
        layer ``chunk_tokens`` tokens at a time (``train.logprob_chunk_tokens``)."""
        shape, device = batch.completion_mask.shape, batch.completion_mask.device
        out = torch.zeros(shape, device=device)
        for chunk in torch.arange(shape[0]).split(self.micro_batch_size):
            sub = batch.select(chunk)
            width = sub.completion_ids.shape[1]
            with self.autocast(device):
                part = min_p_logprobs(
                    model, sub, self.temperature, kappa, self.shared_prefix, self.chunk_tokens
                )
            out[chunk, :width] = part
        return out
