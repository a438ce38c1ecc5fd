"""Differentiable surrogates of the engine, by name. Adding one is a module
with a ``Surrogate`` subclass (its forward pass) and a line here."""

from difftune_pipeline.surrogates.base import Pairs, Predict, Surrogate, mape_loss, relative_error
from difftune_pipeline.surrogates.lstm import LSTMSurrogate
from difftune_pipeline.surrogates.structured import StructuredSurrogate

SURROGATES: dict[str, type[Surrogate]] = {cls.kind: cls for cls in (StructuredSurrogate, LSTMSurrogate)}


def surrogate_type(kind: str) -> type[Surrogate]:
    if kind not in SURROGATES:
        raise ValueError(f"unknown surrogate model {kind!r}: one of {sorted(SURROGATES)}")
    return SURROGATES[kind]


__all__ = ["SURROGATES", "Pairs", "Predict", "Surrogate", "mape_loss", "relative_error", "surrogate_type"]
