"""Direct search on the engine: valid moves, moves in the direction of the
error, a budget that holds, train error that only falls, val selection."""

import dataclasses

import numpy as np
import pytest

from difftune_pipeline.engine import Engine, InvalidTable, ParamTable
from difftune_pipeline.model.metrics import kendall_tau
from difftune_pipeline.tuners.base import borrowed_units
from difftune_pipeline.tuners.direct import search
from difftune_pipeline.tuners.moves import gradient_proposer, moves
from difftune_pipeline.tuners.search import Search, SearchConfig


def test_moves_are_valid_rows_or_refused_overlaps(haswell):
    table = haswell.default_table()
    for key in ("IMUL64rr", "ADD64rm", "DIV64r", "VADDPSrr", "MOV64mr"):
        for halving in (False, True):
            for column, step, row in moves(table.rows[key], halving):
                changed = ParamTable(table.mcpu, table.llvm_version, table.globals, {key: row})  # the rest: LLVM's
                try:
                    haswell.compile(changed)
                except InvalidTable as exc:  # only an unused resource overlapping a used one
                    port = column.split(",")[-1]  # a port alone, or a µop with it
                    assert port.startswith("port:") and step > 0 and table.rows[key]["ports"][port[5:]] == 0
                    assert "partially overlap" in str(exc)
    big = {"latency": [100], "uops": 1, "read_advance": [], "ports": {"HWPort0": 6}}
    assert ("latency", -50) in [(c, d) for c, d, _ in moves(big, halving=True)]
    assert ("latency", -50) not in [(c, d) for c, d, _ in moves(big)]


def test_search_lowers_train_error_within_its_budget(haswell, haswell_train):
    blocks, measured = haswell_train
    default = haswell.default_table(blocks)
    worse = default.copy()
    for key in ("MOV64rm", "MOV32rm", "ADD64rr"):
        worse.rows[key] = {**worse.rows[key], "latency": [v + 6 for v in worse.rows[key]["latency"]]}
    config = SearchConfig(budget=6000, rounds=2)
    state = Search(haswell, blocks, measured, default, config, start=worse)
    start_error = state.train_mape
    too_slow = state.directed("MOV64rm", state.changes["MOV64rm"])
    assert too_slow and all(d < 0 for c, d, _ in too_slow if c == "latency")
    calls = []
    best, history = search(
        haswell, blocks, measured, default, lambda t: calls.append(t) or 0.0, config, start=worse, log=lambda *_: None
    )
    assert history[-1]["simulations"] <= config.budget
    assert history[-1]["train_mape"] < start_error
    assert [h["train_mape"] for h in history] == sorted((h["train_mape"] for h in history), reverse=True)
    assert len(calls) == len(history)  # the start and every round scored on val
    # each round's rank correlation on train too, where the MAPE alone hides it
    start = Search(haswell, blocks, measured, default, dataclasses.replace(config, fast_forward=False), start=worse)
    simulated = haswell.simulate(blocks, start.full_table()).predicted("steady")
    assert kendall_tau(start.predicted, measured) == pytest.approx(kendall_tau(simulated, measured))
    # the start's figure is a fresh simulation's, fast-forwarded as the search simulates
    fresh = haswell.simulate(blocks, start.full_table(), fast_forward=True).predicted("steady")
    assert history[0]["train_tau"] == pytest.approx(kendall_tau(fresh, measured))


def test_a_global_goes_on_stepping_while_it_pays(haswell, haswell_train):
    """Measurements that are LLVM's own simulation ask for its dispatch width (4):
    from a width of 1, one visit to the globals takes it several steps, not one."""
    blocks, _ = haswell_train
    default = haswell.default_table(blocks)
    measured = haswell.simulate(blocks, default).cycles.astype(float)
    narrow = default.copy()
    narrow.globals["dispatch_width"] = 1
    state = Search(haswell, blocks, measured, default, SearchConfig(budget=20_000), start=narrow)
    start_error = state.train_mape
    assert state.improve_globals() == [f"dispatch_width+{state.globals['dispatch_width'] - 1}"]
    assert state.globals["dispatch_width"] >= 3 and state.train_mape < start_error
    assert state.spent <= 20_000


