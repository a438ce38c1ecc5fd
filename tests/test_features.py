"""Hardware features: operands from LLVM's instruction descriptions, the
dependency graph, the analytic bounds (close to the engine), and the table."""

import numpy as np
import pytest
import torch

from conftest import pipeline
from difftune_pipeline import harness
from difftune_pipeline.engine import Engine, extended
from difftune_pipeline.model.features import block_features, containment, features_frame
from difftune_pipeline.model.graph import (
    BlockGraphs,
    dependencies,
    latency_bounds,
    memory_dependencies,
    pages_per_iteration,
    with_partial_merges,
    without_stack_updates,
)
from difftune_pipeline.model.params import ParamSpace
from difftune_pipeline.surrogates.structured import StructuredConfig, StructuredModel, StructuredSurrogate, bounds
from difftune_pipeline.surrogates.structured_blocks import StructuredBlocks


def test_operands_come_from_llvm(haswell):
    block = haswell.parse_asm("movq (%rdi,%rcx,8), %rax\naddl %eax, %ebx\nxorl %edx, %edx\npopq %rsi\n")
    ops = block.operands
    assert ops[0]["reads"] == ["RCX", "RDI"] and ops[0]["writes"] == ["RAX"] and ops[0]["may_load"]
    assert ops[1]["reads"] == ["RAX", "RBX"] and "EFLAGS" in ops[1]["writes"]  # widened to the full register
    assert ops[2]["dependency_breaking"] and ops[2]["reads"] == []  # zero idiom
    assert ops[3]["reads"] == ["RSP"] and set(ops[3]["writes"]) == {"RSI", "RSP"}  # implicit stack pointer
    assert [o["stack_op"] for o in ops] == [False, False, False, True]  # the engine's stack-engine rule


def test_dependencies_registers_and_memory(haswell):
    block = haswell.parse_asm("movq %rax, 8(%rsp)\nmovq 8(%rsp), %rbx\naddq %rbx, %rax\n")
    edges = {(e.src, e.dst, e.distance, e.kind) for e in dependencies(block.operands)}
    assert (0, 1, 0, "memory") in edges  # store -> load through the same address
    assert (1, 2, 0, "register") in edges  # rbx
    assert (2, 0, 1, "register") in edges  # rax, carried to the next iteration


def test_latency_bound_of_a_carried_chain(haswell):
    block = haswell.parse_asm("imulq %rax, %rax\nimulq %rax, %rax\n")
    graphs = BlockGraphs.build([dependencies(block.operands)], [2])
    chain, carried = latency_bounds(torch.tensor([[3.0, 3.0]]), torch.zeros(1, 2), graphs.select([0]))
    assert chain.tolist() == [6.0] and carried.tolist() == [6.0]


def test_the_stack_engine_leaves_no_rsp_chain_in_the_graph(haswell):
    """As in the engine: pops carry nothing through RSP, though they wait for its
    last explicit write; popcnt is no pop, and an explicit RSP writer keeps its chain."""
    block = haswell.parse_asm("popq %rbx\npopq %rbp\npopcntq %rax, %rcx\naddq $8, %rsp\npushq %rax")
    ops = without_stack_updates(block.operands)
    assert [("RSP" in o["reads"], "RSP" in o["writes"]) for o in ops] == [
        (True, False),
        (True, False),
        (False, False),
        (True, True),
        (True, False),
    ]
    edges = {(e.src, e.dst, e.distance) for e in dependencies(ops) if e.src == 3}
    assert edges == {(3, 0, 1), (3, 1, 1), (3, 3, 1), (3, 4, 0)}  # the add's RSP, in this iteration or the last
    graph = BlockGraphs.build([dependencies(ops)], [5]).select([0])
    _, carried = latency_bounds(torch.ones(1, 5), torch.zeros(1, 5), graph)
    assert carried.item() == 1.0  # the add's own chain
    plain = BlockGraphs.build([dependencies(block.operands)], [5]).select([0])
    assert latency_bounds(torch.ones(1, 5), torch.zeros(1, 5), plain)[1].item() == 4.0  # pop, pop, add, push


def test_pages_a_block_reaches_an_iteration_as_the_engine_walks_them():
    """The widest stride under a page among streams that keep one stride; a
    stream that jumps a page or more, or moves irregularly, is not counted."""
    pops = [(it, i, 0x2324308 + 824 * it + 8 * (i - 1), 8, False) for it in range(4) for i in (1, 2)]
    assert pages_per_iteration(pops) == 824 / 4096
    assert pages_per_iteration([(it, 0, 0x2324000 + 4096 * it, 8, False) for it in range(4)]) == 0.0
    irregular = [(it, 0, 0x2324000 + (0, 64, 8, 512)[it], 8, False) for it in range(4)]
    assert pages_per_iteration(irregular) == 0.0
    assert pages_per_iteration([(it, 0, 0x2324000, 8, True) for it in range(4)]) == 0.0


