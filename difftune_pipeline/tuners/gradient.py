"""The surrogate tuner: learning the parameter table through a frozen surrogate (DiffTune §4).

The table is a learnable tensor; ``abs()`` keeps it non-negative before the
surrogate; the loss is MAPE against measured throughputs of the train blocks
(plus, with ``prior``, the search's price of each ``log_scale`` unit away from
the default table, per train block); Adam with lr 0.05. Every few steps the
current table is extracted to valid integers and scored on the val blocks by the
real engine; the best one wins.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from difftune_pipeline.engine import ParamTable
from difftune_pipeline.model.params import ParamSpace
from difftune_pipeline.surrogates import Predict, mape_loss, relative_error
from difftune_pipeline.tuners.base import Problem, check_prior, log_scale


@dataclass
class TuneConfig:
    start: str = "default"  # default | random (DiffTune started from a random table)
    steps: int = 300
    lr: float = 0.05
    batch_blocks: int = 256
    validate_every: int = 25
    prior: float = 0.0  # summed train error a log_scale unit away from the default costs (as search.prior)
    seed: int = 0

    def __post_init__(self):
        check_prior("tune.prior", self.prior)


def tune(
    predict: Predict,
    n_blocks: int,
    space: ParamSpace,
    start: ParamTable,
    measured: np.ndarray,
    score: Callable[[ParamTable], float],
    config: TuneConfig,
    log=print,
    reference: ParamTable | None = None,
) -> tuple[ParamTable, list[dict]]:
    """Optimise the table through ``predict(matrix, globals, block indices)`` (a
    frozen differentiable surrogate) against ``measured`` train throughputs, and
    with ``config.prior`` toward ``reference``'s rows (default: ``start``).
    Returns the table with the best ``score`` (engine MAPE on val) among the
    start table and the tables extracted along the optimisation, and the history."""
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    matrix, globals_ = space.encode(start)
    theta = torch.tensor(matrix, requires_grad=True)
    gvec = torch.tensor(globals_, requires_grad=True)
    truth = torch.tensor(measured, dtype=torch.float32)
    anchor = torch.tensor(log_scale(space.encode(reference or start)[0]))
    optimizer = torch.optim.Adam([theta, gvec], lr=config.lr)

    best_score = score(start)
    best, history = start, [{"step": 0, "surrogate_mape": None, "val_mape": best_score}]
    log(f"tune: start ({config.start}) val MAPE {100 * best_score:.2f}%")
    for step in range(1, config.steps + 1):
        idx = torch.tensor(rng.choice(n_blocks, size=min(config.batch_blocks, n_blocks), replace=False))
        loss = mape_loss(predict(theta.abs(), gvec.abs(), idx), truth[idx])
        # log_scale of the non-negative table, in torch so that the gradient flows
        objective = loss + config.prior / n_blocks * (torch.log2(1 + theta.abs()) - anchor).abs().sum()
        optimizer.zero_grad()
        objective.backward()
        optimizer.step()
        if step % config.validate_every == 0 or step == config.steps:
            candidate = space.decode(theta.detach().numpy(), gvec.detach().numpy(), start)
            val = score(candidate)
            history.append({"step": step, "surrogate_mape": loss.item(), "val_mape": val})
            log(f"tune: step {step}: surrogate train MAPE {100 * loss.item():.2f}%, engine val MAPE {100 * val:.2f}%")
            if val < best_score:
                best, best_score = candidate, val
    return best, history


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


class SurrogateTuner:
    """DiffTune: gradient descent on the table through the frozen surrogate,
    from the given table or (``start = "random"``) from a sampled one as DiffTune did."""

    stage: ClassVar[str] = "surrogate"
    needs_surrogate: ClassVar[bool] = True

    def __init__(self, config: TuneConfig):
        self.config = config

    def tune(self, start: ParamTable, problem: Problem) -> tuple[ParamTable, list[dict]]:
        space = problem.surrogate.space
        if self.config.start == "random":
            start = space.sampled_table("difftune", self.config.seed, problem.default)
        return tune(
            problem.surrogate.predict,
            len(problem.blocks),
            space,
            start,
            problem.measured,
            problem.score,
            self.config,
            log=problem.log,
            reference=problem.default,
        )
