"""Tuners and the composition the configuration names. Adding a tuner is a
module with a class that has ``tune(start, problem)`` and a line in ``TUNERS``.
With ``search.repeats``, every composition with a direct search ends with that
search run again from the composition's result (``Repeated``), and every one
ends with ``Pruning`` when its configuration is given (the pipeline gives it)."""

from collections.abc import Callable

from difftune_pipeline.tuners.base import FromDefault, Problem, Repeated, SurrogateView, Tuner, run
from difftune_pipeline.tuners.direct import DirectSearch
from difftune_pipeline.tuners.gradient import SurrogateTuner, TuneConfig
from difftune_pipeline.tuners.pruning import PruneConfig, Pruning
from difftune_pipeline.tuners.search import SearchConfig


def again(search: SearchConfig, proposals: str = "directed", screen: int = 0) -> list[Tuner]:
    """The direct search run again from the result, ``search.repeats`` times at most (none when 0)."""
    return [Repeated(DirectSearch(search, proposals, screen), search.repeats)] if search.repeats else []


# name -> the tuners it runs, one after the other, from (tune config, search config)
TUNERS: dict[str, Callable[[TuneConfig, SearchConfig], list[Tuner]]] = {
    "surrogate": lambda tune, search: [SurrogateTuner(tune)],
    "direct": lambda tune, search: [DirectSearch(search), *again(search)],
    "combined": lambda tune, search: [
        SurrogateTuner(tune),
        DirectSearch(search, proposals="surrogate"),
        *again(search),
    ],
    # the gradient, then the search whose every move the surrogate ranks first and
    # the engine simulates only the best (tuners.screen)
    "ranked": lambda tune, search: [
        SurrogateTuner(tune),
        DirectSearch(search, "ranked", tune.screen),
        *again(search, "ranked", tune.screen),
    ],
    # the combination, and the direct search from LLVM's table: the better on val
    "combined+direct": lambda tune, search: [
        SurrogateTuner(tune),
        DirectSearch(search, proposals="surrogate"),
        FromDefault(DirectSearch(search)),
        *again(search),
    ],
}


def compose(name: str, tune: TuneConfig, search: SearchConfig, prune: PruneConfig | None = None) -> list[Tuner]:
    if name not in TUNERS:
        raise ValueError(f"unknown tuner {name!r}: one of {tuple(TUNERS)}")
    ending = [Pruning(prune)] if prune is not None and (prune.physics or prune.prune) else []
    return TUNERS[name](tune, search) + ending


__all__ = [
    "TUNERS",
    "FromDefault",
    "Problem",
    "PruneConfig",
    "Repeated",
    "SurrogateView",
    "Tuner",
    "compose",
    "run",
]