def test_a_short_recurrence_behind_a_long_chain(haswell):
    """The add's one-cycle chain through RSP is the block's recurrence, though
    the pop's six-cycle load, behind the add, finishes last in every unrolled iteration."""
    block = haswell.parse_asm("addq $96, %rsp\nmovl %ebx, %eax\npopq %rbx")
    graph = BlockGraphs.build([dependencies(without_stack_updates(block.operands))], [3]).select([0])
    chain, carried = latency_bounds(torch.tensor([[1.0, 1.0, 6.0]]), torch.zeros(1, 3), graph)
    assert chain.item() == 7.0 and carried.item() == 1.0


def test_recorded_store_load_edges_are_forwarded_or_failed(haswell):
    # movl %eax, (%rdi); movq (%rdi), %rbx; movq %rbx, 8(%rdi); movl 8(%rdi), %ecx:
    # the first load reads 8 bytes of a 4-byte store, the second 4 of an 8-byte one.
    block = haswell.parse_asm("movl %eax, (%rdi)\nmovq (%rdi), %rbx\nmovq %rbx, 8(%rdi)\nmovl 8(%rdi), %ecx")
    rows = [(k, 0, 0, 4, True) for k in (0, 1)] + [(k, 1, 0, 8, False) for k in (0, 1)]
    rows += [(k, 2, 8, 8, True) for k in (0, 1)] + [(k, 3, 8, 4, False) for k in (0, 1)]
    edges = {(e.src, e.dst, e.distance, e.forwarded) for e in memory_dependencies(rows, 4)}
    assert edges == {(0, 1, 0, False), (2, 3, 0, True)}
    deps = [e for e in dependencies(block.operands) if e.kind != "memory"] + memory_dependencies(rows, 4)
    graph = BlockGraphs.build([deps], [4], memory=True).select([0])
    latency = torch.tensor([[1.0, 5.0, 1.0, 5.0]])
    fail = torch.tensor([10.0], requires_grad=True)
    chain, _ = latency_bounds(latency, torch.zeros(1, 4), graph, torch.tensor([2.0]), fail)
    assert chain.item() == 1 + 10 + 5 + 1 + 2 + 5  # store, failed, load, store, forwarded, load
    chain.backward()
    assert fail.grad.item() == 1.0  # the penalty is learnable through the surrogate


def forwarding(engine: Engine, asm: str, mechanisms: tuple, forward: int) -> tuple[float, float, list[float]]:
    """(the surrogate's recurrence, the engine's cycles an iteration, the engine's
    latencies) of ``asm`` under ``mechanisms`` with BHive's addresses."""
    parsed = engine.parse_asm(asm)
    block = harness.accesses(parsed, "bhive").attach(parsed)
    n = len(block.operands)
    table = engine.default_table([block]).with_model(mechanisms, "bhive")
    graph = StructuredBlocks.build([block], {}, table.mechanisms).select(torch.tensor([0])).graph  # the surrogate's
    table.globals["store_forward_latency"] = forward
    trace = engine.trace(block, table, iterations=40, shown=n)
    latency = [float(e.executed - e.issued) for e in trace.timeline[:n]]
    _, carried = latency_bounds(torch.tensor([latency]), torch.zeros(1, n), graph, float(forward))
    return carried.item(), engine.simulate([block], table, iterations=400).steady[0] / 100, latency


def test_a_store_forwards_once_its_data_is_ready_as_in_the_engine(haswell):
    """A read-modify-write's data is ready in its last cycle; a plain store's the
    cycle after it issues, whatever latency LLVM gives it (Sandy Bridge's push: 5)."""
    for forward in (0, 2):
        surrogate, engine, latency = forwarding(haswell, "addq $1, (%rdi)", ("memory",), forward)
        assert surrogate == pytest.approx(engine, abs=0.05) and surrogate == latency[0] - 1 + forward
    surrogate, engine, _ = forwarding(haswell, "movq %rax, (%rdi)\nmovq (%rdi), %rax", ("memory",), 1)
    assert surrogate == pytest.approx(engine, abs=0.05)
    ivybridge = Engine("ivybridge")
    surrogate, engine, latency = forwarding(ivybridge, "pushq %rbp\npopq %rbp", ("memory", "stack_engine"), 0)
    assert latency[0] == 5 and surrogate == pytest.approx(engine, abs=0.05) and surrogate == 1 + latency[1]


