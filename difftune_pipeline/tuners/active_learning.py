"""Active learning, so that the surrogate is accurate where the tuning goes: the
engine simulates each table the gradient reaches, and tables drawn inside the
trust region around each one it confirms (``tune.around``), and the surrogate is refitted to
those simulations, so that it learns the engine's landscape where the tuning
is, not only at the tables sampled before training. The drawn tables are
simulated on a random share of the train blocks: what the refit needs is many
tables near the current one, each on enough blocks for its batches. With
``tune.refit_on`` "differences" the refit fits what the tuning reads, each
table's cycles as the engine's at the θₖ it was reached from plus the
surrogate's change, rather than the surrogate's own levels."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from difftune_pipeline.engine import ParamTable
from difftune_pipeline.model.params import ParamSpace
from difftune_pipeline.surrogates import Predict, mape_loss
from difftune_pipeline.tuners.base import predict_batched
from difftune_pipeline.tuners.fidelity import drawn_tables

# A table as the surrogate reads it (matrix, globals) and the engine's train cycles there (NaN: not simulated)
Visit = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
Simulate = Callable[..., np.ndarray]  # simulate(table, positions=None): the engine's train cycles
# A visit and the confirmed table it was reached or drawn from (None: fitted on its levels)
Fitted = tuple[Visit, Visit | None]


def visit(space: ParamSpace, table: ParamTable, simulate: Simulate, positions: np.ndarray | None = None) -> Visit:
    """A table the tuning reached, as the surrogate reads it, with the engine's train cycles there (float64)."""
    matrix, globals_ = space.encode(table)
    return torch.tensor(matrix), torch.tensor(globals_), torch.tensor(simulate(table, positions))


def around(
    space: ParamSpace,
    table: ParamTable,
    simulate: Simulate,
    trust: float,
    n: int,
    n_blocks: int,
    blocks: int,
    rng: np.random.Generator,
    share: float = 0.25,
) -> list[Visit]:
    """``n`` tables drawn inside the trust region around ``table`` (``fidelity.drawn_tables``),
    each simulated on ``blocks`` train blocks drawn at random."""
    return [
        visit(space, drawn, simulate, np.sort(rng.choice(n_blocks, size=min(blocks, n_blocks), replace=False)))
        for drawn in drawn_tables(space, table, trust, n, share, rng)
    ]


def fidelity(predict: Predict, matrix, globals_, engine, batch: int = 512) -> float:
    """The surrogate's MAPE against the engine at one table, over the train blocks the engine simulated."""
    ok = torch.nonzero(~torch.isnan(engine)).squeeze(1)
    return mape_loss(predict_batched(predict, matrix, globals_, ok, batch), engine[ok].float()).item()


def refit(
    model: torch.nn.Module,
    predict: Predict,
    fitted: list[Fitted],
    steps: int,
    lr: float,
    batch: int,
    rng,
) -> None:
    """``steps`` Adam steps fitting the surrogate to the engine's cycles at the tables
    visited (a batch of one visit's simulated blocks a step), then frozen again.
    A visit given with the confirmed table it came from is predicted as the
    engine's cycles there plus the surrogate's change, as the tuning predicts it."""
    parameters = list(model.parameters())
    for p in parameters:
        p.requires_grad_(True)
    optimizer = torch.optim.Adam(parameters, lr=lr)
    for _ in range(steps):
        (matrix, globals_, engine), anchor = fitted[rng.integers(len(fitted))]
        known = ~torch.isnan(engine)
        if anchor is not None:
            known &= ~torch.isnan(anchor[2])
        ok = torch.nonzero(known).squeeze(1)
        idx = ok[torch.tensor(rng.choice(len(ok), size=min(batch, len(ok)), replace=False))]
        prediction = predict(matrix, globals_, idx)
        if anchor is not None:
            prediction = prediction - predict(anchor[0], anchor[1], idx) + anchor[2][idx].float()
        loss = mape_loss(prediction, engine[idx].float())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    for p in parameters:
        p.requires_grad_(False)
