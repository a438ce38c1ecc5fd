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
        self._matrix: np.ndarray | None = None  # the last table asked about, encoded
        self._encoded: list[dict | None] = []  # the row each line of _matrix encodes

    def change(self, table: ParamTable, variants: list[dict[str, dict]], idx: np.ndarray) -> np.ndarray | None:
        """[len(variants), len(idx)]: how many cycles the surrogate adds to each of
        the train blocks ``idx`` when ``table``'s rows become a variant's (row key ->
        row); None when no row of the variants is in the surrogate's space."""
        space = self.view.space
        if not any(k in space.index for variant in variants for k in variant):
            return None
        matrix, globals_ = self._encode(table)
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

    def _encode(self, table: ParamTable) -> tuple[np.ndarray, np.ndarray]:
        """``space.encode(table)``, re-encoding only the rows that are not the ones
        encoded last: the search asks about its table once per visit of a row, and
        between two visits only the rows of the moves it accepted change."""
        space = self.view.space
        if self._matrix is None:
            self._matrix, globals_ = space.encode(table)
            self._encoded = [table.rows.get(key) for key in space.keys]
            return self._matrix, globals_
        for i, key in enumerate(space.keys):
            row = table.rows.get(key)
            if row is not self._encoded[i]:
                self._matrix[i] = 0 if row is None else space.encode_row(row)
                self._encoded[i] = row
        return self._matrix, np.array([table.globals[k] for k in space.globals], dtype=np.float32)