def test_features_and_bounds_track_the_engine(haswell, sample_rows):
    blocks = [b for b in haswell.disassemble_many([h for h, _ in sample_rows[:300]]) if b.ok]
    table = haswell.default_table(blocks)
    frame = features_frame([str(i) for i in range(len(blocks))], blocks, table, haswell.resources())
    assert frame.height == len(blocks) and frame["n_insts"].to_list() == [len(b) for b in blocks]
    assert set(frame["bottleneck"]) <= {"port_pressure", "dispatch", "loop_carried_latency"}
    bound = 100 * np.maximum.reduce(
        [frame[c].to_numpy() for c in ("port_pressure_cycles", "dispatch_cycles", "loop_carried_cycles")]
    )
    engine = haswell.simulate(blocks, table).cycles
    assert np.mean(np.abs(bound - engine) / engine) < 0.15  # llvm-mca is mostly these three bounds
    assert np.all(bound <= engine * 1.05)  # and they are lower bounds


def test_port_pressure_spreads_groups_over_their_units(haswell):
    resources = haswell.resources()
    c = containment(resources)
    names = [r["name"] for r in resources]
    table = haswell.default_table()
    block = haswell.parse_asm("addq %rax, %rbx\naddq %rcx, %rdx\naddq %rsi, %rdi\naddq %r8, %r9\n")
    f = block_features(block, table, resources, c)
    assert f["port_pressure_cycles"] == 1.0 and f["dispatch_cycles"] == 1.0  # 4 ALU µops over HWPort0156
    assert c[names.index("HWPort0"), names.index("HWPort0156")] == 0.25


def test_port_pressure_spreads_a_resource_over_its_own_units():
    """Ivy Bridge's load ports are one resource of two units, not a group: two
    loads an iteration keep each busy one cycle, as the engine runs them."""
    ivybridge = Engine("ivybridge")
    resources = ivybridge.resources()
    c = containment(resources)
    names = [r["name"] for r in resources]
    loads = resources[names.index("SBPort23")]
    assert loads["num_units"] == 2 and not loads["is_group"]
    assert c[names.index("SBPort23"), names.index("SBPort23")] == 0.5
    assert c[names.index("SBPort0"), names.index("SBPortAny")] == pytest.approx(1 / 6)  # SBPort23 counts twice
    table = ivybridge.default_table()
    block = ivybridge.parse_asm("movl 8(%rsp), %ecx\nmovl 16(%rsp), %edx")
    f = block_features(block, table, resources, c)
    engine = ivybridge.simulate([block], table).predicted("steady")[0]  # cycles per 100 iterations
    assert f["port_pressure_cycles"] == 1.0 and engine == pytest.approx(100, rel=0.02)


def test_the_front_end_bound_sees_the_first_decoder(haswell):
    """A compare with a load as three µops (two fused) is no longer a simple
    decoder's: the engine decodes one an iteration instead of two, and the
    structured surrogate's front-end bound says so."""
    table = haswell.default_table().with_model(pipeline("haswell"), "bhive")
    blocks = [
        harness.accesses(b, "bhive").attach(b)
        for b in map(haswell.parse_asm, ("cmpq 96(%rsp), %r8", "addq %rax, %rbx\naddq %rcx, %rdx", "nop"))
    ]
    complex_ = table.copy()
    complex_.rows["CMP64rm"] = {**table.rows["CMP64rm"], "uops": 3}
    engine = [float(haswell.simulate(blocks[:1], t).predicted("steady")[0]) for t in (table, complex_)]
    assert engine == [50.0, 100.0]
    space = ParamSpace.create(["CMP64rm"], haswell, table)
    inputs = StructuredBlocks.build(blocks, {"CMP64rm": 0}, table.mechanisms)
    batch = inputs.select(torch.tensor([0, 1, 2]))
    contain = torch.tensor(containment(haswell.resources()), dtype=torch.float32)
    slow_port = torch.tensor([float(r["slow_lea"]) for r in haswell.resources()])
    front = []
    for t in (table, complex_):
        matrix, globals_ = (torch.tensor(a) for a in space.encode(t))
        params = torch.cat([matrix, torch.zeros(1, matrix.shape[1])])[batch.rows]  # row -1: the zero row
        b = bounds(params, globals_.expand(3, -1), batch, contain, space.globals, slow_port)
        front.append(b[0, 3].item())
    assert front[0] <= 0.5 and front[1] == 1.0