def test_every_global_that_pays_moves_in_one_visit(haswell, haswell_train):
    """Two globals off LLVM's values: one visit moves both, the one that pays less
    judged again on top of the other, not left for a later round."""
    blocks, _ = haswell_train
    default = haswell.default_table(blocks)
    measured = haswell.simulate(blocks, default).cycles.astype(float)
    off = default.copy()
    off.globals.update(dispatch_width=1, micro_op_buffer_size=default.globals["micro_op_buffer_size"] // 4)
    state = Search(haswell, blocks, measured, default, SearchConfig(budget=20_000), start=off)
    start_error = state.train_mape
    moved = state.improve_globals()
    assert sorted(m.split("+")[0] for m in moved) == ["dispatch_width", "micro_op_buffer_size"], moved
    assert state.globals["dispatch_width"] > 1
    assert state.globals["micro_op_buffer_size"] > default.globals["micro_op_buffer_size"] // 4
    assert state.train_mape < start_error and state.spent <= 20_000
    fresh = Search(haswell, blocks, measured, default, SearchConfig(), start=state.full_table())
    assert state.train_mape == pytest.approx(fresh.train_mape)  # the errors kept are the table's


def test_gradient_proposer_ranks_moves_by_predicted_gain():
    row = {"latency": [5], "uops": 2, "read_advance": [], "ports": {"HWPort0": 1, "HWPort1": 1}}
    columns = ["latency", "uops", "port:HWPort0", "port:HWPort1"]
    grad = {"X": np.array([0.5, -0.1, 0.0, 0.2])}  # lowering latency helps most, then HWPort1, then raising µops
    proposed = gradient_proposer(grad, columns, top=3)("X", row)
    assert [(c, d) for c, d, _ in proposed] == [("latency", -1), ("port:HWPort1", -1), ("uops", 1)]
    assert gradient_proposer(grad, columns)("unknown", row) == []


def test_a_uop_and_its_port_move_together():
    """A free pop (no µops, no cycles) reaches one load µop in one move, and
    LLVM's pop sheds its ALU µop in one: neither column alone can."""
    free = {"latency": [5], "uops": 0, "read_advance": [], "ports": {"HWPort0156": 0, "HWPort23": 0}}
    found = {(c, d): r for c, d, r in moves(free)}
    assert found[("uops,port:HWPort23", 1)] == {**free, "uops": 1, "ports": {"HWPort0156": 0, "HWPort23": 1}}
    assert ("uops,port:HWPort23", -1) not in found  # no negative cycles
    llvm = {"latency": [6], "uops": 2, "read_advance": [], "ports": {"HWPort0156": 1, "HWPort23": 1}}
    found = {(c, d): r for c, d, r in moves(llvm)}
    assert found[("uops,port:HWPort0156", -1)] == {**llvm, "uops": 1, "ports": {"HWPort0156": 0, "HWPort23": 1}}
    one = {"latency": [1], "uops": 1, "read_advance": [], "ports": {"HWPort0": 1, "HWPort1": 0}}
    assert ("uops,port:HWPort0", -1) in {(c, d) for c, d, _ in moves(one)}  # nothing left: both 0
    # no µop would be left on a row that still uses a port: refused
    two_ports = {"latency": [1], "uops": 1, "read_advance": [], "ports": {"HWPort0": 1, "HWPort1": 1}}
    assert ("uops,port:HWPort0", -1) not in {(c, d) for c, d, _ in moves(two_ports)}
    columns = ["latency", "uops", "port:HWPort0156", "port:HWPort23"]
    grad = {"POP": np.array([0.0, 0.3, 0.3, -0.1])}  # the gain of a pair is the sum of its columns'
    proposed = gradient_proposer(grad, columns, top=1)("POP", llvm)
    assert [(c, d) for c, d, _ in proposed] == [("uops,port:HWPort0156", -1)]


def test_a_register_division_may_take_the_divider_its_memory_form_lists(haswell):
    """LLVM's Haswell lists the divider for DIV64m, not DIV64r: one move gives DIV64r the
    divider's cycles (with halving, or twice them), halving and doubling move them after,
    and the engine then makes a division wait for the divider the last one holds."""
    default = haswell.default_table()
    units = borrowed_units(["DIV64r", "DIV64m", "ADD64rr"], default, haswell.resources())
    assert units == {"DIV64r": {"HWDivider": 10}, "DIV64m": {"HWDivider": 10}}  # no unit outside the ports for ADD
    found = {(c, d): r for c, d, r in moves(default.rows["DIV64r"], True, units["DIV64r"])}
    assert found[("port:HWDivider", 20)]["ports"]["HWDivider"] == 20
    assert ("port:HWDivider", 20) not in {(c, d) for c, d, _ in moves(default.rows["DIV64r"], False, units["DIV64r"])}
    taken = found[("port:HWDivider", 10)]
    assert taken["ports"]["HWDivider"] == 10 and ("port:HWDivider", 10) not in {(c, d) for c, d, _ in moves(taken)}
    steps = {(c, d) for c, d, _ in moves(taken, True, units["DIV64r"])}
    assert {("port:HWDivider", 10), ("port:HWDivider", -5)} <= steps
    assert ("port:HWDivider", 10) not in {(c, d) for c, d, _ in moves(taken, False, units["DIV64r"])}
    block = haswell.parse_asm("movq %rsi, %rax\nxorl %edx, %edx\ndivq %rcx")  # no chain: the divider's throughput
    fast = {**default.rows["DIV64r"], "latency": [40]}
    cycles = [
        haswell.simulate([block], dataclasses.replace(default, rows={**default.rows, "DIV64r": row})).steady[0]
        for row in (fast, {**fast, "ports": {**fast["ports"], "HWDivider": 21}})
    ]
    assert cycles[0] < 2100 <= cycles[1]


def test_rows_in_too_few_blocks_are_searched_with_their_siblings_as_one(haswell):
    """Each string compare is in one train block, too few alone: CMPSL and CMPSQ
    (one LLVM class and mnemonic) are searched as one row, moved to one value."""
    blocks = [haswell.parse_asm(a) for a in ("cmpsl %es:(%rdi), (%rsi)", "cmpsq %es:(%rdi), (%rsi)", "addq %rax, %rbx")]
    default = haswell.default_table(blocks)
    truth = default.copy()
    for key in ("CMPSL", "CMPSQ"):
        truth.rows[key] = {**default.rows[key], "latency": [v + 4 for v in default.rows[key]["latency"]]}
    measured = haswell.simulate(blocks, truth).steady
    config = SearchConfig(budget=2000, rounds=2, min_blocks=2, siblings=True)
    state = Search(haswell, blocks, measured, default, config)
    assert state.members["CMPSL"] == ["CMPSL", "CMPSQ"] and "CMPSQ" not in state.members
    assert "ADD64rr" not in state.members  # one block, no sibling in the train blocks
    assert "CMPSL" not in Search(haswell, blocks, measured, default, SearchConfig(min_blocks=2)).members
    score = lambda t: float(np.mean(np.abs(haswell.simulate(blocks, t).steady - measured) / measured))  # noqa: E731
    best, _ = search(haswell, blocks, measured, default, score, config, log=lambda *_: None)
    assert best.rows["CMPSL"] == best.rows["CMPSQ"] != default.rows["CMPSQ"]
    assert score(best) < score(default)


def test_train_simulations_fast_forward_as_configured(haswell, haswell_train, monkeypatch):
    """The search's own simulations stop once iterations repeat (its setting)
    where it tunes the steady state; Total Cycles, which fast-forward extrapolates,
    are simulated to the end. The val score it is handed is not its business."""
    blocks, measured = haswell_train
    default = haswell.default_table(blocks)
    simulate_pairs, seen = Engine.simulate_pairs, []

    def spy(self, *args, fast_forward=False, **kwargs):
        seen.append(fast_forward)
        return simulate_pairs(self, *args, fast_forward=fast_forward, **kwargs)

    # on the class: undoing a patch of the shared engine would leave it an attribute of its
    # own, and a later test's patch of the class would never reach it
    monkeypatch.setattr(Engine, "simulate_pairs", spy)
    for fast_forward, measure in ((True, "steady"), (False, "steady"), (True, "total")):
        seen.clear()
        config = SearchConfig(budget=2000, rounds=1, fast_forward=fast_forward)
        search(haswell, blocks, measured, default, lambda t: 0.0, config, log=lambda *_: None, measure=measure)
        assert len(seen) > 1 and set(seen) == {fast_forward and measure == "steady"}


class EngineScreen:
    """A screen that knows the engine exactly: the change in each block's steady
    cycles (fast-forwarded, as the search simulates its train blocks)."""

    top = 1

    def __init__(self, engine, blocks):
        self.engine, self.blocks, self.asked = engine, blocks, []

    def change(self, table, variants, idx):
        self.asked.append(len(variants))
        sub = [self.blocks[i] for i in idx]
        cycles = lambda t: self.engine.simulate(sub, t, fast_forward=True).steady  # noqa: E731
        moved = [ParamTable(table.mcpu, table.llvm_version, table.globals, {**table.rows, **v}) for v in variants]
        return np.array([cycles(t) for t in moved]) - cycles(table)


def test_a_screen_chooses_the_one_move_the_engine_simulates(haswell, haswell_train):
    """With a screen, the engine simulates only the move it ranks first, and a
    screen that knows the engine accepts the move the unscreened search accepts,
    for a fraction of the simulations; a screen that sees no gain costs none."""
    blocks, measured = haswell_train
    default = haswell.default_table(blocks)
    worse = default.copy()
    worse.rows["MOV64rm"] = {**worse.rows["MOV64rm"], "latency": [v + 6 for v in worse.rows["MOV64rm"]["latency"]]}
    config = SearchConfig(budget=100_000, max_moves_per_row=1)
    plain = Search(haswell, blocks, measured, default, config, start=worse)
    screen = EngineScreen(haswell, blocks)
    screened = Search(haswell, blocks, measured, default, config, start=worse, screen=screen)
    every = moves(worse.rows["MOV64rm"])
    accepted = plain.improve_row("MOV64rm", lambda key, row: every)
    assert accepted and screened.improve_row("MOV64rm", lambda key, row: every) == accepted
    assert screen.asked == [len(every)]
    assert screened.train_mape == pytest.approx(plain.train_mape)
    sample = min(len(plain.index["MOV64rm"]), config.sample_blocks)
    confirm = len(plain.index["MOV64rm"]) if sample < len(plain.index["MOV64rm"]) else 0
    assert screened.spent - len(blocks) == sample + confirm
    assert plain.spent - len(blocks) == sample * len(every) + confirm

    class Blind(EngineScreen):  # sees every move as a loss: the engine is not asked
        def change(self, table, variants, idx):
            return np.full((len(variants), len(idx)), 1000.0)

    blind = Search(haswell, blocks, measured, default, config, start=worse, screen=Blind(haswell, blocks))
    spent = blind.spent
    assert blind.improve_row("MOV64rm", lambda key, row: every) == [] and blind.spent == spent

    class Unknown(EngineScreen):  # outside the surrogate's space: the engine judges every move
        def change(self, table, variants, idx):
            return None

    unknown = Search(haswell, blocks, measured, default, config, start=worse, screen=Unknown(haswell, blocks))
    assert unknown.improve_row("MOV64rm", lambda key, row: every) == accepted
    assert unknown.spent == plain.spent
