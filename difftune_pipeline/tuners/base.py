"""The tuner interface: a start table in, a better table and its history out.

A ``Problem`` holds what tuning is judged against: the train blocks and their
measured throughputs, the engine and LLVM's table, the engine's error on val
(the selection criterion; test is never looked at), and, when a tuner needs it,
a frozen surrogate over the train blocks.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import ClassVar, Protocol

import numpy as np
import torch

from difftune_pipeline.engine import Engine, ParamTable, SimResult
from difftune_pipeline.engine.table import canonical_row
from difftune_pipeline.model.params import ParamSpace
from difftune_pipeline.surrogates import Predict

FAILED_ERROR = 10.0  # a train block the engine refuses under a table counts as 1000% off


def block_errors(cycles: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Each block's relative error under the engine's ``cycles`` (``FAILED_ERROR`` where it refused the block: NaN)."""
    return np.where(np.isnan(cycles), FAILED_ERROR, np.abs(cycles - measured) / measured)


def log_scale(value):
    """``sign(v) · log2(1 + |v|)``: the units the prior measures a move in. A
    halving costs about one unit whatever the value (98 → 49 as 1 → 0), so the
    prior holds a one-cycle latency without pinning LLVM's 98-cycle division."""
    return np.sign(value) * np.log2(1 + np.abs(value))


def check_prior(setting: str, value: float) -> None:
    """A prior must be at least 0 (a negative one would pay a tuner to wander off; NaN is refused too)."""
    if not value >= 0:
        raise ValueError(f"{setting} must be at least 0, got {value!r}")


@dataclass
class SurrogateView:
    """A surrogate's predictor over the train blocks (and the val blocks), in its
    parameter space, and its module (which the gradient tuner refits to the engine
    where it goes)."""

    predict: Predict
    space: ParamSpace
    model: torch.nn.Module | None = None
    val_predict: Predict | None = None  # over the val blocks: the surrogate's fidelity on pairs it never saw


@dataclass(kw_only=True)
class Problem:
    engine: Engine
    blocks: list  # the train blocks
    measured: np.ndarray  # their measured cycles per 100 iterations
    default: ParamTable  # LLVM's table
    score: Callable[[ParamTable], float]  # engine MAPE on val, lower is better
    surrogate: SurrogateView | None = None
    log: Callable[[str], None] = print
    measure: str = "steady"  # what the engine's cycles are read as (engine.SimResult.predicted)
    val_blocks: list = ()  # the val blocks ``score`` judges on, and their measured cycles per 100 iterations
    val_measured: np.ndarray | None = None
    # record(table, split, result, positions): keeps the engine's simulations of a
    # table the tuning visited (of the split's blocks at ``positions``; None: all)
    record: Callable[[ParamTable, str, SimResult, np.ndarray | None], None] | None = None

    def train_cycles(self, table: ParamTable, positions: np.ndarray | None = None) -> np.ndarray:
        """The engine's cycles per 100 iterations of each train block under ``table``
        (NaN where it refuses one), fast-forwarded as the search's train simulations are;
        with ``positions``, of those train blocks only (NaN at the others)."""
        return self.cycles(table, "train", positions)

    def cycles(self, table: ParamTable, split: str, positions: np.ndarray | None = None) -> np.ndarray:
        """The engine's cycles of the train or val blocks (those at ``positions``, NaN
        elsewhere) under ``table`` (NaN where it refuses one; train blocks fast-forwarded
        in steady state), recorded when ``record`` is given."""
        blocks = self.blocks if split == "train" else self.val_blocks
        chosen = blocks if positions is None else [blocks[i] for i in positions]
        result = self.engine.simulate(chosen, table, fast_forward=split == "train" and self.measure == "steady")
        if self.record:
            self.record(table, split, result, positions)
        cycles = result.predicted_or_nan(self.measure)
        if positions is None:
            return cycles
        out = np.full(len(blocks), np.nan)
        out[positions] = cycles
        return out


def predict_batched(predict: Predict, matrix, globals_, idx, batch: int = 512) -> torch.Tensor:
    """The surrogate's cycles of the blocks ``idx`` (positions in what ``predict`` was
    built over) under one encoded table, ``batch`` blocks at a time, without gradients."""
    idx = torch.as_tensor(np.asarray(idx, dtype=np.int64))
    matrix, globals_ = torch.as_tensor(matrix), torch.as_tensor(globals_)
    with torch.no_grad():
        return torch.cat(
            [predict(matrix, globals_, idx[i : i + batch]) for i in range(0, len(idx), batch)] or [torch.zeros(0)]
        )


class Tuner(Protocol):
    stage: ClassVar[str]  # its name in the history
    needs_surrogate: bool
    config: object  # what its result depends on (part of the learned table's id)

    def tune(self, start: ParamTable, problem: Problem) -> tuple[ParamTable, list[dict]]:
        """The best table on ``problem.score`` it finds from ``start``, and what it did."""
        ...


