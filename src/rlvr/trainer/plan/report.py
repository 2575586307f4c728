"""What a plan reports: its rows by phase, the peak (the resident rows and the largest phase's),
the verdict against the device's memory, and the table ``rlvr plan`` prints."""

from __future__ import annotations

from dataclasses import dataclass

from rlvr.trainer.plan.units import size_text


@dataclass(frozen=True)
class Row:
    """One part of the estimate: ``bytes`` on the device; ``phase``: ``resident`` (all run
    long) or the phase it exists in (``train``, ``optimizer``, ``rollout``, ``load``);
    ``shared``: another process's, on the memory this one shares
    (:attr:`~rlvr.trainer.plan.setup.Setup.host_shared`)."""

    name: str
    bytes: int
    note: str
    phase: str = "resident"
    shared: bool = False


PHASES = {
    "train": "training step",
    "optimizer": "optimizer step",
    "rollout": "rollout",
    "load": "load (before sharding)",
}
"""The phases one at a time on top of the resident rows; the load's rows stand alone (the
runtime and the whole policy: nothing else exists yet)."""


@dataclass(frozen=True)
class Plan:
    """The estimated peak memory of a run's most loaded device: a learner's (with the engine
    when colocated; on a CPU with the run's processes on this machine, the machine's, which
    they share).

    Attributes:
        rows: the breakdown, in bytes.
        devices: the learners; device_memory: the device's bytes (None: not known).
        advice: the cheapest changes that would fit, cheapest first (empty when it fits).
    """

    title: str
    rows: tuple[Row, ...]
    devices: int
    device_memory: int | None
    advice: tuple[str, ...] = ()

    def total(self, phase: str, own: bool = False) -> int:
        """Bytes on the device during ``phase`` (``own``: this process's rows only)."""
        rows = [r for r in self.rows if not (own and r.shared)]
        phases = (phase,) if phase == "load" else ("resident", phase)
        return sum(r.bytes for r in rows if r.phase in phases)

    @property
    def largest_phase(self) -> str:
        return max(PHASES, key=self.total)

    @property
    def peak(self) -> int:
        """The estimated peak, in bytes: the resident rows and the largest phase's."""
        return self.total(self.largest_phase)

    @property
    def learner_peak(self) -> int:
        """The same of the most loaded learner's process alone (without the rows of the other
        processes sharing its memory)."""
        return max(self.total(phase, own=True) for phase in PHASES)

    @property
    def fits(self) -> bool:
        return self.device_memory is None or self.peak <= self.device_memory

    def _largest_rows(self) -> list[Row]:
        """The rows of the peak, largest first."""
        phase = self.largest_phase
        phases = (phase,) if phase == "load" else ("resident", phase)
        return sorted((r for r in self.rows if r.phase in phases), key=lambda r: -r.bytes)

    def verdict(self) -> str:
        """One line: the peak against the device's memory, and whether it fits."""
        where = f"{PHASES[self.largest_phase]} peak"
        if self.device_memory is None:
            return f"estimated {where}: {size_text(self.peak)} per device"
        if self.fits:
            return (
                f"estimated {where}: {size_text(self.peak)} of {size_text(self.device_memory)} "
                "per device: fits"
            )
        parts = ", ".join(f"{r.name} {size_text(r.bytes)}" for r in self._largest_rows()[:3])
        return (
            f"does not fit: estimated {where} {size_text(self.peak)} > "
            f"{size_text(self.device_memory)} per device (largest: {parts})"
        )

    def text(self) -> str:
        """The table ``rlvr plan`` prints: the rows by phase, then the verdict and the advice."""
        lines = [self.title]
        for phase in ("resident", *PHASES):
            rows = [r for r in self.rows if r.phase == phase]
            if rows:
                lines.append(f"  {PHASES.get(phase, 'resident')}: {size_text(self.total(phase))}")
                lines += [f"    {r.name:<26} {size_text(r.bytes):>10}  {r.note}" for r in rows]
        lines.append(self.verdict())
        lines += [f"  {a}" for a in self.advice]
        return "\n".join(lines)

    def summary(self) -> str:
        """The compact block a run prints at its start: the title, the rows of the peak (of a
        MiB or more) on one line, the verdict (``rlvr plan``: the whole table)."""
        rows = [r for r in self._largest_rows() if r.bytes >= 2**20]
        parts = ", ".join(f"{r.name} {size_text(r.bytes)}" for r in rows)
        return "\n".join([self.title, f"  {parts}", self.verdict()])
