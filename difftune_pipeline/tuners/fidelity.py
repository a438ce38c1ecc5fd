"""How well the surrogate knows the engine near a table, on pairs it never saw:
the val blocks (it was trained and refitted on train blocks only) under tables
drawn inside the tuning's trust region around the table (each a random share of
the rows, every non-zero value moved by up to ``trust`` ``log_scale`` units).
Reported three ways, each a MAPE against the engine at the drawn tables: the
surrogate's own levels; the surrogate trusted for differences, as the tuning
reads it (the engine at the table plus the surrogate's change); and the engine
at the table unchanged, which says how far the drawn tables moved the engine
(a fidelity far below it is the surrogate's knowledge, not the table's)."""

from __future__ import annotations

import numpy as np

from difftune_pipeline.engine import ParamTable
from difftune_pipeline.model.params import ParamSpace
from difftune_pipeline.tuners.base import Problem, predict_batched


def drawn_tables(space: ParamSpace, table: ParamTable, trust: float, n: int, share: float, rng: np.random.Generator):
    """``n`` tables inside the trust region around ``table``."""
    matrix, globals_ = space.encode(table)
    out = []
    for _ in range(n):
        rows = rng.random(matrix.shape[0]) < share
        step = rng.uniform(-trust, trust, matrix.shape) * (rows[:, None] & (matrix != 0))
        moved = 2 ** (np.log2(1 + matrix) + step) - 1
        out.append(space.decode(moved, globals_, table))
    return out


def fidelity_near(
    problem: Problem, table: ParamTable, trust: float, n: int = 4, share: float = 0.25, seed: int = 0
) -> dict[str, float]:
    """The three MAPEs (module docstring) over the val blocks the engine simulates under every drawn table."""
    view = problem.surrogate
    at_table = problem.cycles(table, "val")
    drawn = drawn_tables(view.space, table, trust, n, share, np.random.default_rng(seed))
    engine = np.array([problem.cycles(t, "val") for t in drawn])
    ok = ~np.isnan(engine).any(axis=0) & ~np.isnan(at_table)
    idx = np.flatnonzero(ok)
    cycles = lambda t: predict_batched(view.val_predict, *view.space.encode(t), idx).numpy()  # noqa: E731
    base = cycles(table)
    levels = np.array([cycles(t) for t in drawn])
    truth = engine[:, ok]
    error = lambda pred: float(np.mean(np.abs(pred - truth) / truth))  # noqa: E731
    return {
        "near_level_mape": error(levels),
        "near_anchored_mape": error(at_table[ok] + levels - base),
        "near_engine_change": error(np.broadcast_to(at_table[ok], truth.shape)),
        "near_pairs": int(truth.size),
    }
