"""The last stage of every composition: what the tuners learned is kept only where
it holds up beyond the train blocks.

A search moves a row when the summed train error falls, so an opcode seen in a
handful of train blocks is moved by them alone (``andb $8, %cl`` learned at 0.28
cycles a iteration: a latency below one cycle on a register each iteration waits
for). Two rules undo that:

- **Physics**: no latency below one cycle where LLVM's is at least one (a written
  register is read one cycle later at the earliest; LLVM's zero latencies, its
  idioms and eliminated moves, stay reachable), and no instruction without a µop
  where LLVM gives it one.
- **Pruning on val**: each learned row (and global) goes back to LLVM's value
  unless the val blocks that use it are predicted better with it, and none of
  them more than ``max_harm`` (20 points of error) worse: a row no val block uses
  has no evidence beyond train and goes back too. Rows are visited by how many
  val blocks use them, most first, each judged on those blocks under the table as
  pruned so far.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from difftune_pipeline.engine import ParamTable
from difftune_pipeline.engine.table import canonical_row
from difftune_pipeline.tuners.base import Problem


@dataclass(frozen=True)
class PruneConfig:
    physics: bool = True  # latencies and µops no lower than min(1, LLVM's)
    prune: bool = True  # rows back to LLVM's unless val improves with them
    # what a row must save on its val blocks to stay (summed relative error: 0.0 keeps a
    # row that helps at all; a row that changes nothing on val goes back)
    min_gain: float = 0.0
    # the most a row may worsen one val block's relative error and stay (0.20: 20 points)
    max_harm: float = 0.20

    def __post_init__(self):
        for name in ("min_gain", "max_harm"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"prune.{name} must be at least 0, got {getattr(self, name)!r}")


def physical(table: ParamTable, default: ParamTable) -> tuple[ParamTable, list[str]]:
    """``table`` with each latency and its µops raised to ``min(1, LLVM's)``, and the rows it raised."""
    rows, raised = dict(table.rows), []
    for key, row in table.rows.items():
        base = default.rows.get(key)
        if base is None or len(base["latency"]) != len(row["latency"]):
            continue
        latency = [max(v, min(1, b)) for v, b in zip(row["latency"], base["latency"])]
        uops = max(row["uops"], min(1, base["uops"]))
        if latency != row["latency"] or uops != row["uops"]:
            rows[key] = canonical_row({**row, "latency": latency, "uops": uops})
            raised.append(key)
    return _with(table, table.globals, rows), raised


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
            table, kept, reverted = self._prune(table, problem)
            history.update(rows_kept=kept, reverted={k: _value(start, k) for k in reverted})
        history["val_after"] = problem.score(table)
        problem.log(
            f"prune: {len(raised)} rows raised to one cycle or µop, {history.get('rows_kept', 0)} learned rows kept, "
            f"{len(history.get('reverted', {}))} back to LLVM's; val MAPE {100 * history['val_before']:.2f}% -> "
            f"{100 * history['val_after']:.2f}%"
        )
        return table, [history]

    def _errors(self, problem: Problem, table: ParamTable, idx: np.ndarray) -> np.ndarray:
        blocks = [problem.val_blocks[i] for i in idx]
        result = problem.engine.simulate(blocks, table)
        truth = problem.val_measured[idx]
        return np.where(result.ok, np.abs(result.predicted(problem.measure) - truth) / truth, np.inf)

    def _prune(self, table: ParamTable, problem: Problem) -> tuple[ParamTable, int, list[str]]:
        default = problem.default
        users: dict[str, list[int]] = {}
        for i, block in enumerate(problem.val_blocks):
            for key in set(block.row_keys):
                users.setdefault(key, []).append(i)
        everyone = list(range(len(problem.val_blocks)))
        moved = [(g, everyone) for g in table.global_names() if table.globals.get(g) != default.globals.get(g)]
        moved += [
            (k, users.get(k, []))
            for k, r in table.rows.items()
            if k in default.rows and canonical_row(r) != canonical_row(default.rows[k])
        ]
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
            idx = np.array(idx, dtype=np.int64)
            without = self._errors(problem, _with(table, back_globals, back_rows), idx) if len(idx) else None
            if (
                without is not None
                and errors[idx].sum() + self.config.min_gain < without.sum()
                and np.max(errors[idx] - without) <= self.config.max_harm
            ):
                kept += 1
                continue
            rows, globals_ = back_rows, back_globals
            if without is not None:
                errors[idx] = without
            reverted.append(key)
        return _with(table, globals_, rows), kept, reverted
