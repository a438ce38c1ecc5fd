"""The surrogate tuner: learning the parameter table through the surrogate (DiffTune §4).

The table is a learnable tensor in ``log_scale`` units (``log2(1 + v)``, v ≥ 0),
so a step moves a 100-cycle placeholder and a one-cycle latency alike, as the
trust region and the prior measure moves; the loss is MAPE against
measured throughputs of the train blocks (plus, with ``prior``, the search's
price of each ``log_scale`` unit away from the default table, per train block);
Adam, ``lr`` units a step.

With ``anchored`` (the default) the surrogate is trusted for differences, not
levels: each block is predicted as ``engine(θₖ) + surrogate(θ) − surrogate(θₖ)``,
where θₖ is the last table the engine confirmed, so a block the surrogate gets
wrong at θₖ does not steer the table. A round is ``validate_every`` steps inside
a trust region of ``trust`` ``log_scale`` units around θₖ; then the engine
simulates the table reached on the train blocks, and it becomes θₖ only when its
train MAPE is lower; otherwise the part of it the engine credits (the moved
rows whose train blocks it made better, ``tuners.credit``) is judged so, and
if that is refused too the round starts again from θₖ with half the step
(once it confirms a part, the globals stay). Every table the engine
simulated refits the surrogate (``refit_steps``). Without ``anchored``, DiffTune's
own objective: the surrogate's levels, with the table scored on val every
``validate_every`` steps. Either way the table with the best engine MAPE on val wins.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
import torch

from difftune_pipeline.engine import ParamTable
from difftune_pipeline.model.params import ParamSpace
from difftune_pipeline.surrogates import Predict, mape_loss
from difftune_pipeline.tuners import active_learning, credit
from difftune_pipeline.tuners.active_learning import around, fidelity, visit
from difftune_pipeline.tuners.base import (
    Problem,
    block_errors,
    check_prior,
    log_scale,
    predict_batched,
)
from difftune_pipeline.tuners.fidelity import fidelity_near
from difftune_pipeline.tuners.pruning import physical

REFIT_ON = ("levels", "differences")


@dataclass
class TuneConfig:
    start: str = "default"  # default | random (DiffTune started from a random table)
    steps: int = 300
    lr: float = 0.02  # log_scale units a step; the full profile's 0.05 (docs/model.md, "The tuners")
    batch_blocks: int = 256
    validate_every: int = 25
    prior: float = 0.0  # summed train error a log_scale unit away from the default costs (as search.prior)
    seed: int = 0
    anchored: bool = True  # the surrogate predicts differences around the engine's θₖ (module docstring)
    trust: float = 1.0  # log_scale units a parameter may move from θₖ in one round (anchored)
    refit_steps: int = 100  # steps fitting the surrogate to the engine at the tables visited (anchored; 0: frozen)
    refit_lr: float = 1e-3
    refit_on: str = "levels"  # levels | differences: what the refit fits at a visit (active_learning)
    around: int = 0  # tables drawn in the trust region around each θₖ the refit learns from too (active_learning)
    around_blocks: int = 1024  # the train blocks each of those is simulated on
    screen: int = 1  # with the tuner ranked: the moves per visit of a row the engine simulates (tuners.screen)

    def __post_init__(self):
        check_prior("tune.prior", self.prior)
        if not self.trust > 0:
            raise ValueError(f"tune.trust must be above 0, got {self.trust!r}")
        if self.around < 0 or self.around_blocks < 1:
            raise ValueError(f"tune.around ≥ 0 and tune.around_blocks ≥ 1, got {self.around!r}, {self.around_blocks!r}")
        if self.refit_on not in REFIT_ON:
            raise ValueError(f"tune.refit_on must be one of {REFIT_ON}, got {self.refit_on!r}")
        if self.screen < 1:
            raise ValueError(f"tune.screen must be at least 1, got {self.screen!r}")


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
    simulate: active_learning.Simulate | None = None,
    model: torch.nn.Module | None = None,
    tied: list[list[int]] = (),
    uses: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[ParamTable, list[dict]]:
    """Optimise the table through ``predict(matrix, globals, block indices)`` (a
    differentiable surrogate) against ``measured`` train throughputs, and
    with ``config.prior`` toward ``reference``'s rows (default: ``start``).
    ``simulate`` (the engine's train cycles under a table, NaN where refused) is
    needed when ``config.anchored``; with ``model`` (the module behind
    ``predict``) and ``config.refit_steps``, the surrogate is refitted in place
    to the engine's cycles at every table the engine simulated. The rows of each
    group in ``tied`` (indices in ``space``) move as one. With ``uses`` (the
    rows each train block uses, ``credit.incidence``), a round the engine refuses
    is judged again as the part of it the engine credits (``tuners.credit``). Returns the
    table with the best ``score`` (engine MAPE on val) among the start table and
    the tables extracted along the optimisation, and the history."""
    if config.anchored and simulate is None:
        raise ValueError("an anchored tuning needs the engine's train cycles (simulate)")
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    truth = torch.tensor(measured, dtype=torch.float32)
    prior_anchor = _units(space, reference or start)[0]
    best_score = score(start)
    best, history = start, [{"step": 0, "surrogate_mape": None, "val_mape": best_score}]
    log(f"tune: start ({config.start}) val MAPE {100 * best_score:.2f}%")

    confirmed = start  # θₖ
    visited = [visit(space, start, simulate)] if config.anchored else []  # θ₀ and each round's, with engine cycles
    # what the refit learns from: those, and the tables drawn around each θₖ, each with
    # the θₖ it came from when the refit fits differences (active_learning.refit)
    fitted: list[active_learning.Fitted] = [(v, None) for v in visited]
    at_confirmed = visited[0] if visited else None
    from_confirmed = lambda: at_confirmed if config.refit_on == "differences" else None  # noqa: E731
    refit = model is not None and config.anchored and config.refit_steps > 0

    def learn_around(table: ParamTable):
        """The engine's cycles around θₖ learned, when asked; θₖ's offset and train MAPE."""
        if refit and config.around:
            drawn = around(space, table, simulate, config.trust, config.around, n_blocks, config.around_blocks, rng)
            fitted.extend((v, from_confirmed()) for v in drawn)
            _refit(model, predict, fitted, config, rng)
        return _anchor(predict, n_blocks, at_confirmed, measured)

    offset, confirmed_train = learn_around(start)
    lr = config.lr
    theta, gvec, optimizer = _start(space, confirmed, lr)
    floor = _floor(space, reference or start)
    still = False  # the globals held at θₖ's
    bounds = _trust_region(space, confirmed, config.trust, floor) if config.anchored else None
    for step in range(1, config.steps + 1):
        idx = torch.tensor(rng.choice(n_blocks, size=min(config.batch_blocks, n_blocks), replace=False))
        loss = mape_loss(predict(_values(theta), _values(gvec), idx) + offset[idx], truth[idx])
        objective = loss + config.prior / n_blocks * (theta - prior_anchor).abs().sum()
        optimizer.zero_grad()
        objective.backward()
        optimizer.step()
        with torch.no_grad():
            for tensor, (low, high) in zip((theta, gvec), bounds or [(f, None) for f in floor]):
                tensor.clamp_(low, high)
            for rows in tied:
                theta[rows] = theta[rows].mean(0)
        if step % config.validate_every and step != config.steps:
            continue
        candidate = space.decode(_values(theta).detach().numpy(), _values(gvec).detach().numpy(), start)
        entry = {"step": step, "surrogate_mape": loss.item()}
        if config.anchored:
            if _same(space, candidate, confirmed):  # no integer moved yet: the round goes on
                continue
            visited.append(visit(space, candidate, simulate))
            fitted.append((visited[-1], from_confirmed()))
            entry["fidelity"] = fidelity(predict, *visited[-1])  # the surrogate where it went, before refitting
            if refit:
                _refit(model, predict, fitted, config, rng)
                offset, confirmed_train = _anchor(predict, n_blocks, at_confirmed, measured)
            candidate_offset, train = _anchor(predict, n_blocks, visited[-1], measured)
            entry["train_mape"], part = train, None
            if not train < confirmed_train and uses is not None:  # refused: the part of it the engine credits
                refused = (candidate, visited[-1]), (confirmed, at_confirmed)
                part = credit.engine_part(space, uses, tied, measured, simulate, *refused)
            if part is not None:
                candidate, visited[-1] = part
                fitted.append((visited[-1], from_confirmed()))
                candidate_offset, train = _anchor(predict, n_blocks, visited[-1], measured)
                entry["round_train_mape"], entry["train_mape"] = entry["train_mape"], train
            if not train < confirmed_train:  # the engine does not confirm the round: half the step, from θₖ
                lr = lr / 2
                theta, gvec, optimizer = _start(space, confirmed, lr)
                history.append({**entry, "val_mape": None, "kept": False})
                whole = f"{100 * entry.get('round_train_mape', train):.2f}%"
                part_note = f" (its credited part {100 * train:.2f}%)" if part else ""
                log(f"tune: step {step}: engine train MAPE {whole}{part_note}, not kept")
                continue
            confirmed, at_confirmed, offset, confirmed_train = candidate, visited[-1], candidate_offset, train
            if part is not None:  # on from the part the engine kept, at the same step
                theta, gvec, optimizer = _start(space, confirmed, lr)
            if config.around:
                offset, confirmed_train = learn_around(confirmed)
            # once a part (θₖ's globals) is confirmed they stay: their harm is every block's, never credited
            still = still or part is not None
            bounds = _trust_region(space, confirmed, config.trust, floor, still)
        val = score(candidate)
        history.append({**entry, "val_mape": val, **({"kept": True} if config.anchored else {})})
        log(
            f"tune: step {step}: surrogate train MAPE {100 * loss.item():.2f}%, "
            + (f"engine train MAPE {100 * train:.2f}%, " if config.anchored else "")
            + (f"the credited part of {100 * entry['round_train_mape']:.2f}%, " if "round_train_mape" in entry else "")
            + f"engine val MAPE {100 * val:.2f}%"
        )
        if val < best_score:
            best, best_score = candidate, val
    return best, history


def _anchor(predict, n_blocks: int, visit, measured: np.ndarray, batch: int = 512):
    """Per train block, engine − surrogate at a visited table (zeros without one,
    and where the engine refused the block), and the engine's train MAPE there."""
    if visit is None:
        return torch.zeros(n_blocks), None
    matrix, globals_, engine = visit
    surrogate = predict_batched(predict, matrix, globals_, np.arange(n_blocks), batch)
    engine = engine.numpy()
    offset = np.where(np.isnan(engine), 0.0, engine - surrogate.numpy()).astype(np.float32)
    return torch.tensor(offset), float(block_errors(engine, measured).mean())


def _refit(model, predict, fitted: list, config: TuneConfig, rng: np.random.Generator) -> None:
    active_learning.refit(model, predict, fitted, config.refit_steps, config.refit_lr, config.batch_blocks, rng)


def _units(space: ParamSpace, table: ParamTable) -> list[torch.Tensor]:
    """The table's parameters and globals in ``log_scale`` units (the tuning's variables)."""
    return [torch.tensor(log_scale(np.abs(a))) for a in space.encode(table)]


def _values(units: torch.Tensor) -> torch.Tensor:
    """The table's values from their ``log_scale`` units, differentiably."""
    return torch.exp2(units) - 1


def _start(space: ParamSpace, table: ParamTable, lr: float):
    """The table's tensors and a fresh optimiser over them."""
    theta, gvec = (u.requires_grad_(True) for u in _units(space, table))
    return theta, gvec, torch.optim.Adam([theta, gvec], lr=lr)


def _floor(space: ParamSpace, default: ParamTable) -> list[torch.Tensor]:
    """The physics floor pruning applies (``pruning.physical``: latency and µops no
    lower than ``min(1, LLVM's)``), in log_scale units, nothing below zero elsewhere:
    a table under it would be confirmed or refused on values it cannot keep."""
    zero = {"uops": 0, "read_advance": [], "ports": {}}
    lowest = {k: {**r, **zero, "latency": [0] * len(r["latency"])} for k, r in default.rows.items()}
    rows, _ = _units(space, physical(replace(default, rows=lowest), default)[0])
    return [rows, torch.zeros(len(space.globals))]


def _trust_region(
    space: ParamSpace, table: ParamTable, trust: float, floor: list[torch.Tensor], still: bool = False
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Bounds of the table's parameters and globals: ``trust`` log_scale units around ``table``
    (the globals held where they are when ``still``), above ``floor``."""
    reach = (trust, 0.0 if still else trust)
    return [(torch.maximum(u - r, f), torch.maximum(u + r, f)) for u, f, r in zip(_units(space, table), floor, reach)]


def _same(space: ParamSpace, a: ParamTable, b: ParamTable) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(space.encode(a), space.encode(b)))


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
        best, history = tune(
            problem.surrogate.predict,
            len(problem.blocks),
            space,
            start,
            problem.measured,
            problem.score,
            self.config,
            log=problem.log,
            reference=problem.default,
            simulate=problem.train_cycles,
            model=problem.surrogate.model,
            tied=credit.tied_rows(space, problem),
            uses=credit.incidence(space.keys, problem.blocks),
        )
        if problem.surrogate.val_predict is not None and len(problem.val_blocks):
            near = fidelity_near(problem, best, self.config.trust, seed=self.config.seed)
            problem.log(
                f"tune: near the table, on val: the surrogate {100 * near['near_level_mape']:.2f}% off the engine, "
                f"trusted for differences {100 * near['near_anchored_mape']:.2f}% "
                f"(the table's own cycles {100 * near['near_engine_change']:.2f}%)"
            )
            history.append(near)
        return best, history
