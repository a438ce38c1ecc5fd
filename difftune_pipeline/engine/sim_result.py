"""What a simulation gives back: llvm-mca's Total Cycles, the steady state
BHive measures, and a status per pair."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# What a simulation predicts (SimResult.predicted), each with how it is said.
MEASURES = {
    "steady": "steady state (cycles per 100 iterations once fill and drain cancel, as BHive measures)",
    "total": "Total Cycles (llvm-mca's, fill and drain included)",
}


def check_measure(measure: str, what: str = "measure") -> str:
    """``measure`` if it is one of ``MEASURES``, else a ValueError naming ``what`` (a setting, an option)."""
    if measure not in MEASURES:
        raise ValueError(f"{what} must be one of {', '.join(MEASURES)}, not {measure!r}")
    return measure


@dataclass
class SimResult:
    cycles: np.ndarray  # int64, llvm-mca's Total Cycles; -1 where status is not "ok"
    status: list[str]
    steady: np.ndarray  # float64, cycles per 100 iterations in steady state; NaN where status is not "ok"

    @property
    def ok(self) -> np.ndarray:
        return np.array([s == "ok" for s in self.status], dtype=bool)

    def __getitem__(self, part: slice) -> SimResult:
        return SimResult(self.cycles[part], self.status[part], self.steady[part])

    def predicted(self, measure: str) -> np.ndarray:
        """Cycles per 100 iterations as ``measure`` reads them (float64): ``steady``,
        what BHive measures (the difference of two unroll counts, so the pipeline's fill
        and drain cancel), or ``total``, llvm-mca's Total Cycles (at 100 iterations)."""
        return self.steady if check_measure(measure) == "steady" else self.cycles.astype(np.float64)

    def predicted_or_nan(self, measure: str) -> np.ndarray:
        """``predicted``, NaN where the engine refused the pair."""
        return np.where(self.ok, self.predicted(measure), np.nan)
