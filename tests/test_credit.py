"""The engine's part of a refused round (tuners.credit): the rows whose blocks the
engine says the round made better are kept, the others and the globals go back."""

import dataclasses
import types

import numpy as np
import pytest
import torch

from difftune_pipeline.model.params import ParamSpace
from difftune_pipeline.tuners import credit
from difftune_pipeline.tuners.active_learning import visit
from difftune_pipeline.tuners.gradient import TuneConfig, tune

KEYS = ["ADD64rr", "MOV64rr"]


@pytest.fixture
def setting(haswell, sample_rows):
    blocks = haswell.disassemble_many([h for h, _ in sample_rows[:50]])
    default = haswell.default_table(blocks)
    return ParamSpace.create(KEYS, haswell), default


def _latency(table, key):
    return table.rows[key]["latency"][0]


def _moved(table, key, by):
    row = table.rows[key]
    return {**row, "latency": [v + by for v in row["latency"]]}


def test_the_part_keeps_the_rows_whose_blocks_got_better(setting):
    space, default = setting
    blocks = [types.SimpleNamespace(row_keys=k) for k in (["ADD64rr"], ["MOV64rr"], ["ADD64rr", "MOV64rr", "ADD64rr"])]
    rows = {**default.rows, "ADD64rr": _moved(default, "ADD64rr", 1), "MOV64rr": _moved(default, "MOV64rr", 1)}
    candidate = dataclasses.replace(default, rows=rows, globals={**default.globals, "dispatch_width": 5})
    measured = np.array([100.0, 100.0, 100.0])
    # block 0 (ADD) 20% better, block 1 (MOV) 30% worse, block 2 (both) 5% worse: ADD nets -15%, MOV +35%
    at_confirmed = torch.tensor([120.0, 100.0, 100.0], dtype=torch.float64)
    at_candidate = torch.tensor([100.0, 130.0, 105.0], dtype=torch.float64)
    asked = []

    def simulate(table, positions=None):
        asked.append((table, positions))
        out = np.full(3, np.nan)
        out[positions] = [90.0, 101.0]
        return out

    uses = credit.incidence(space.keys, blocks)
    refused = (candidate, visit(space, candidate, lambda t, p=None: at_candidate.numpy()))
    confirmed = (default, visit(space, default, lambda t, p=None: at_confirmed.numpy()))
    table, (matrix, _, engine) = credit.engine_part(space, uses, [], measured, simulate, refused, confirmed)
    assert table.rows["ADD64rr"] == candidate.rows["ADD64rr"] and table.rows["MOV64rr"] == default.rows["MOV64rr"]
    assert table.globals == default.globals  # every global back at the confirmed table's
    assert asked[0][0] is table and asked[0][1].tolist() == [0, 2]  # only the blocks the kept row is in
    assert engine.tolist() == [90.0, 100.0, 101.0]  # the confirmed table's cycles where nothing changed
    assert torch.equal(matrix, torch.tensor(space.encode(table)[0]))
    # a block the engine refused under the candidate counts as far off: ADD, in it, is not kept
    refused_add = (candidate, visit(space, candidate, lambda t, p=None: np.array([np.nan, 130.0, 105.0])))
    assert credit.engine_part(space, uses, [], measured, simulate, refused_add, confirmed) is None
    # tied, ADD and MOV are credited as one (+20% in sum): nothing is kept
    assert credit.engine_part(space, uses, [[0, 1]], measured, simulate, refused, confirmed) is None


def test_a_refused_round_keeps_what_the_engine_credits(setting):
    """The surrogate says both rows should be slower; the engine agrees for ADD's
    blocks and says any move of MOV doubles its blocks' error. Each round is refused
    whole; its credited part (ADD's move) is kept, so the table learns ADD's latency
    and leaves MOV's, and the global the surrogate moves is held once the engine took it
    back. Without the credit every round is refused and nothing is learned."""
    space, default = setting
    add, mov = (space.keys.index(k) for k in KEYS)
    n = 20
    on_add = np.arange(n) < n // 2
    blocks = [types.SimpleNamespace(row_keys=["ADD64rr" if a else "MOV64rr"]) for a in on_add]
    lat_add, lat_mov = _latency(default, "ADD64rr"), _latency(default, "MOV64rr")
    measured = np.where(on_add, 100.0 * (1 + lat_add + 4), 100.0 * (1 + lat_mov + 4))

    def engine(table, positions=None):
        a, m = _latency(table, "ADD64rr"), _latency(table, "MOV64rr")
        cycles = np.where(on_add, 100.0 * (1 + a), measured * (0.5 if m == lat_mov else 2.5))
        if positions is not None:
            cycles = np.where(np.isin(np.arange(n), positions), cycles, np.nan)
        return cycles

    def predict(matrix, globals_, idx):
        lat = torch.where(torch.tensor(on_add)[idx], matrix[add, 0], matrix[mov, 0])
        return 100 * (1 + lat) + 10 * globals_[0]  # and a global the engine does not care for

    rounds = []

    def simulate(table, positions=None):
        if positions is None:
            rounds.append(table)
        return engine(table, positions)

    train = lambda t: float(np.mean(np.abs(engine(t) - measured) / measured))  # noqa: E731
    config = TuneConfig(steps=40, validate_every=10, lr=0.3, trust=1.0, refit_steps=0)
    args = (predict, n, space, default, measured, train, config)
    best, history = tune(*args, log=lambda *_: None, simulate=simulate, uses=credit.incidence(space.keys, blocks))
    assert _latency(best, "ADD64rr") > lat_add and best.rows["MOV64rr"] == default.rows["MOV64rr"]
    # every kept round is a credited part (MOV's move always hurts), each better on the engine than the last
    kept = [h for h in history if h.get("kept")]
    assert len(kept) > 1 and all("round_train_mape" in h for h in kept)
    assert [h["val_mape"] for h in kept] == sorted({h["val_mape"] for h in kept}, reverse=True)
    # θ₀, then the first round, which moved the global; once the engine took it back it stays
    assert len(rounds) > 3 and rounds[1].globals != default.globals
    assert all(t.globals == default.globals for t in rounds[2:])
    without, history = tune(*args, log=lambda *_: None, simulate=engine)
    assert without == default and not any(h.get("kept") for h in history)
