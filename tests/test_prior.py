"""The prior toward the default table: both tuners pay for each unit a row moves
away from it, so a parameter changes only where the train blocks buy it."""

import numpy as np

from difftune_pipeline.model.params import ParamSpace
from difftune_pipeline.tuners.gradient import TuneConfig, tune
from difftune_pipeline.tuners.moves import distance, moves
from difftune_pipeline.tuners.search import Search, SearchConfig


def test_distance_is_scale_free():
    """The prior counts in ``log_scale`` units: halving LLVM's 98-cycle division
    costs what taking a 1-cycle latency to 0 does, and a larger step costs more."""
    llvm = {"latency": [98, 1], "uops": 2, "read_advance": [[3, 0, 5]], "ports": {"HWPort0156": 1, "HWPort23": 1}}
    assert distance(llvm, llvm) == 0
    halved, zeroed = {**llvm, "latency": [49, 1]}, {**llvm, "latency": [98, 0]}
    assert abs(distance(halved, llvm) - distance(zeroed, llvm)) < 0.02
    moved = {"latency": [98, 1], "uops": 1, "read_advance": [], "ports": {"HWPort23": 3}}
    assert distance(moved, llvm) == distance(llvm, moved) > distance(halved, llvm)
    assert all(distance(row, llvm) > 0 for _, _, row in moves(llvm))
    up = {step: row for column, step, row in moves(llvm) if column == "latency"}
    assert 0 < distance(up[1], llvm) < distance(up[2], llvm)


def test_the_prior_keeps_the_search_near_the_default(haswell, haswell_train):
    """A step away from the default table has to buy ``prior`` of summed train
    error: a prior nothing can pay for leaves the default alone, and from a worse
    table it still lets every row come back, never go further."""
    blocks, measured = haswell_train
    default = haswell.default_table(blocks)
    for prior in (0.0, 1e6):
        state = Search(haswell, blocks, measured, default, SearchConfig(budget=4000, prior=prior))
        accepted = state.improve_globals() + [m for key in state.index for m in state.improve_row(key)]
        moved = bool(state.changes) or state.globals != default.globals
        assert bool(accepted) == (prior == 0.0) and moved == (prior == 0.0)
    worse = default.copy()
    for key in ("MOV64rm", "MOV32rm", "ADD64rr"):
        worse.rows[key] = {**worse.rows[key], "latency": [v + 6 for v in worse.rows[key]["latency"]]}
    config = SearchConfig(budget=6000, rounds=2, prior=1e6)
    state = Search(haswell, blocks, measured, default, config, start=worse)
    start_error = state.train_mape
    for key in state.index:
        state.improve_row(key)
    assert state.train_mape < start_error
    for key, row in state.changes.items():
        assert distance(row, default.rows[key]) <= distance(worse.rows.get(key, default.rows[key]), default.rows[key])
    assert any(
        distance(state.changes[k], default.rows[k]) < distance(worse.rows[k], default.rows[k])
        for k in ("MOV64rm", "MOV32rm", "ADD64rr")
        if k in state.changes
    )


def test_the_surrogate_tuner_pays_the_same_prior(haswell, sample_rows):
    """A surrogate in which only ADD64rr's latency matters, and measurements that
    ask for 4 more cycles: the tuner moves it there, unless the prior costs more
    than the error it buys."""
    blocks = haswell.disassemble_many([h for h, _ in sample_rows[:50]])
    default = haswell.default_table(blocks)
    space = ParamSpace.create(["ADD64rr", "MOV64rr"], haswell)
    row = space.keys.index("ADD64rr")
    latency = default.rows["ADD64rr"]["latency"][0]

    def predict(matrix, globals_, idx):
        return 100 * (1 + matrix[row, 0]).expand(len(idx))

    measured = np.full(len(blocks), 100.0 * (1 + latency + 4))
    for prior, expected in ((0.0, latency + 4), (1e3, latency)):
        seen = []
        # a surrogate with no engine behind it: DiffTune's own objective (the anchored one needs the engine)
        config = TuneConfig(steps=200, lr=0.1, batch_blocks=16, validate_every=200, prior=prior, anchored=False)
        tune(
            predict,
            len(blocks),
            space,
            default,
            measured,
            lambda t, seen=seen: seen.append(t) or 0.0,
            config,
            log=lambda *_: None,
        )
        assert seen[-1].rows["ADD64rr"]["latency"][0] == expected
        assert seen[-1].rows["MOV64rr"] == default.rows["MOV64rr"]
