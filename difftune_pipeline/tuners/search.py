"""The coordinate search on the engine itself (its rounds: ``direct``): per-opcode parameters, one move at a time.

Each move changes one parameter row (latency of every def, µops, one
ReadAdvance entry, the cycles of one resource the row uses) and is scored by
simulating only the train blocks that contain that row, so a move costs as
many simulations as the row has blocks, not the whole train set. The loss is
the train MAPE (with ``prior``, plus a price per ``log_scale`` unit a row or
global moves away from the default table), kept exact: accepting a move
re-simulates all of the row's blocks. A row in fewer than ``min_blocks`` blocks
is left alone, or with ``siblings`` searched together with its siblings (one
scheduling class and mnemonic, the same LLVM values: ``CMPSL`` and ``CMPSQ``),
one value for all, where together they have enough. Rows are visited by the
error they carry; after each round the table is scored on val and the best table on val wins
(test is never looked at).

``propose`` lets another model (a surrogate's gradient) choose the moves; the
engine still accepts or refuses them: the combination of the two.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from difftune_pipeline.engine import LIMITS, Engine, ParamTable, mechanisms
from difftune_pipeline.tuners.base import FAILED_ERROR, borrowed_units, check_prior, log_scale, sibling_groups
from difftune_pipeline.tuners.moves import Proposer, distance, moves
from difftune_pipeline.tuners.screen import SurrogateScreen


@dataclass
class SearchConfig:
    budget: int = 30_000  # block simulations, every round together
    rounds: int = 3
    min_blocks: int = 2  # rows in fewer train blocks are left alone (alone they would overfit) ...
    siblings: bool = False  # ... or, with this, searched together with their siblings
    max_moves_per_row: int = 3  # accepted moves on one row per visit
    sample_blocks: int = 150  # a move is judged on at most this many of the row's blocks
    halving: bool = False  # also try halving values >= 4: reaches far-off values (znver1's 100-cycle placeholders)
    prior: float = 0.5  # the train error (summed over blocks) a log_scale unit away from the default must buy
    seed: int = 0
    repeats: int = 0  # then this search again from the tuners' result, while val falls, at most this often
    # train simulations stop once their iterations repeat (the engine's fast_forward) where
    # the steady state is tuned on: about twice as fast, and the steady state equal on ~99% of
    # blocks (bench/engine_fast_forward.py); val, pruning and the evaluation simulate every
    # iteration, and so does a search on Total Cycles (which fast-forward extrapolates)
    fast_forward: bool = True

    def __post_init__(self):
        check_prior("search.prior", self.prior)
        if self.repeats < 0:
            raise ValueError(f"search.repeats must be at least 0, got {self.repeats}")


class Search:
    """The state of a search: the rows changed so far and the train errors under them."""

    def __init__(
        self,
        engine: Engine,
        blocks: list,
        measured: np.ndarray,
        default: ParamTable,
        config: SearchConfig,
        start: ParamTable | None = None,
        measure: str = "steady",
        screen: SurrogateScreen | None = None,
    ):
        self.engine, self.blocks, self.default, self.config = engine, blocks, default, config
        self.measure, self.screen = measure, screen
        self.measured = np.asarray(measured, dtype=float)
        start = start or default
        # Rows that differ from LLVM's own, the default's included (the stack
        # engine changes push and pop): the engine takes an absent row as LLVM's.
        llvm = engine.default_table(blocks).rows
        self.changes = {k: r for k, r in start.rows.items() if llvm.get(k) != r}
        self.globals = dict(start.globals)
        self.rng = np.random.default_rng(config.seed)
        self.spent = 0
        index: dict[str, list[int]] = {}
        for b, block in enumerate(blocks):
            for key in dict.fromkeys(block.row_keys):  # in the block's order, not the hash seed's
                if key in default.rows:
                    index.setdefault(key, []).append(b)
        # the rows each searched row stands for: itself, or with ``siblings``, for a row
        # in too few blocks, its group (tuners.base.sibling_groups) where together they have enough
        self.members = {k: [k] for k, v in index.items() if len(v) >= config.min_blocks}
        if config.siblings:
            few = sorted(k for k, v in index.items() if len(v) < config.min_blocks)
            groups: dict[tuple, list[str]] = {}
            for key, group in sibling_groups(few, default, engine.sched_classes).items():
                groups.setdefault(group, []).append(key)
            for keys in groups.values():
                if len(keys) > 1 and sum(len(index[k]) for k in keys) >= config.min_blocks:
                    self.members[keys[0]] = keys
                    index[keys[0]] = sorted({b for k in keys for b in index[k]})
        self.index = {k: np.array(index[k]) for k in self.members}
        self.units = borrowed_units(self.members, default, engine.resources())
        self.signed = self._errors(np.arange(len(blocks)), [self.table()])[0]  # (pred - truth) / truth

    def _rows(self, key: str, row: dict) -> dict:
        """``row`` for the searched row ``key`` and every row it stands for."""
        return dict.fromkeys(self.members[key], row)

    def table(self, extra: dict | None = None, globals_: dict | None = None) -> ParamTable:
        """The current table, sparse: only the rows that differ from LLVM's (absent rows keep LLVM's values)."""
        rows = {**self.changes, **(extra or {})}
        return self._with(dict(globals_ or self.globals), rows)

    def full_table(self) -> ParamTable:
        return self._with(dict(self.globals), {**self.default.rows, **self.changes})

    def _with(self, globals_: dict, rows: dict) -> ParamTable:
        d = self.default
        return ParamTable(d.mcpu, d.llvm_version, globals_, rows, d.mechanisms, d.harness)

    @property
    def error(self) -> np.ndarray:
        return np.abs(self.signed)

    @staticmethod
    def _gain(before: np.ndarray, after: np.ndarray, population: int) -> np.ndarray:
        """The summed error ``after`` (one row per candidate) saves on the sample
        ``before`` was judged on, scaled to the ``population`` it stands for."""
        return (np.abs(before).sum() - np.abs(after).sum(axis=-1)) * population / before.shape[-1]

    def _errors(self, idx: np.ndarray, tables: list[ParamTable]) -> np.ndarray:
        """[tables, len(idx)] signed relative errors of the blocks ``idx`` (a
        block the engine refuses counts as ``FAILED_ERROR`` off)."""
        n = len(idx)
        result = self.engine.simulate_pairs(
            self.blocks,
            tables,
            np.tile(idx, len(tables)),
            np.repeat(np.arange(len(tables)), n),
            fast_forward=self.config.fast_forward and self.measure == "steady",
        )
        self.spent += n * len(tables)
        truth = np.tile(self.measured[idx], len(tables))
        err = np.where(result.ok, (result.predicted(self.measure) - truth) / truth, FAILED_ERROR)
        return err.reshape(len(tables), n)

    def directed(self, key: str, row: dict) -> list[tuple[str, int, dict]]:
        """The unit moves that push the row's blocks the way their error asks:
        smaller latencies, µops and port cycles (larger ReadAdvance) where the
        engine predicts too many cycles, the opposite where too few."""
        too_slow = self.signed[self.index[key]].mean() > 0
        return [
            (c, d, r)
            for c, d, r in self.moves(key, row)
            if ((d > 0) if c.startswith("read_advance") else (d < 0)) == too_slow
        ]

    def moves(self, key: str, row: dict) -> list[tuple[str, int, dict]]:
        """Every move of the row, both ways, its forms' functional units included (``tuners.moves``)."""
        return moves(row, self.config.halving, self.units.get(key))

    def improve_row(self, key: str, propose: Proposer | None = None) -> list[str]:
        """Greedy moves on one row while they lower the train error; returns the accepted labels."""
        accepted = []
        idx_all = self.index[key]
        for _ in range(self.config.max_moves_per_row):
            row = self.changes.get(key, self.default.rows[key])
            candidates = propose(key, row) if propose else self.directed(key, row)
            if not candidates:
                break
            idx = (
                idx_all
                if len(idx_all) <= self.config.sample_blocks
                else np.sort(self.rng.choice(idx_all, self.config.sample_blocks, replace=False))
            )
            reference, here = self.default.rows[key], distance(row, self.default.rows[key])
            price = self.config.prior * np.array([distance(r, reference) - here for _, _, r in candidates])
            if self.screen is not None:
                kept = self._screened(key, candidates, idx, price)
                if kept is not None and not kept:
                    break
                if kept is not None:
                    candidates, price = [candidates[i] for i in kept], price[kept]
            if self.spent + len(idx) * len(candidates) > self.config.budget:
                break
            errs = self._errors(idx, [self.table(self._rows(key, r)) for _, _, r in candidates])
            # a sample's gain scaled to the row's blocks, less the prior's price of the step
            gain = self._gain(self.signed[idx], errs, len(idx_all)) - price
            best = int(np.argmax(gain))
            if gain[best] <= 1e-9:
                break
            column, step, row = candidates[best]
            if len(idx) < len(idx_all):  # judged on a sample: confirm on every block of the row
                full = self._errors(idx_all, [self.table(self._rows(key, row))])[0]
                if np.abs(full).sum() + price[best] >= self.error[idx_all].sum():
                    break
                self.signed[idx_all] = full
            else:
                self.signed[idx] = errs[best]
            self.changes.update(self._rows(key, row))
            accepted.append(f"{'/'.join(self.members[key])} {column}{step:+d}")
        return accepted

    def _screened(self, key: str, candidates: list, idx: np.ndarray, price: np.ndarray) -> list[int] | None:
        """The candidates the engine is to simulate: the ``screen.top`` the surrogate
        says gain most (tuners.screen), none when it sees no gain; None when the
        surrogate does not know the row (the engine then judges every candidate)."""
        change = self.screen.change(self.full_table(), [self._rows(key, r) for _, _, r in candidates], idx)
        if change is None:
            return None
        estimate = self.signed[idx] + change / self.measured[idx]
        gain = self._gain(self.signed[idx], estimate, len(self.index[key])) - price
        order = np.argsort(-gain, kind="stable")[: self.screen.top]
        return [int(i) for i in order if gain[i] > 1e-9]

    def improve_globals(self) -> list[str]:
        """Each global one step up or down (the reorder buffer by 16, a mechanism's
        parameter by its declared ``move``), judged on every train block while that costs at most a quarter of
        the budget (llvm-mca's two globals), else on a random sample that does.
        Every global whose step paid then moves, the best first, each on top of
        those before it and again only while it pays there, going on stepping the
        same way while that pays: a mechanism's parameter that only its few blocks
        feel moves in the same round as the global that moves them all. The moves
        are then simulated on every block."""
        everything = np.arange(len(self.blocks))
        step = {"micro_op_buffer_size": 16} | {n: p.move for n, p in mechanisms.PARAMETERS.items()}
        options = [(g, d * step.get(g, 1)) for g in self.globals for d in (-1, 1)]
        candidates = [(g, d) for g, d in options if LIMITS[g][0] <= self.globals[g] + d <= LIMITS[g][1]]
        if not candidates:
            return []
        judged = everything
        if len(everything) * len(candidates) > self.config.budget // 4:
            size = max(self.config.sample_blocks, self.config.budget // 4 // len(candidates))
            judged = np.sort(self.rng.choice(everything, min(size, len(everything)), replace=False))
        final = len(everything) if len(judged) < len(everything) else 0  # the moves on every block
        if self.spent + len(judged) * len(candidates) + final > self.config.budget:
            return []
        here = self.signed[judged]
        errs = self._errors(
            judged, [self.table(globals_={**self.globals, g: self.globals[g] + d}) for g, d in candidates]
        )
        gain = np.array(
            [self._global_gain(here, e, g, self.globals, self.globals[g] + d) for (g, d), e in zip(candidates, errs)]
        )
        current, accepted, moved = dict(self.globals), [], set()
        for i in np.argsort(-gain, kind="stable"):
            g, d = candidates[i]
            if gain[i] <= 1e-9 or g in moved:
                continue
            if accepted:  # on top of the moves before it: judged again
                if self.spent + len(judged) + final > self.config.budget:
                    break
                there = self._errors(judged, [self.table(globals_={**current, g: current[g] + d})])[0]
                if self._global_gain(here, there, g, current, current[g] + d) <= 1e-9:
                    continue
            else:
                there = errs[i]
            current, here, steps = {**current, g: current[g] + d}, there, 1
            while self.spent + len(judged) + final <= self.config.budget:  # further the same way while it pays
                further = current[g] + d
                if not LIMITS[g][0] <= further <= LIMITS[g][1]:
                    break
                there = self._errors(judged, [self.table(globals_={**current, g: further})])[0]
                if self._global_gain(here, there, g, current, further) <= 1e-9:
                    break
                current, here, steps = {**current, g: further}, there, steps + 1
            moved.add(g)
            accepted.append(f"{g}{d * steps:+d}")
        if not accepted:
            return []
        self.globals = current
        self.signed = here if len(judged) == len(everything) else self._errors(everything, [self.table()])[0]
        return accepted

    def _global_gain(self, before: np.ndarray, after: np.ndarray, g: str, globals_: dict, value: int) -> float:
        """What setting global ``g`` of ``globals_`` to ``value`` saves on the judged
        blocks (scaled to the train set), less the prior's price of the distance it adds from the default."""
        away = lambda v: abs(log_scale(v) - log_scale(self.default.globals[g]))  # noqa: E731
        price = self.config.prior * (away(value) - away(globals_[g]))
        return float(self._gain(before, after, len(self.blocks))) - price

    @property
    def predicted(self) -> np.ndarray:
        """The train blocks' cycles as the search has them (a refused block at ``FAILED_ERROR``
        off), rounded so that blocks the engine ties stay tied for Kendall's tau."""
        return np.round(self.measured * (1 + self.signed), 6)

    @property
    def train_mape(self) -> float:
        return float(self.error.mean())
