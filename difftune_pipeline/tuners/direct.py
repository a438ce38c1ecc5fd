"""The direct-search tuner as the pipeline runs it: rounds of the coordinate
search (search.Search) over the rows by the error they carry and over the
globals, the table scored on val after each round, the best on val kept."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from difftune_pipeline.engine import Engine, ParamTable
from difftune_pipeline.model.metrics import kendall_tau
from difftune_pipeline.tuners.base import Problem
from difftune_pipeline.tuners.moves import Proposer, gradient, gradient_proposer
from difftune_pipeline.tuners.screen import SurrogateScreen
from difftune_pipeline.tuners.search import Search, SearchConfig


def search(
    engine: Engine,
    blocks: list,
    measured: np.ndarray,
    default: ParamTable,
    score: Callable[[ParamTable], float],
    config: SearchConfig,
    start: ParamTable | None = None,
    proposer: Callable[[Search], Proposer] | None = None,
    log=print,
    measure: str = "steady",
    screen: SurrogateScreen | None = None,
) -> tuple[ParamTable, list[dict]]:
    """Coordinate search from ``start`` (default: ``default``); returns the table
    best on ``score`` (engine MAPE on val) among the start and each round's end.
    ``proposer(the search's state)``, called each round, chooses the moves to try;
    ``screen``, the surrogate, which of them the engine simulates."""
    t0 = time.perf_counter()
    state = Search(engine, blocks, measured, default, config, start, measure, screen)
    best = state.full_table()
    best_score = score(best)
    history = [
        {
            "round": 0,
            "simulations": state.spent,
            "train_mape": state.train_mape,
            "train_tau": kendall_tau(state.predicted, state.measured),
            "val_mape": best_score,
            "changed_rows": len(state.changes),
            "seconds": time.perf_counter() - t0,
        }
    ]
    log(
        f"search: start train MAPE {100 * state.train_mape:.2f}% (tau {_tau(history[0]['train_tau'])}), "
        f"val {100 * best_score:.2f}%"
    )
    for round_ in range(1, config.rounds + 1):
        accepted = state.improve_globals()
        mass = {k: state.error[idx].sum() for k, idx in state.index.items()}
        propose = proposer(state) if proposer else None
        for key in sorted(mass, key=mass.get, reverse=True):
            if state.spent >= config.budget:
                break
            accepted += state.improve_row(key, propose)
        table = state.full_table()
        val = score(table)
        history.append(
            {
                "round": round_,
                "simulations": state.spent,
                "train_mape": state.train_mape,
                "train_tau": kendall_tau(state.predicted, state.measured),
                "val_mape": val,
                "changed_rows": len(state.changes),
                "moves": len(accepted),
                **({"surrogate_judged": screen.judged} if screen else {}),
                "seconds": time.perf_counter() - t0,
            }
        )
        log(
            f"search: round {round_}: {len(accepted)} moves, {state.spent} simulations, "
            f"train MAPE {100 * state.train_mape:.2f}% (tau {_tau(history[-1]['train_tau'])}), "
            f"val {100 * val:.2f}%"
        )
        if val < best_score:
            best, best_score = table, val
        if not accepted or state.spent >= config.budget:
            break
    return best, history


def _tau(value: float | None) -> str:
    """Kendall's tau for the log (undefined with fewer than two blocks, or all tied)."""
    return "undefined" if value is None else f"{value:.4f}"


PROPOSALS = ("directed", "surrogate", "ranked")


class DirectSearch:
    """The search from the given table. The moves tried on a row: ``directed``,
    those that push its blocks the way their error asks; ``surrogate``, those the
    surrogate's gradient at the current table proposes (each round); ``ranked``,
    every move, ranked by the surrogate (tuners.screen), the best ``screen`` simulated."""

    stage: ClassVar[str] = "search"

    def __init__(self, config: SearchConfig, proposals: str = "directed", screen: int = 0):
        if proposals not in PROPOSALS:
            raise ValueError(f"unknown proposals {proposals!r}: one of {PROPOSALS}")
        if (proposals == "ranked") != (screen > 0):
            raise ValueError("ranked proposals, and only they, need the moves to simulate per visit (screen)")
        self.config, self.proposals, self.screen = config, proposals, screen
        self.needs_surrogate = proposals != "directed"

    def tune(self, start: ParamTable, problem: Problem) -> tuple[ParamTable, list[dict]]:
        proposer, screen = None, None
        if self.proposals == "ranked":
            screen = SurrogateScreen(problem.surrogate, self.screen)
            proposer = lambda state: state.moves  # noqa: E731
        elif self.proposals == "surrogate":
            view = problem.surrogate

            def proposer(state: Search) -> Proposer:
                grad = gradient(view.predict, len(problem.blocks), view.space, state.full_table(), problem.measured)
                return gradient_proposer(grad, view.space.columns, candidates=state.moves)

        return search(
            problem.engine,
            problem.blocks,
            problem.measured,
            problem.default,
            problem.score,
            self.config,
            start=start,
            proposer=proposer,
            log=problem.log,
            measure=problem.measure,
            screen=screen,
        )
