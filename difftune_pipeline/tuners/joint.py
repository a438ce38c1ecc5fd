"""Joint moves: one step on many rows at once, which the coordinate search
never tries (it moves one row and judges it alone). The surrogate's gradient at
the current table gives each row's best unit move and its predicted gain; the
best rows' moves together (the best 4, 8, 16, … rows) are scored through the
surrogate trusted for differences (its gradient too) (the engine's cycles at the current table
plus the surrogate's change), and the engine simulates only the one the
surrogate scores best, on every train block it touches: the search keeps it
only when the engine confirms the gain (``Search.improve_rows``)."""

from __future__ import annotations

import numpy as np

from difftune_pipeline.tuners.base import SurrogateView, surrogate_cycles
from difftune_pipeline.tuners.gradient import gradient
from difftune_pipeline.tuners.moves import moves
from difftune_pipeline.tuners.search import Search

SIZES = (4, 8, 16, 32, 64)  # rows moved together, best-ranked first


def ranked(state: Search, grad: dict[str, np.ndarray], columns: list[str]) -> list[tuple[str, str, dict]]:
    """Per searched row, its unit move of the largest gain the gradient predicts
    (summed train error saved, less the prior's price), best rows first:
    (row key, label, new row)."""
    col = {c: i for i, c in enumerate(columns)}
    n = len(state.blocks)
    out = []
    for key in sorted(set(grad) & set(state.index)):
        best = None
        for column, step, new in moves(state.changes.get(key, state.default.rows[key]), state.config.halving):
            if not all(c in col for c in column.split(",")):
                continue
            gain = -sum(grad[key][col[c]] for c in column.split(",")) * step * n - state.price({key: new})
            if gain > 0 and (best is None or gain > best[0]):
                best = (gain, f"{column}{step:+d}", new)
        if best:
            out.append((best[0], key, best[1], best[2]))
    return [(key, label, new) for _, key, label, new in sorted(out, key=lambda x: (-x[0], x[1]))]


def predicted_gains(state: Search, view: SurrogateView, candidates: list[dict[str, dict]]) -> np.ndarray:
    """Per candidate (row key -> new row), the summed train error it saves as the
    surrogate predicts it around the engine's current cycles, less the prior's price."""
    touched = [np.unique(np.concatenate([state.index[k] for k in rows])) for rows in candidates]
    everything = np.unique(np.concatenate(touched))
    here = dict(zip(everything, surrogate_cycles(view.predict, view.space, state.full_table(), everything)))
    gains = []
    for rows, idx in zip(candidates, touched):
        moved = surrogate_cycles(view.predict, view.space, state.full_table(rows), idx)
        change = moved - np.array([here[b] for b in idx])
        truth = state.measured[idx]
        after = np.abs(truth * (1 + state.signed[idx]) + change - truth) / truth
        gains.append(state.error[idx].sum() - after.sum() - state.price(rows))
    return np.array(gains)


def improve_jointly(state: Search, view: SurrogateView, tries: int) -> list[str]:
    """Up to ``tries`` joint moves simulated by the engine; returns the accepted labels."""
    engine = state.measured * (1 + state.signed)  # the engine's cycles now (a refused block: far off)
    grad = gradient(view.predict, len(state.blocks), view.space, state.full_table(), state.measured, engine=engine)
    ranking = ranked(state, grad, view.space.columns)
    sizes, accepted = list(SIZES), []
    for _ in range(tries):
        options = [k for k in sizes if k <= len(ranking)]
        if not options:
            break
        candidates = [{key: new for key, _, new in ranking[:k]} for k in options]
        gains = predicted_gains(state, view, candidates)
        best = int(np.argmax(gains))
        if gains[best] <= 1e-9:
            break
        k = options[best]
        if state.improve_rows(candidates[best]):
            accepted.append(f"{k} rows: " + ", ".join(f"{key} {label}" for key, label, _ in ranking[:k]))
            ranking = ranking[k:]
        else:
            sizes.remove(k)
    return accepted
