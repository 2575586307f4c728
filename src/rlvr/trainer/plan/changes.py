"""The advice when a plan does not fit: the cheapest config change that makes it fit (``--set
key=value``), else a combination of changes, else the learners a sharded run needs."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

from rlvr.trainer.plan.components import estimate
from rlvr.trainer.plan.report import Plan
from rlvr.trainer.plan.setup import Setup
from rlvr.trainer.plan.units import size_text

CHUNK_ADVICE = 1024
"""``train.logprob_chunk_tokens`` the advice proposes."""
LORA_ADVICE = 16
"""``model.lora.rank`` the advice proposes (all linear layers)."""


@dataclass(frozen=True)
class Change:
    """A config change the advice may propose: ``--set key=value`` and the setup with it."""

    key: str
    value: str
    setup: Setup
    note: str = ""

    @property
    def flag(self) -> str:
        return f"--set {self.key}={self.value}" + (f" ({self.note})" if self.note else "")


def _changes(setup: Setup) -> Iterator[Change]:
    """Changes that lower the peak, cheapest first (in time per step, then in what the run
    learns); a key's values from the mildest."""
    if setup.snapshot and setup.device == "cpu":
        yield Change("logging.update_sparsity", "false", _with(setup, snapshot=False))
    batch = setup.micro_batch // 2
    while batch >= 1:
        yield Change("train.micro_batch_size", str(batch), _with(setup, micro_batch=batch))
        batch //= 2
    if setup.chunk_tokens == 0 or setup.chunk_tokens > CHUNK_ADVICE:
        chunked = _with(setup, chunk_tokens=CHUNK_ADVICE)
        yield Change("train.logprob_chunk_tokens", str(CHUNK_ADVICE), chunked)
    if not setup.checkpointing:
        yield Change("train.gradient_checkpointing", "true", _with(setup, checkpointing=True))
    if setup.colocated and setup.engine == "torch" and setup.max_batch > 16:
        fewer = _with(setup, max_batch=setup.max_batch // 4)
        yield Change("rollout.max_batch", str(setup.max_batch // 4), fewer)
    if not setup.sharding and setup.learners > 1 and setup.quantize is None:
        note = f"over the {setup.learners} learners"
        yield Change("train.sharding", "fsdp", _with(setup, sharding=True), note)
    if not setup.lora_rank:
        lora = _with(
            setup,
            lora_rank=LORA_ADVICE,
            lora_targets="all-linear",
            reference="disabled" if setup.reference else None,
        )
        yield Change("model.lora.rank", str(LORA_ADVICE), lora, "LoRA on all linear layers")
    if setup.sharding and not setup.offload and setup.device == "cuda":
        yield Change("train.shard_offload", "true", _with(setup, offload=True))


def _with(setup: Setup, **changes: object) -> Setup:
    return dataclasses.replace(setup, **changes)


def _fits(setup: Setup, memory: int) -> bool:
    return estimate(setup).peak <= memory


def _combine(setup: Setup, changes: list[Change]) -> Setup:
    """``setup`` with every field each change altered set as it set it."""
    updates = {
        f.name: getattr(c.setup, f.name)
        for c in changes
        for f in dataclasses.fields(Setup)
        if getattr(c.setup, f.name) != getattr(setup, f.name)
    }
    return dataclasses.replace(setup, **updates)


def advice(setup: Setup, found: Plan) -> tuple[str, ...]:
    """The cheapest single change that makes ``found`` fit; else a combination (each key at its
    strongest, added in cost order until it fits, the unneeded ones dropped, dearest first,
    then each as mild as still fits); else the learners a sharded run needs."""
    memory = found.device_memory
    assert memory is not None
    changes = list(_changes(setup))
    for change in changes:
        if _fits(change.setup, memory):
            peak = size_text(estimate(change.setup).peak)
            return (f"cheapest change that fits: {change.flag} (estimated peak {peak})",)
    strongest = list({c.key: c for c in changes}.values())  # each key's last value
    fitting = [
        i for i in range(len(strongest)) if _fits(_combine(setup, strongest[: i + 1]), memory)
    ]
    if not fitting:
        return (_more_devices(setup, memory),)
    chosen = strongest[: fitting[0] + 1]
    for change in reversed(chosen[:-1]):
        rest = [c for c in chosen if c is not change]
        if _fits(_combine(setup, rest), memory):
            chosen = rest
    for i, change in enumerate(chosen):
        others = chosen[:i] + chosen[i + 1 :]
        milder = (c for c in changes if c.key == change.key)
        chosen[i] = next(c for c in milder if _fits(_combine(setup, [*others, c]), memory))
    peak = size_text(estimate(_combine(setup, chosen)).peak)
    return (f"fits with: {' '.join(c.flag for c in chosen)} (estimated peak {peak})",)


def _more_devices(setup: Setup, memory: int) -> str:
    """The fewest learners (a power of two, up to 1024) a sharded, checkpointed run fits."""
    n = 2
    while n <= 1024:
        sharded = _with(
            setup, sharding=True, learners=n, checkpointing=True, backend="ray", host_shared=False
        )
        peak = estimate(sharded).peak
        if peak <= memory:
            return (
                f"no change on {setup.learners} device(s) fits: shard over {n}: --set "
                "distributed.backend=ray --set train.sharding=fsdp --set "
                f"distributed.learners={n} --set train.gradient_checkpointing=true "
                f"(estimated peak {size_text(peak)})"
            )
        n *= 2
    return "no change rlvr offers fits this device: a larger device or a smaller model"
