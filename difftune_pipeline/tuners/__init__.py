"""Tuners and the composition the configuration names. Adding a tuner is a
module with a class that has ``tune(start, problem)`` and a line in ``TUNERS``.
With ``search.repeats``, every composition ends with the direct search run
again from its result (``Repeated``)."""

from collections.abc import Callable

from difftune_pipeline.tuners.base import FromDefault, Problem, Repeated, SurrogateView, Tuner, run
from difftune_pipeline.tuners.gradient import SurrogateTuner, TuneConfig
from difftune_pipeline.tuners.search import DirectSearch, SearchConfig

# name -> the tuners it runs, one after the other, from (tune config, search config)
TUNERS: dict[str, Callable[[TuneConfig, SearchConfig], list[Tuner]]] = {
    "surrogate": lambda tune, search: [SurrogateTuner(tune)],
    "direct": lambda tune, search: [DirectSearch(search)],
    "combined": lambda tune, search: [SurrogateTuner(tune), DirectSearch(search, proposals="surrogate")],
    # the combination, and the direct search from LLVM's table: the better on val
    "combined+direct": lambda tune, search: [
        SurrogateTuner(tune),
        DirectSearch(search, proposals="surrogate"),
        FromDefault(DirectSearch(search)),
    ],
}


def compose(name: str, tune: TuneConfig, search: SearchConfig) -> list[Tuner]:
    if name not in TUNERS:
        raise ValueError(f"unknown tuner {name!r}: one of {tuple(TUNERS)}")
    again = [Repeated(DirectSearch(search), search.repeats)] if search.repeats else []
    return [*TUNERS[name](tune, search), *again]


__all__ = ["TUNERS", "FromDefault", "Problem", "Repeated", "SurrogateView", "Tuner", "compose", "run"]
