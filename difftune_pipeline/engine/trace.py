"""What one simulation did, instruction by instruction: the cycles of llvm-mca's
timeline view, why each instruction waited in every cycle it waited, the
resource pressure per unit and the cycles in which back-end pressure rose.

The engine records these from MCA's own events (``HWEventListener``) only when a
trace is asked for; a plain simulation attaches no listener.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

# Why an instruction waited in a cycle. After dispatch (in the scheduler):
# its register operands, the memory order, or busy resources once it was ready.
# Before dispatch (MCA's dispatch stalls): a full structure or a dispatch-group rule.
WAIT_CAUSES = {
    "register": "register dependency",
    "memory": "memory dependency",
    "resource": "resource busy",
    "rob-full": "reorder buffer full",
    "register-file-full": "register file full",
    "scheduler-full": "scheduler full",
    "load-queue-full": "load queue full",
    "store-queue-full": "store queue full",
    "dispatch-group": "dispatch group",
    "custom-hazard": "custom hazard",
}


@dataclass(frozen=True)
class TimelineEntry:
    """One instruction of one iteration; cycles are -1 where not reached."""

    iteration: int
    index: int
    dispatched: int
    ready: int
    issued: int
    executed: int
    retired: int
    waits: tuple[tuple[int, int, str], ...]  # (first cycle, last cycle, cause) of each run of waiting

    def cause_by_cycle(self) -> dict[int, str]:
        """Why it waited, cycle by cycle."""
        return {c: cause for first, last, cause in self.waits for c in range(first, last + 1)}


def last_cycle(timeline: list[TimelineEntry]) -> int:
    """The last cycle any recorded event happened in (the timeline's width)."""
    return max((c for e in timeline for c in (e.dispatched, e.ready, e.issued, e.executed, e.retired)), default=0)


@dataclass(frozen=True)
class Trace:
    cycles: int | None  # total cycles, as simulate() gives them; None when not "ok"
    steady: float | None  # cycles per 100 iterations in steady state, as simulate() gives them
    status: str
    iterations: int
    units: list[str]  # resource units: llvm-mca's resource-pressure columns
    timeline: list[TimelineEntry]  # the first iterations, in program order
    pressure: np.ndarray  # (instructions + 1) × units, cycles per iteration; the last row is the block
    pressure_cycles: dict[str, int]  # cycles in which back-end pressure rose: any, resources, registers, memory
    dispatch_stalls: int  # stall events of the dispatch stage; without any, pressure never limited throughput

    @classmethod
    def from_native(cls, raw: dict, block_size: int, iterations: int) -> Trace:
        timeline = [
            TimelineEntry(i // block_size, i % block_size, *cycles, tuple(tuple(w) for w in waits))
            for i, (*cycles, waits) in enumerate(raw["timeline"])
        ]
        return cls(
            cycles=raw["cycles"] if raw["status"] == "ok" else None,
            steady=raw["steady"] if raw["status"] == "ok" else None,
            status=raw["status"],
            iterations=iterations,
            units=list(raw["units"]),
            timeline=timeline,
            pressure=np.array(raw["pressure"], dtype=np.float64).reshape(len(raw["pressure"]), len(raw["units"])),
            pressure_cycles={
                "any": raw["pressure_cycles"],
                "resources": raw["resource_pressure_cycles"],
                "registers": raw["register_pressure_cycles"],
                "memory": raw["memory_pressure_cycles"],
            },
            dispatch_stalls=raw["dispatch_stalls"],
        )

    def wait_cycles(self) -> dict[str, int]:
        """Instruction-cycles spent waiting over the recorded iterations, by cause."""
        counts = Counter()
        for e in self.timeline:
            for first, last, cause in e.waits:
                counts[cause] += last - first + 1
        return dict(counts.most_common())
