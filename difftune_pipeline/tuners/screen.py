"""The surrogate as the search's first judge: every move on a row is scored by
the surrogate trusted for differences (the engine's error at the current table
plus the surrogate's change in the block's cycles), and the engine simulates
only the few it ranks best (``tune.screen``). The engine still accepts or
refuses each of those, so a move the surrogate misjudges costs simulations or a
missed move, never a wrong one; a row outside the surrogate's space is judged
by the engine alone."""

from __future__ import annotations

import numpy as np
import torch

from difftune_pipeline.engine import ParamTable
from difftune_pipeline.tuners.base import SurrogateView, predict_batched


class SurrogateScreen:
    def __init__(self, view: SurrogateView, top: int):
        self.view, self.top = view, top
        self.judged = 0  # moves the surrogate judged, each on a row's sampled blocks

    def change(self, table: ParamTable, variants: list[dict[str, dict]], idx: np.ndarray) -> np.ndarray | None:
        """[len(variants), len(idx)]: how many cycles the surrogate adds to each of
        the train blocks ``idx`` when ``table``'s rows become a variant's (row key ->
        row); None when no row of the variants is in the surrogate's space."""
        space = self.view.space
        if not any(k in space.index for variant in variants for k in variant):
            return None
        matrix, globals_ = space.encode(table)
        base = predict_batched(self.view.predict, matrix, globals_, idx)
        changes = []
        for variant in variants:
            moved = matrix.copy()
            for key, row in variant.items():
                if key in space.index:
                    moved[space.index[key]] = space.encode_row(row)
            changes.append(predict_batched(self.view.predict, moved, globals_, idx) - base)
        self.judged += len(variants)
        return torch.stack(changes).double().numpy()