class FromDefault:
    """A tuner run again from LLVM's table: a second start for a local search,
    whose first start may be a basin the second avoids. The better on val of the
    table it is given and the one it finds wins."""

    def __init__(self, tuner: Tuner):
        self.tuner, self.config, self.needs_surrogate = tuner, tuner.config, tuner.needs_surrogate
        self.stage = f"{tuner.stage} from default"

    def tune(self, start: ParamTable, problem: Problem) -> tuple[ParamTable, list[dict]]:
        found, history = self.tuner.tune(problem.default, problem)
        return (found if problem.score(found) < problem.score(start) else start), history


class Repeated:
    """A tuner run again from its own result while that lowers val, at most
    ``times`` runs. The direct search spends its budget in its first pass over
    the rows; a fresh run passes over every row again, from the errors the last
    one left, and keeps finding moves (docs/model.md: "Searching again")."""

    def __init__(self, tuner: Tuner, times: int):
        self.tuner, self.times, self.needs_surrogate = tuner, times, tuner.needs_surrogate
        self.config = {"tuner": tuner.config, "times": times}
        self.stage = f"{tuner.stage} again"

    def tune(self, start: ParamTable, problem: Problem) -> tuple[ParamTable, list[dict]]:
        best, best_val, history = start, problem.score(start), []
        for k in range(1, self.times + 1):
            found, steps = self.tuner.tune(best, problem)
            history += [{"run": k, **h} for h in steps]
            val = problem.score(found)
            if not val < best_val:
                break
            best, best_val = found, val
        return best, history


class CountedEngine:
    """The engine, counting the block simulations asked of it (what a stage costs)."""

    def __init__(self, engine: Engine):
        self.engine, self.simulations = engine, 0

    def simulate(self, blocks, *args, **kwargs):
        self.simulations += len(blocks)
        return self.engine.simulate(blocks, *args, **kwargs)

    def simulate_pairs(self, blocks, tables, block_idx, *args, **kwargs):
        self.simulations += len(block_idx)
        return self.engine.simulate_pairs(blocks, tables, block_idx, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.engine, name)


def run(tuners: list[Tuner], problem: Problem) -> tuple[ParamTable, list[dict], list[dict]]:
    """Each tuner starts from the table the previous one returned (the first from
    LLVM's). Returns the table, the history, and per stage what it gained on val
    and what it cost (train simulations by the engine, seconds)."""
    engine = CountedEngine(problem.engine)
    problem = replace(problem, engine=engine)
    best, history, stages = problem.default, [], []
    val = problem.score(best)
    for tuner in tuners:
        spent, t0 = engine.simulations, time.perf_counter()
        best, steps = tuner.tune(best, problem)
        history += [{"stage": tuner.stage, **h} for h in steps]
        before, val = val, problem.score(best)
        stages.append(
            {
                "stage": tuner.stage,
                "val_mape": val,
                "val_gain": before - val,
                "engine_simulations": engine.simulations - spent,
                "seconds": time.perf_counter() - t0,
                # what a tuner measured of its surrogate near its table (tuners.fidelity)
                **{k: v for h in steps for k, v in h.items() if k.startswith("near_")},
            }
        )
    return best, history, stages


def stem(key: str) -> str:
    """An opcode's mnemonic apart from its operand width (``CMPSQ`` and ``CMPSB``:
    ``CMPS``; ``ADD64rr`` and ``ADD32rr``: ``ADDrr``)."""
    name = re.sub(r"(8|16|32|64)", "", key.split("#")[0])
    return re.sub(r"^(CMPS|MOVS|SCAS|STOS|LODS|INS|OUTS)[BWLQ]$", r"\1", name)


def mnemonic(key: str) -> str:
    """An opcode's mnemonic apart from its width and operand form (``DIV64r`` and
    ``DIV32m_EVEX``: ``DIV``; ``VDIVSDrr_Int``: ``VDIVSD``)."""
    return re.sub(r"(8|16|32|64)?[rmi][a-z0-9]*(_[A-Za-z0-9]+)?(#\d+)?$", "", key)


def borrowed_units(keys, default: ParamTable, resources: list[dict]) -> dict[str, dict[str, int]]:
    """Per row key, the functional units outside the ports (a single-unit resource no
    group contains: the dividers, Zen's multiplier) that the other forms of its
    mnemonic list in ``default``, with the most cycles one of them gives. LLVM's
    Haswell and Skylake models leave the divider out of the register forms of
    integer division (``DIV64r``) while the memory forms (``DIV64m``) list it, so
    there one division never waits for the divider the last one holds."""
    grouped = {m for r in resources for m in r["members"]}
    units = {r["name"] for r in resources if not r["is_group"] and r["name"] not in grouped}
    family: dict[str, dict[str, int]] = {}
    for key, row in default.rows.items():
        for res, cycles in row["ports"].items():
            if res in units and cycles > 0:
                got = family.setdefault(mnemonic(key), {})
                got[res] = max(got.get(res, 0), cycles)
    return {k: family[mnemonic(k)] for k in keys if mnemonic(k) in family}


def sibling_groups(keys: list[str], default: ParamTable, classes) -> dict[str, tuple]:
    """Each row key's group of siblings: rows of one LLVM scheduling class
    (``classes``: ``Engine.sched_classes``), one ``stem`` and the same LLVM values."""
    return {k: (c, stem(k), repr(canonical_row(default.rows[k]))) for k, c in zip(keys, classes(keys))}