def test_the_structured_surrogate_reports_the_steady_state_less_the_harness_offset(haswell):
    """Under ``harness_offset`` the engine reports the steady state less the offset's
    cycles; the surrogate (its correction still zero) does the same."""
    table = haswell.default_table().with_model(extended.for_cpu("haswell"), "bhive")
    blocks = [harness.accesses(b, "bhive").attach(b) for b in map(haswell.parse_asm, ("addq %rax, %rbx", "nop"))]
    space = ParamSpace.create(["ADD64rr"], haswell, table)
    batch = StructuredBlocks.build(blocks, {"ADD64rr": 0}, table.mechanisms).select(torch.tensor([0, 1]))
    contain = torch.tensor(containment(haswell.resources()), dtype=torch.float32)
    slow_port = np.array([float(r["slow_lea"]) for r in haswell.resources()])
    model = StructuredModel(contain.shape[1], 8, contain.numpy(), space.globals, slow_port)
    predicted = []
    for offset in (0, 3):
        t = table.copy()
        t.globals["harness_offset_cycles"] = offset
        matrix, globals_ = (torch.tensor(a) for a in space.encode(t))
        params = torch.cat([matrix, torch.zeros(1, matrix.shape[1])])[batch.rows]
        with torch.no_grad():
            predicted.append(model(params, globals_.expand(2, -1), batch))
        engine = haswell.simulate(blocks[:1], t).predicted("steady")[0]
        assert engine == 100.0 - offset
    assert torch.allclose(predicted[0] - predicted[1], torch.tensor([3.0, 3.0]))


def test_a_slow_lea_is_bounded_as_the_engine_runs_it():
    """Under ``slow_lea`` the structured surrogate gives a slow LEA the mechanism's
    latency and one cycle of port 1, as the engine does: the chain `leaq
    8(%rbp,%rsi,8), %rbp` recurs at slow_lea_latency cycles and `leaq 1(%rbx,%r14),
    %rdi` alone takes its port a cycle an iteration; without the mechanism, the row's."""
    skylake = Engine("skylake")
    blocks = [skylake.parse_asm(a) for a in ("leaq 8(%rbp,%rsi,8), %rbp", "leaq 1(%rbx,%r14), %rdi")]
    table = skylake.default_table(blocks).with_model(pipeline("skylake"))
    plain = table.with_model(tuple(m for m in table.mechanisms if m != "slow_lea"))
    found = []
    for t in (table, plain, model_with(table, slow_lea_latency=5)):
        space = ParamSpace.create(["LEA64r"], skylake, t)
        surrogate = StructuredSurrogate.create(
            ["LEA64r"], StructuredConfig(), blocks, skylake.resources(), space.globals, t.mechanisms
        )
        net = surrogate.build_model(None, None)
        batch = surrogate.inputs(blocks).select(torch.tensor([0, 1]))
        matrix, globals_ = (torch.tensor(a) for a in space.encode(t))
        params = torch.cat([matrix, torch.zeros(1, matrix.shape[1])])[batch.rows]
        b = bounds(params, globals_.expand(2, -1), batch, net.contain, net.names, net.slow_port)
        engine = (skylake.simulate(blocks, t).predicted("steady") / 100).tolist()
        found.append(([b[0, 2].item(), b[1, 0].item()], engine))
    assert found == [([3.0, 1.0], [3.0, 1.0]), ([1.0, 0.5], [1.0, 0.5]), ([5.0, 1.0], [5.0, 1.0])]


def test_a_renamed_move_is_bounded_as_the_engine_runs_it(haswell):
    """Under ``move_elimination`` the structured surrogate gives a move renamed away no
    latency and no port, as the engine does: `movq %rax, %rsi` carries the cmov's chain
    at the cmov's latency alone, and two moves back and forth cost only their issue
    slots; without the mechanism, each move its row's cycle."""
    blocks = [
        haswell.parse_asm(a)
        for a in ("movl $1, %eax\ncmovneq %rsi, %rax\nmovq %rax, %rsi", "movq %rax, %rbx\nmovq %rbx, %rax")
    ]
    keys = sorted({k for b in blocks for k in b.row_keys})
    table = haswell.default_table(blocks).with_model(pipeline("haswell"))
    renamed = table.with_model((*table.mechanisms, "move_elimination"))
    found = []
    for t in (renamed, table):
        space = ParamSpace.create(keys, haswell, t)
        surrogate = StructuredSurrogate.create(
            keys, StructuredConfig(), blocks, haswell.resources(), space.globals, t.mechanisms
        )
        net = surrogate.build_model(None, None)
        batch = surrogate.inputs(blocks).select(torch.tensor([0, 1]))
        matrix, globals_ = (torch.tensor(a) for a in space.encode(t))
        params = torch.cat([matrix, torch.zeros(1, matrix.shape[1])])[batch.rows]
        b = bounds(params, globals_.expand(2, -1), batch, net.contain, net.names, net.slow_port)
        engine = (haswell.simulate(blocks, t).predicted("steady") / 100).round(2).tolist()
        found.append((b[:, 2].tolist(), engine))  # the loop-carried recurrence
    (chains, engine), plain = found
    cmov = engine[0]
    assert chains == [cmov, 0.0] and engine[1] < 1.0  # the moves' issue slots, the front end's bytes
    assert plain == ([cmov + 1, 2.0], [cmov + 1, 2.0])


