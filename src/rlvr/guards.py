"""Numerical guards: a step whose rewards, advantages, loss or gradients are NaN/inf does not
update the policy, and too many in a row stop the run; so do too many steps in a row of a
collapsed policy (see docs/design.md, "Numerical guards"); running out of memory names the
settings that bound it."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlvr.config import Config
from rlvr.errors import OutOfMemory


def first_nonfinite(values: dict[str, torch.Tensor | float]) -> str | None:
    """The name of the first value (a float or a tensor) holding NaN/inf, else None.

    Example: ``first_nonfinite({"rewards": torch.tensor([1.0, nan])}) == "rewards"``.
    """
    for name, value in values.items():
        finite = torch.isfinite(value).all() if torch.is_tensor(value) else math.isfinite(value)
        if not finite:
            return name
    return None


@dataclass
class NonFiniteGuard:
    """Counts consecutive non-finite steps; :attr:`tripped` after ``limit`` in a row.

    ``first`` names the first bad quantity of the current streak and ``first_step`` its step.
    """

    limit: int
    streak: int = 0
    first: str | None = None
    first_step: int | None = None

    def observe(self, step: int, bad: str | None) -> None:
        """Record step ``step``: ``bad`` names its non-finite quantity, or is None."""
        if bad is None:
            self.streak, self.first, self.first_step = 0, None, None
            return
        self.streak += 1
        if self.first is None:
            self.first, self.first_step = bad, step

    @property
    def tripped(self) -> bool:
        return self.streak >= self.limit

    def message(self) -> str:
        return (
            f"training stopped: {self.streak} steps in a row had non-finite values (first: "
            f"non-finite {self.first} at step {self.first_step}); none of them updated the "
            "weights or was checkpointed."
        )


def resume_hint(run_dir: Path, last_good: Path | None, set_aside: list[Path]) -> str:
    """Where a run stopped by :class:`NonFiniteGuard` can go on from, as sentences:
    ``last_good`` is the checkpoint ``--resume`` will load, ``set_aside`` the checkpoints
    written by the updates just before the divergence (renamed, kept for inspection)."""
    aside = ""
    if set_aside:
        names = ", ".join(p.name for p in set_aside)
        aside = (
            f" The checkpoint written by the update just before it may already have diverged "
            f"and was set aside ({names})."
        )
    if last_good is None:
        return aside + (
            " No earlier checkpoint: resume it from step 0 with a lower learning rate (or check "
            f"the reward): rlvr train --resume {run_dir} --set train.lr=<lower>"
        )
    return aside + (
        f" Last good checkpoint: {last_good}. Resume from it with a lower learning rate: "
        f"rlvr train --resume {run_dir} --set train.lr=<lower>"
    )


def vocabulary_size(policy: torch.nn.Module | None, tokenizer: Any) -> int:
    """How many tokens the policy's distribution is over: the rows of its output layer, or (the
    policy lives elsewhere, e.g. Ray's learners) the tokenizer's length."""
    output = policy.get_output_embeddings() if policy is not None else None
    weight = getattr(output, "weight", None)
    return int(weight.shape[0]) if weight is not None else len(tokenizer)


@dataclass
class CollapseGuard:
    """Counts consecutive steps whose policy has collapsed; :attr:`tripped` after ``limit`` in a
    row (see docs/design.md, "Numerical guards"). A step is collapsed when

    * the mean token entropy of its samples (``policy/entropy``, of the temperature-scaled
      policy) is within ``tolerance`` nats of log ``vocab_size``: the policy is uniform over the
      vocabulary (KL(policy || uniform) = log|V| - H < ``tolerance``);
    * every sampled token's log-prob is -log ``vocab_size`` within ``tolerance`` (the same,
      seen by the sampler: it holds when every advantage was zero and nothing was trained on);
    * or the gradient norm is exactly 0 although the step had something to learn (some group's
      rewards differed and some sample was trained on): the loss no longer depends on the
      weights.

    ``vocab_size`` may be smaller than the logits' width (the tokenizer's length of a padded
    vocabulary): an entropy above log ``vocab_size`` counts as uniform too.
    Example: ``lr: 1e6`` on tiny-random-llama (|V| = 259) gives ``policy/entropy`` 5.556828
    (log 259 = 5.556828) and ``policy/grad_norm`` 0.0 from its second step on.
    """

    limit: int
    vocab_size: int
    tolerance: float = 1e-3
    streak: int = 0
    first_step: int | None = None
    reason: str | None = None

    def collapsed(
        self, metrics: dict[str, float], sampled_logprobs: list[list[float]] | None = None
    ) -> str | None:
        """Why a step with ``metrics`` (and its samples' sampler log-probs) is collapsed, or
        None."""
        uniform = math.log(self.vocab_size)
        entropy = metrics.get("policy/entropy")
        if entropy is not None and math.isfinite(entropy) and entropy >= uniform - self.tolerance:
            return (
                f"mean token entropy {entropy:.6f} = log|V| = log {self.vocab_size} "
                f"({uniform:.6f}): the policy is uniform over the vocabulary"
            )
        rows = sampled_logprobs or []
        near = (abs(lp + uniform) <= self.tolerance for row in rows for lp in row)
        if any(rows) and all(near):  # stops at the first token that is not (a healthy policy)
            return (
                f"every sampled token had log-prob -log|V| = -{uniform:.6f} (|V| = "
                f"{self.vocab_size}): the policy is uniform over the vocabulary"
            )
        signal = (
            metrics.get("policy/trained_samples_frac", 1.0) > 0
            and metrics.get("groups/zero_variance_frac", 0.0) < 1
        )
        if metrics.get("policy/grad_norm") == 0.0 and signal:
            return (
                "gradient norm exactly 0 although the rewards differed: the loss no longer "
                "depends on the weights"
            )
        return None

    def observe(
        self,
        step: int,
        metrics: dict[str, float],
        sampled_logprobs: list[list[float]] | None = None,
    ) -> str | None:
        """Record step ``step``; returns a warning on the first collapsed step of a streak."""
        reason = self.collapsed(metrics, sampled_logprobs)
        if reason is None:
            self.streak, self.first_step, self.reason = 0, None, None
            return None
        self.streak += 1
        if self.first_step is not None:
            return None
        self.first_step, self.reason = step, reason
        return (
            f"step {step}: the policy looks collapsed ({reason}); {self.limit} such steps in a "
            "row stop the run (train.max_collapsed_steps)"
        )

    @property
    def tripped(self) -> bool:
        return self.streak >= self.limit

    def message(self) -> str:
        return (
            f"training stopped: the policy collapsed: {self.streak} steps in a row from step "
            f"{self.first_step} on ({self.reason}); none of them was checkpointed. A learning "
            "rate far too high (train.lr) does this."
        )


def is_out_of_memory(err: BaseException) -> bool:
    """CUDA's OutOfMemoryError, or the CPU allocator failing (a RuntimeError or MemoryError)."""
    if isinstance(err, torch.OutOfMemoryError | MemoryError):
        return True
    return isinstance(err, RuntimeError) and "can't allocate memory" in str(err)


@contextlib.contextmanager
def memory_hint(cfg: Config, phase: str, run_dir: Path, device: torch.device) -> Iterator[None]:
    """Turn running out of memory in ``phase`` ("sampling" or "training") into
    :class:`OutOfMemory` naming the settings that bound that phase's memory."""
    try:
        yield
    except BaseException as err:
        if not is_out_of_memory(err):
            raise
        if phase == "sampling":
            knobs = (
                f"rollout.max_batch (now {cfg.rollout.max_batch}: samples decoded at once), "
                f"rollout.max_new_tokens (now {cfg.rollout.max_new_tokens})"
            )
        else:
            knobs = (
                f"train.micro_batch_size (now {cfg.train.micro_batch_size}), "
                f"train.logprob_chunk_tokens (now {cfg.train.logprob_chunk_tokens}; e.g. 1024 "
                "keeps only that many tokens' vocabulary logits at once), "
                f"train.gradient_checkpointing (now {cfg.train.gradient_checkpointing})"
            )
        raise OutOfMemory(
            f"out of memory on {device} while {phase} ({type(err).__name__}: "
            f"{str(err).splitlines()[0][:200] if str(err) else 'no message'}). Lower {knobs}, "
            f"e.g. rlvr train --resume {run_dir} --set train.micro_batch_size=... (from the "
            "last checkpoint)"
        ) from None
