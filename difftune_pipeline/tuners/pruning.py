"""The last stage of every composition: what the tuners learned is kept only where
it holds up beyond the train blocks.

A search moves a row when the summed train error falls, so an opcode seen in a
handful of train blocks is moved by them alone (``andb $8, %cl`` learned at 0.28
cycles a iteration: a latency below one cycle on a register each iteration waits
for). Two rules undo that, and a third carries what was learned to rows train
never saw:

- **Physics**: no latency below one cycle where LLVM's is at least one (a written
  register is read one cycle later at the earliest; LLVM's zero latencies, its
  idioms, stay reachable, and so does 0 for a register move the CPU eliminates:
  Haswell's search takes ``MOV64rr`` there), and no instruction without a µop
  where LLVM gives it one.
- **Pruning on val**: each learned row (and global) goes back to LLVM's value
  unless the val blocks that use it are predicted better with it, and no more of
  them than ``harm_share`` (one in twenty, rounded down: none of a row's first 19)
  more than ``max_harm`` (20 points of error) worse. Asking that none get worse
  sent back Ivy Bridge's two-µop simple decoders (every val block uses a global;
  1.2 points gained on val, 1.4 on train at the cost of 3 blocks of 1,013) and
  ``MOV32ri`` (0.4 and 0.3 points, 4 of its 124 blocks). A row no val block uses
  has no evidence beyond train and goes back too, unless another opcode of its
  sibling group (below), with train blocks of its own, was learned to the same
  values (the search moves rows in too few blocks with their siblings, as one).
  Rows are visited by how many val blocks use them, most first, each judged on
  those blocks under the table as pruned so far. A row val keeps must also still
  lower the summed error of its train blocks (the first ``train_blocks``) in that
  table: the search moved it in the context of rows that pruning may have taken
  back since, and val's few blocks can back a row its train blocks no longer need
  (``ADD64rr`` given a second µop: 9 val blocks gained, its 72 train blocks lost).
- **Sharing**: a row no train block uses takes the values learned for a sibling,
  an opcode of the same LLVM scheduling class and mnemonic apart from its width
  (``CMPSW`` from ``CMPSQ``) with the same LLVM values, where the sibling's learned
  values survived pruning (the one with the most train blocks); judged on val as
  above where val blocks use it. LLVM gives unseen rows values of its own: Zen+'s
  string compares 100 cycles an iteration, where AnICA measures 3.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from difftune_pipeline.engine import ParamTable, extended
from difftune_pipeline.engine.table import canonical_row
from difftune_pipeline.model.metrics import WORSE_POINTS
from difftune_pipeline.tuners.base import Problem, sibling_groups


@dataclass(frozen=True)
class PruneConfig:
    physics: bool = True  # latencies and µops no lower than min(1, LLVM's)
    prune: bool = True  # rows back to LLVM's unless val improves with them
    share: bool = True  # rows no train block uses take a learned sibling's values
    # what a row must save on its val blocks to stay (summed relative error: 0.0 keeps a
    # row that helps at all; a row that changes nothing on val goes back)
    min_gain: float = 0.0
    # the most a row may worsen one val block's relative error and stay (0.20: 20 points)
    max_harm: float = WORSE_POINTS
    # the share of a row's val blocks that may get more than max_harm worse (rounded down)
    harm_share: float = 0.05
    # a kept row must also lower the summed error of this many of its train blocks
    # (the first ones) in the pruned table; 0: judged on val alone
    train_blocks: int = 300

    def __post_init__(self):
        for name in ("min_gain", "max_harm", "harm_share", "train_blocks"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"prune.{name} must be at least 0, got {getattr(self, name)!r}")


def physical(table: ParamTable, default: ParamTable) -> tuple[ParamTable, list[str]]:
    """``table`` with each latency and its µops raised to ``min(1, LLVM's)``, and the
    rows it raised; the latency of a move the CPU eliminates may stay at 0."""
    rows, raised = dict(table.rows), []
    moves = extended.eliminable_moves(table.mcpu)
    for key, row in table.rows.items():
        base = default.rows.get(key)
        if base is None or len(base["latency"]) != len(row["latency"]):
            continue
        floor = 0 if key in moves else 1
        latency = [max(v, min(floor, b)) for v, b in zip(row["latency"], base["latency"])]
        uops = max(row["uops"], min(1, base["uops"]))
        if latency != row["latency"] or uops != row["uops"]:
            rows[key] = canonical_row({**row, "latency": latency, "uops": uops})
            raised.append(key)
    return _with(table, table.globals, rows), raised


def _learned(table: ParamTable, default: ParamTable, train_blocks: list) -> dict[str, int]:
    """The rows train blocks use that ``table`` moved from LLVM's, with how many train blocks use each."""
    users: dict[str, int] = {}
    for block in train_blocks:
        for key in dict.fromkeys(block.row_keys):
            users[key] = users.get(key, 0) + 1
    return {
        k: n
        for k, n in users.items()
        if k in default.rows and canonical_row(table.rows[k]) != canonical_row(default.rows[k])
    }


def agreeing(table: ParamTable, default: ParamTable, classes, train_blocks: list) -> frozenset:
    """Learned rows that another opcode of their sibling group, with train blocks
    of its own, was learned to the same values as (the search moves a row in too
    few blocks with its siblings, as one): each opcode's blocks back the others'."""
    learned = sorted(_learned(table, default, train_blocks))
    together: dict[tuple, list[str]] = {}
    for key, group in sibling_groups(learned, default, classes).items():
        together.setdefault((group, repr(canonical_row(table.rows[key]))), []).append(key)
    return frozenset(k for keys in together.values() if len(keys) > 1 for k in keys)


def siblings(table: ParamTable, default: ParamTable, classes, train_blocks: list) -> dict[str, str]:
    """For each row no train block uses and ``table`` left at LLVM's values, the
    learned sibling it takes values from: same scheduling class (``classes``:
    ``Engine.sched_classes``), same ``stem``, same LLVM values; the one with the most train blocks."""
    learned = _learned(table, default, train_blocks)
    used = {k for block in train_blocks for k in block.row_keys}
    unseen = [k for k in table.rows if k not in used and k in default.rows and table.rows[k] == default.rows[k]]
    group = sibling_groups([*learned, *unseen], default, classes)
    best: dict[tuple, str] = {}
    for k in sorted(learned, key=lambda k: (-learned[k], k)):
        best.setdefault(group[k], k)
    return {k: best[group[k]] for k in unseen if group[k] in best}


def _value(table: ParamTable, key: str):
    """A row of ``table``, or a global's value."""
    return table.rows[key] if key in table.rows else table.globals[key]


def _with(table: ParamTable, globals_: dict, rows: dict) -> ParamTable:
    return ParamTable(table.mcpu, table.llvm_version, dict(globals_), rows, table.mechanisms, table.harness)


class Pruning:
    """The physics floor, then each learned row back to LLVM's unless val gains by it."""

    stage: ClassVar[str] = "prune"
    needs_surrogate = False

    def __init__(self, config: PruneConfig):
        self.config = config

    def tune(self, start: ParamTable, problem: Problem) -> tuple[ParamTable, list[dict]]:
        default, config = problem.default, self.config
        table, raised = physical(start, default) if config.physics else (start, [])
        # what each change undid held before it: the table as the tuners left it is the
        # stored one with these rows and globals put back
        history = {"val_before": problem.score(start), "raised": {k: start.rows[k] for k in raised}}
        if config.prune and problem.val_blocks:
            agreed = agreeing(table, default, problem.engine.sched_classes, problem.blocks)
            table, kept, reverted = self._prune(table, problem, agreed=agreed)
            history.update(rows_kept=kept, reverted={k: _value(start, k) for k in reverted})
        if config.share:
            taken = siblings(table, default, problem.engine.sched_classes, problem.blocks)
            table = _with(table, table.globals, {**table.rows, **{k: table.rows[s] for k, s in taken.items()}})
            refused: list[str] = []
            if taken and problem.val_blocks:  # judged on val where val uses them, kept where it does not
                table, _, refused = self._prune(table, problem, list(taken), agreed=frozenset(taken))
            history["from_siblings"] = {k: default.rows[k] for k in taken if k not in refused}
        history["val_after"] = problem.score(table)
        problem.log(
            f"prune: {len(raised)} rows raised to one cycle or µop, {history.get('rows_kept', 0)} learned rows kept, "
            f"{len(history.get('reverted', {}))} back to LLVM's, {len(history.get('from_siblings', {}))} from a "
            f"sibling; val MAPE {100 * history['val_before']:.2f}% -> {100 * history['val_after']:.2f}%"
        )
        return table, [history]

    def _errors(self, problem: Problem, table: ParamTable, idx: np.ndarray, split: str = "val") -> np.ndarray:
        pool, measured = (
            (problem.val_blocks, problem.val_measured) if split == "val" else (problem.blocks, problem.measured)
        )
        result = problem.engine.simulate([pool[i] for i in idx], table)
        truth = measured[idx]
        return np.where(result.ok, np.abs(result.predicted(problem.measure) - truth) / truth, np.inf)

    def _train_gains(self, problem: Problem, table: ParamTable, back: ParamTable, idx: list[int]) -> bool:
        """Whether the train blocks ``idx`` have a lower summed error under ``table`` than ``back`` (none: yes)."""
        if not idx:
            return True
        idx = np.array(idx, dtype=np.int64)
        return bool(self._errors(problem, table, idx, "train").sum() < self._errors(problem, back, idx, "train").sum())

    def _harmless(self, with_row: np.ndarray, without: np.ndarray) -> bool:
        """Whether few enough blocks get ``max_harm`` worse with a row: ``harm_share``, rounded down."""
        harmed = int(np.sum(with_row - without > self.config.max_harm))
        return harmed <= int(self.config.harm_share * len(with_row))

    def _prune(
        self, table: ParamTable, problem: Problem, only: list[str] | None = None, agreed: frozenset = frozenset()
    ) -> tuple[ParamTable, int, list[str]]:
        """Judges every moved row and global on val (``only``: these rows); a row
        no val block uses stays only where it is in ``agreed``."""
        default = problem.default
        users, train_users = _users(problem.val_blocks), _users(problem.blocks, self.config.train_blocks)
        first_train = list(range(min(len(problem.blocks), self.config.train_blocks)))  # a global's train blocks
        everyone = list(range(len(problem.val_blocks)))
        moved = [(g, everyone) for g in table.global_names() if table.globals.get(g) != default.globals.get(g)]
        moved += [
            (k, users.get(k, []))
            for k, r in table.rows.items()
            if k in default.rows and canonical_row(r) != canonical_row(default.rows[k])
        ]
        if only is not None:
            moved = [m for m in moved if m[0] in only]
        moved.sort(key=lambda m: (-len(m[1]), m[0]))
        rows, globals_ = dict(table.rows), dict(table.globals)
        errors = self._errors(problem, table, np.arange(len(problem.val_blocks)))
        kept, reverted = 0, []
        for key, idx in moved:
            back_rows, back_globals = dict(rows), dict(globals_)
            if key in globals_ and key not in rows:
                back_globals[key] = default.globals[key]
            else:
                back_rows[key] = default.rows[key]
            if not idx and key in agreed:
                kept += 1
                continue
            idx = np.array(idx, dtype=np.int64)
            back = _with(table, back_globals, back_rows)
            without = self._errors(problem, back, idx) if len(idx) else None
            train = train_users.get(key, []) if key in rows else first_train
            if (
                without is not None
                and errors[idx].sum() + self.config.min_gain < without.sum()
                and self._harmless(errors[idx], without)
                and self._train_gains(problem, _with(table, globals_, rows), back, train)
            ):
                kept += 1
                continue
            rows, globals_ = back_rows, back_globals
            if without is not None:
                errors[idx] = without
            reverted.append(key)
        return _with(table, globals_, rows), kept, reverted


def _users(blocks: list, first: int | None = None) -> dict[str, list[int]]:
    """The blocks that use each row, the first ``first`` of them."""
    out: dict[str, list[int]] = {}
    for i, block in enumerate(blocks):
        for key in dict.fromkeys(block.row_keys):
            out.setdefault(key, []).append(i)
    return {k: v[:first] for k, v in out.items()}
