"""The moves a coordinate search tries on one parameter row: each changes one
value (every def's latency, µops, one ReadAdvance entry, one resource's cycles),
in the direction the data asks or the one a surrogate's gradient proposes; and
how far a row has moved from its default (the prior's price)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from difftune_pipeline.engine import ParamTable
from difftune_pipeline.engine.table import canonical_row
from difftune_pipeline.model.params import ParamSpace
from difftune_pipeline.surrogates import Predict, relative_error
from difftune_pipeline.tuners.base import log_scale

Proposer = Callable[[str, dict], list]


def moves(row: dict, halving: bool = False, units: dict[str, int] | None = None) -> list[tuple[str, int, dict]]:
    """Unit steps from ``row`` (and, with ``halving``, halving any value >= 4):
    (columns of ``ParamSpace.columns``, comma-separated, step, new row) over the
    resources the row lists. ``units``: the functional units the row's other forms
    use (``base.borrowed_units``), with their cycles: one move gives the row a unit
    it does not list those cycles (with ``halving``, or twice them: a register
    division whose latency the search lowered needs the divider at twice what
    LLVM gives the memory form before it waits as measured), and with ``halving``
    a unit it lists at 4 or more may double, the way a halving goes down. A µop and
    its resource's cycles also move together: one at a time, a row can be stuck
    where neither alone helps (a pop reduced to one load µop needs both fewer µops
    and no ALU cycle). Giving cycles to a listed resource at 0 that partially
    overlaps one in use is refused by the engine: such a move fails its blocks and
    is never accepted."""
    out = []
    half = lambda v: [v // 2 - v] if halving and v >= 4 else []  # noqa: E731
    uses_ports = any(c > 0 for c in row["ports"].values())  # then µops must stay ≥ 1
    for d in [-1, 1, 2] + half(row["latency"][0] if row["latency"] else 0):
        lat = [v + d for v in row["latency"]]
        if row["latency"] and min(lat) >= 0:
            out.append(("latency", d, {**row, "latency": lat}))
    for d in [-1, 1] + half(row["uops"]):
        uops = row["uops"] + d
        if uops >= (1 if uses_ports else 0):
            out.append(("uops", d, {**row, "uops": uops}))
    for i, (use, write, cycles) in enumerate(row["read_advance"]):
        for d in (-1, 1):
            ra = [list(e) for e in row["read_advance"]]
            ra[i] = [use, write, cycles + d]
            out.append((f"read_advance[{use}]", d, {**row, "read_advance": ra}))
    units = units or {}
    for res, cycles in units.items():
        if row["ports"].get(res):
            continue
        for given in [cycles, 2 * cycles] if halving else [cycles]:
            out.append((f"port:{res}", given, {**row, "ports": {**row["ports"], res: given}}))
    for res, cycles in row["ports"].items():
        double = [cycles] if halving and res in units and cycles >= 4 else []
        for d in [-1, 1] + half(cycles) + double:
            if cycles + d >= 0:
                out.append((f"port:{res}", d, {**row, "ports": {**row["ports"], res: cycles + d}}))
        for d in (-1, 1):  # a whole µop on that resource: µops and its cycles together
            ports = {**row["ports"], res: cycles + d}
            if cycles + d >= 0 and row["uops"] + d >= (1 if any(c > 0 for c in ports.values()) else 0):
                out.append((f"uops,port:{res}", d, {**row, "uops": row["uops"] + d, "ports": ports}))
    return [(column, d, canonical_row(r)) for column, d, r in out]


def distance(row: dict, reference: dict) -> float:
    """How far a row is from its reference, summed over its latencies, µops,
    resource cycles and ReadAdvance cycles in ``log_scale`` units."""
    ports = sorted(set(row["ports"]) | set(reference["ports"]))  # one order: the sum is the same in every process
    advance = {(u, w): c for u, w, c in reference["read_advance"]}
    own = {(u, w): c for u, w, c in row["read_advance"]}
    mine, theirs = np.array(
        [
            *zip(row["latency"], reference["latency"]),
            (row["uops"], reference["uops"]),
            *((row["ports"].get(p, 0), reference["ports"].get(p, 0)) for p in ports),
            *((own.get(k, 0), advance.get(k, 0)) for k in sorted(set(own) | set(advance))),
        ]
    ).T
    return float(np.abs(log_scale(mine) - log_scale(theirs)).sum())


def gradient(
    predict: Predict, n_blocks: int, space: ParamSpace, table: ParamTable, measured: np.ndarray, batch: int = 512
) -> dict[str, np.ndarray]:
    """d(train MAPE through the surrogate)/d(parameters) at ``table``, per row of
    the space: what the surrogate says each parameter would do to the error."""
    matrix, globals_ = space.encode(table)
    theta = torch.tensor(matrix, requires_grad=True)
    g = torch.tensor(globals_)
    truth = torch.tensor(measured, dtype=torch.float32)
    for start in range(0, n_blocks, batch):
        idx = torch.arange(start, min(n_blocks, start + batch))
        loss = relative_error(predict(theta, g, idx), truth[idx]).sum() / n_blocks
        loss.backward()
    grad = theta.grad.numpy()
    return {key: grad[i] for i, key in enumerate(space.keys) if np.any(grad[i])}


def gradient_proposer(
    grad: dict[str, np.ndarray], columns: list[str], top: int = 3, candidates: Proposer | None = None
):
    """Moves ranked by the gain a surrogate's gradient predicts (``-grad · step``),
    the ``top`` best with a positive predicted gain among ``candidates(key, row)``
    (default: ``moves``): the surrogate proposes, the engine decides."""
    candidates = candidates or (lambda key, row: moves(row))
    col = {c: i for i, c in enumerate(columns)}

    def propose(key: str, row: dict) -> list[tuple[str, int, dict]]:
        g = grad.get(key)
        if g is None:
            return []
        scored = [
            (-sum(g[col[p]] for p in c.split(",")) * d, c, d, r)
            for c, d, r in candidates(key, row)
            if all(p in col for p in c.split(","))
        ]
        return [(c, d, r) for gain, c, d, r in sorted(scored, key=lambda x: -x[0])[:top] if gain > 0]

    return propose