def model_with(table, **globals_):
    changed = table.copy()
    changed.globals.update(globals_)
    return changed


def test_a_partial_write_merges_in_the_graph_as_in_the_engine(haswell):
    """The registers a write of 8 or 16 bits merges into, by the engine's own
    rule: not a 32-bit write (it clears the rest), a load, a high byte, or a write
    of a register the instruction reads; the graph under partial_register then
    carries ``setne %r8b`` from one iteration to the next, as the engine times it."""
    asm = [
        ("setne %r8b", ["R8"]),
        ("movb $1, %r15b", ["R15"]),
        ("movw $1, %cx", ["RCX"]),
        ("addb %al, %bl", []),
        ("movzbl %cl, %eax", []),
        ("movb (%rax), %bl", []),
        ("movb $1, %ah", []),
        ("xorb %al, %al", []),
    ]
    assert [haswell.parse_asm(a).operands[0]["merges"] for a, _ in asm] == [m for _, m in asm]
    block = haswell.parse_asm("testq %r9, %r9\nsetne %r8b")
    table = haswell.default_table([block]).with_model(pipeline("haswell"), "bhive")
    assert "partial_register" in table.mechanisms
    slow = table.copy()
    key = block.row_keys[1]
    slow.rows[key] = {**table.rows[key], "latency": [2]}
    engine = [float(haswell.simulate([block], t).predicted("steady")[0]) for t in (table, slow)]
    ops = with_partial_merges(block.operands)
    graph = BlockGraphs.build([dependencies(ops)], [2]).select([0])
    carried = [latency_bounds(torch.tensor([[1.0, x]]), torch.zeros(1, 2), graph)[1].item() for x in (1.0, 2.0)]
    assert engine == [100.0, 200.0] and carried == [1.0, 2.0]
    plain = BlockGraphs.build([dependencies(block.operands)], [2]).select([0])
    assert latency_bounds(torch.tensor([[1.0, 2.0]]), torch.zeros(1, 2), plain)[1].item() == 0.0


def test_what_the_engine_eliminates_costs_nothing_in_the_bounds(haswell):
    """Under ``locked`` the lock prefix is part of the instruction after it, and a
    macro-fused jcc runs in the compare's µop: neither their latency nor their
    ports move the engine, nor the structured surrogate's bounds."""
    blocks = [
        harness.accesses(b, "bhive").attach(b)
        for b in map(haswell.parse_asm, ("lock\nxaddl %ecx, (%rdi)", "cmpq %rax, %rbx\njne .+2"))
    ]
    table = haswell.default_table(blocks).with_model((*extended.for_cpu("haswell"), "locked"), "bhive")
    keys = sorted({k for b in blocks for k in b.row_keys})
    space = ParamSpace.create(keys, haswell, table)
    batch = StructuredBlocks.build(blocks, space.index, table.mechanisms).select(torch.tensor([0, 1]))
    contain = torch.tensor(containment(haswell.resources()), dtype=torch.float32)
    slow_port = torch.tensor([float(r["slow_lea"]) for r in haswell.resources()])
    engine, bound = [], []
    for scale in (1, 3):
        t = table.copy()
        for key in ("LOCK_PREFIX", blocks[1].row_keys[1]):
            row = table.rows[key]
            t.rows[key] = {
                **row,
                "latency": [scale * x for x in row["latency"]],
                "ports": {**row["ports"], "HWPort6": 4 * scale},
            }
        engine.append(haswell.simulate(blocks, t).predicted("steady").tolist())
        matrix, globals_ = (torch.tensor(a) for a in space.encode(t))
        params = torch.cat([matrix, torch.zeros(1, matrix.shape[1])])[batch.rows]
        bound.append(bounds(params, globals_.expand(2, -1), batch, contain, space.globals, slow_port).tolist())
    assert engine[0] == engine[1] and bound[0] == bound[1]
