"""The in-process engine against the llvm-mca binary, and every override."""

import csv

import numpy as np
import pytest

from conftest import TEST_DATA
from difftune_pipeline import harness
from difftune_pipeline.engine import Engine, InvalidTable, ParamTable, extended
from difftune_pipeline.engine.reference import llvm_mca_many


def _exactness(engine: Engine, hexes: list[str]):
    """Engine vs binary on identical input: the AT&T text both of them parse."""
    blocks = [engine.parse_asm("\n".join(engine.disassemble(h).asm)) for h in hexes]
    ours = engine.simulate(blocks, threads=2)
    ref = llvm_mca_many([list(b.asm) for b in blocks], engine.mcpu)
    return [(h, c, r) for h, c, r in zip(hexes, ours.cycles.tolist(), ref) if c != r]


def test_default_table_matches_llvm_mca_binary(haswell, sample_rows):
    mismatches = _exactness(haswell, [h for h, _ in sample_rows[:300]])
    assert mismatches == []


@pytest.mark.parametrize("mcpu,file", [("skylake", "bhive_skl_100.csv"), ("ivybridge", "bhive_ivb_100.csv")])
def test_other_cpus_match_llvm_mca_binary(mcpu, file):
    with open(TEST_DATA / file) as fh:
        hexes = [row[0] for row in csv.reader(fh)]
    assert _exactness(Engine(mcpu), hexes) == []


def test_hex_path_equals_text_path_when_encoding_survives(haswell, sample_rows):
    hexes = [h for h, _ in sample_rows[:200]]
    direct = haswell.disassemble_many(hexes)
    reparsed = [haswell.parse_asm("\n".join(b.asm)) for b in direct]
    same_opcodes = [i for i, (a, b) in enumerate(zip(direct, reparsed)) if a.opcodes == b.opcodes]
    assert len(same_opcodes) > 190
    a = haswell.simulate([direct[i] for i in same_opcodes]).cycles
    b = haswell.simulate([reparsed[i] for i in same_opcodes]).cycles
    assert np.array_equal(a, b)


def test_a_zero_idiom_in_its_other_encoding_is_the_idiom(haswell):
    """`xorl %r13d, %r13d` encoded 45 33 ed is XOR32rr_REV to the disassembler, which
    LLVM's models do not call a zero idiom: it clears R13 as 45 31 ed does, as the
    llvm-mca binary has it on the block's text (which the assembler encodes 45 31 ed),
    its bytes kept. A _REV form of two registers stays itself, and waits for them."""
    rev, idiom = haswell.disassemble("4533ed"), haswell.disassemble("4531ed")
    assert rev.opcodes == idiom.opcodes == ["XOR32rr"] and rev.operands[0]["dependency_breaking"]
    assert rev.encoding == ["4533ed"] and rev.asm == idiom.asm == ["xorl %r13d, %r13d"]
    chained = haswell.disassemble("4533ed4401e8")  # xorl %r13d, %r13d ; addl %r13d, %eax
    ours = haswell.simulate([rev, chained], threads=1)
    assert ours.cycles.tolist() == llvm_mca_many([list(rev.asm), list(chained.asm)], "haswell")
    assert ours.steady.tolist()[0] < 50  # a zero idiom a quarter of a cycle, no chain through R13
    two = haswell.disassemble("4533ec")  # xorl %r12d, %r13d
    assert two.opcodes == ["XOR32rr_REV"] and haswell.simulate([two]).steady.tolist() == [100.0]


def _cycles(engine, asm: str, table=None, **kw) -> int:
    block = engine.parse_asm(asm)
    assert block.ok, block.error
    result = engine.simulate([block], table, **kw)
    assert result.status == ["ok"], result.status
    return int(result.cycles[0])


def _edit(engine, **rows) -> ParamTable:
    table = engine.default_table()
    for key, changes in rows.items():
        table.rows[key].update(changes)
    return table


CHAIN_IMUL = "imulq %rax, %rax\n" * 4
INDEPENDENT_IMUL = "\n".join(f"imulq %rsi, %r{i}" for i in range(8, 16))
INDEPENDENT_ADD = "\n".join(f"addq $1, %r{i}" for i in range(8, 16))


def test_latency_on_a_dependency_chain(haswell):
    base = _cycles(haswell, CHAIN_IMUL)
    assert haswell.default_table().rows["IMUL64rr"]["latency"] == [3]
    slower = _cycles(haswell, CHAIN_IMUL, _edit(haswell, IMUL64rr={"latency": [6]}))
    assert base == pytest.approx(3 * 4 * 100, rel=0.02)
    assert slower == pytest.approx(6 * 4 * 100, rel=0.02)


def test_override_does_not_leak_to_opcodes_sharing_a_class(haswell):
    add_chain, and_chain = "addq %rbx, %rax\n" * 4, "andq %rbx, %rax\n" * 4
    table = _edit(haswell, ADD64rr={"latency": [5]})
    assert _cycles(haswell, add_chain, table) > 4 * _cycles(haswell, add_chain)
    assert _cycles(haswell, and_chain, table) == _cycles(haswell, and_chain)


def test_port_map(haswell):
    base = _cycles(haswell, INDEPENDENT_IMUL)
    assert haswell.default_table().rows["IMUL64rr"]["ports"]["HWPort1"] == 1
    row = haswell.default_table().rows["IMUL64rr"]
    doubled = _cycles(haswell, INDEPENDENT_IMUL, _edit(haswell, IMUL64rr={"ports": {**row["ports"], "HWPort1": 2}}))
    assert base == pytest.approx(8 * 100, rel=0.02)
    assert doubled == pytest.approx(16 * 100, rel=0.02)
    spread = _cycles(haswell, INDEPENDENT_IMUL, _edit(haswell, IMUL64rr={"ports": {"HWPort0156": 1}}))
    assert spread < base


def test_micro_ops(haswell):
    base = _cycles(haswell, INDEPENDENT_ADD)
    more = _cycles(haswell, INDEPENDENT_ADD, _edit(haswell, ADD64ri8={"uops": 4}))
    assert base == pytest.approx(2 * 100, rel=0.05)  # 8 µops at 4 per cycle
    assert more == pytest.approx(8 * 100, rel=0.05)  # 32 µops at 4 per cycle


def test_read_advance(haswell):
    chain = "addq (%rdi), %rax\n" * 4
    row = haswell.default_table().rows["ADD64rm"]
    assert any(c == 5 for _, _, c in row["read_advance"])
    base = _cycles(haswell, chain)
    none = _cycles(
        haswell, chain, _edit(haswell, ADD64rm={"read_advance": [[u, w, 0] for u, w, _ in row["read_advance"]]})
    )
    assert none > base + 4 * 100 * 4


def test_dispatch_width(haswell):
    table = haswell.default_table()
    assert table.globals["dispatch_width"] == 4
    table.globals["dispatch_width"] = 1
    assert _cycles(haswell, INDEPENDENT_ADD, table) == pytest.approx(8 * 100, rel=0.05)


def test_reorder_buffer(haswell):
    block = "imulq %rax, %rax\n" + "\n".join(f"addq $1, %r{i}" for i in range(8, 16))
    base = _cycles(haswell, block)
    table = haswell.default_table()
    table.globals["micro_op_buffer_size"] = 2
    assert _cycles(haswell, block, table) > base * 1.5


def test_export_import_leaves_results_unchanged(haswell, sample_rows, tmp_path):
    blocks = haswell.disassemble_many([h for h, _ in sample_rows[:200]])
    table = haswell.default_table(blocks)
    path = tmp_path / "t.json"
    table.to_json(path)
    again = ParamTable.from_json(path)
    assert again == table
    assert ParamTable.from_frame(table.to_frame(), table.mcpu, table.llvm_version) == table
    # Compiling every row (not only changed ones) must reproduce LLVM exactly.
    full = haswell._native.compile(again.globals, [{"key": k, **r} for k, r in again.rows.items()])
    n = len(blocks)
    cycles, _, _ = haswell._native.simulate(blocks, [full], list(range(n)), [0] * n, 100, 2, 10**7)
    assert cycles == haswell.simulate(blocks).cycles.tolist()


def test_variant_resolutions_are_separate_rows(haswell):
    zero = haswell.parse_asm("xorl %eax, %eax")
    normal = haswell.parse_asm("xorl %ebx, %eax")
    assert zero.row_keys != normal.row_keys
    table = haswell.default_table([zero, normal])
    assert zero.row_keys[0] in table.rows and normal.row_keys[0] in table.rows
    slow_zero = _edit(haswell, **{})
    slow_zero.rows[zero.row_keys[0]] = {**table.rows[zero.row_keys[0]], "latency": [9]}
    chain_zero, chain_normal = "xorl %eax, %eax\naddl %eax, %eax\n", "xorl %ebx, %eax\naddl %eax, %eax\n"
    assert _cycles(haswell, chain_zero, slow_zero) > _cycles(haswell, chain_zero)
    assert _cycles(haswell, chain_normal, slow_zero) == _cycles(haswell, chain_normal)


@pytest.mark.parametrize(
    "hex_,reason",
    [
        ("abc", "odd number"),
        ("zz", "non-hex"),
        ("", "empty"),
        ("0fff", "undecodable"),
        ("06", "undecodable"),
    ],
)
def test_bad_blocks_fail_alone(haswell, hex_, reason):
    good = haswell.disassemble("4801d8")
    bad = haswell.disassemble(hex_)
    assert not bad.ok and reason in bad.error
    result = haswell.simulate([good, bad, good])
    assert result.status[0] == result.status[2] == "ok"
    assert reason in result.status[1] and result.cycles[1] == -1


def test_unsupported_instruction_fails_alone():
    zen = Engine("znver1")
    blocks = [zen.parse_asm("vpaddd %zmm0, %zmm1, %zmm2"), zen.parse_asm("addq %rax, %rbx")]
    result = zen.simulate(blocks)
    assert "unsupported instruction" in result.status[0]
    assert result.status[1] == "ok"


def test_bad_assembly_text(haswell):
    block = haswell.parse_asm("addq %rax, %notareg")
    assert not block.ok and "line 1" in block.error


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"IMUL64rr": {"latency": [5000]}}, "opcode 'IMUL64rr': latency[0] = 5000 is outside"),
        ({"IMUL64rr": {"uops": -1}}, "opcode 'IMUL64rr': uops = -1"),
        ({"IMUL64rr": {"uops": 0}}, "opcode 'IMUL64rr': uops = 0 while the port map"),
        ({"IMUL64rr": {"ports": {"HWPort9": 1}}}, "no processor resource 'HWPort9'"),
        ({"IMUL64rr": {"ports": {"HWPort1": 2000}}}, "ports.HWPort1 = 2000"),
        ({"IMUL64rr": {"read_advance": [[0, 0, 5000]]}}, "read_advance[0] = 5000"),
    ],
)
def test_invalid_tables_are_refused_naming_opcode_and_parameter(haswell, changes, message):
    with pytest.raises(InvalidTable, match=message.replace("[", r"\[").replace("]", r"\]")):
        haswell.compile(_edit(haswell, **changes))


def test_invalid_globals_and_unknown_opcode(haswell):
    table = haswell.default_table()
    table.globals["dispatch_width"] = 0
    with pytest.raises(InvalidTable, match="dispatch_width = 0"):
        haswell.compile(table)
    table = haswell.default_table()
    table.rows["NOT_AN_OPCODE"] = table.rows["IMUL64rr"]
    with pytest.raises(InvalidTable, match="'NOT_AN_OPCODE': no such opcode"):
        haswell.compile(table)


def test_invalid_table_fails_only_its_pairs(haswell):
    blocks = [haswell.parse_asm(CHAIN_IMUL)]
    bad = _edit(haswell, IMUL64rr={"latency": [-3]})
    result = haswell.simulate_pairs(blocks, [None, bad], [0, 0], [0, 1])
    assert result.status[0] == "ok"
    assert "invalid table" in result.status[1] and "latency[0] = -3" in result.status[1]


def test_cycle_cap_stops_a_runaway_table(haswell):
    table = _edit(haswell, IMUL64rr={"latency": [1000]})
    result = haswell.simulate([haswell.parse_asm(CHAIN_IMUL)], table, cycle_cap=10_000)
    assert "cycle cap" in result.status[0] and result.cycles[0] == -1


def test_threads_do_not_change_results(haswell, sample_rows):
    blocks = haswell.disassemble_many([h for h, _ in sample_rows[:200]])
    tables = [None, _edit(haswell, IMUL64rr={"latency": [7]}), _edit(haswell, ADD64rr={"uops": 3})]
    n = len(blocks)
    bi = np.tile(np.arange(n), 3)
    ti = np.repeat(np.arange(3), n)
    one = haswell.simulate_pairs(blocks, tables, bi, ti, threads=1)
    two = haswell.simulate_pairs(blocks, tables, bi, ti, threads=2)
    assert np.array_equal(one.cycles, two.cycles)


def test_unknown_cpu():
    with pytest.raises(ValueError, match="unknown CPU 'pentium9': LLVM .* models .*haswell"):
        Engine("pentium9")


def test_steady_state_equals_the_binarys_difference_of_two_iteration_counts(haswell, sample_rows):
    """BHive's quantity is cycles(a) - cycles(b) for two unroll counts. Wherever the
    llvm-mca binary's difference is the same for 100 -> 200 and 200 -> 300 iterations
    (the run has settled), the engine's steady state, from one 100-iteration
    simulation, equals it exactly; a trace and fast-forward give the same."""
    blocks = [haswell.parse_asm("\n".join(b.asm)) for b in haswell.disassemble_many([h for h, _ in sample_rows[:80]])]
    asm = [list(b.asm) for b in blocks if b.ok]
    blocks = [b for b in blocks if b.ok]
    c100, c200, c300 = (llvm_mca_many(asm, "haswell", iterations=n) for n in (100, 200, 300))
    settled = [
        i for i in range(len(blocks)) if None not in (c100[i], c300[i]) and c300[i] - c200[i] == c200[i] - c100[i]
    ]
    assert len(settled) >= 70
    result = haswell.simulate(blocks)
    assert [result.steady[i] for i in settled] == [c200[i] - c100[i] for i in settled]
    assert result.cycles.tolist() == c100  # the Total Cycles are still the binary's
    assert haswell.simulate(blocks, fast_forward=True).steady.tolist() == result.steady.tolist()
    assert haswell.trace(blocks[settled[0]]).steady == result.steady[settled[0]]
    assert result.predicted("steady") is result.steady and result.predicted("total").dtype == np.float64
    with pytest.raises(ValueError, match="steady, total"):
        result.predicted("cycles")


def test_fast_forward_is_opt_in_and_close(haswell, sample_rows):
    blocks = haswell.disassemble_many([h for h, _ in sample_rows[:300]])
    full = haswell.simulate(blocks, iterations=1000).cycles
    fast = haswell.simulate(blocks, iterations=1000, fast_forward=True).cycles
    assert np.mean(full == fast) >= 0.98
    assert np.max(np.abs(fast - full) / full) < 0.1
    chain = [haswell.parse_asm(CHAIN_IMUL)]
    assert (
        haswell.simulate(chain, iterations=1000, fast_forward=True).cycles[0]
        == haswell.simulate(chain, iterations=1000).cycles[0]
    )
    # a run fast-forward finds would end past the cycle cap fails as it does simulated to the end
    cap = int(haswell.simulate(chain, iterations=1000).cycles[0]) // 2
    for fast_forward in (False, True):
        result = haswell.simulate(chain, iterations=1000, cycle_cap=cap, fast_forward=fast_forward)
        assert result.status == [f"cycle cap of {cap} cycles exceeded"] and result.cycles.tolist() == [-1]


def test_fast_forward_waits_for_a_fill_to_end(haswell):
    """Stores filling the store buffer repeat twice with a long period before the
    steady state begins: fast-forward must not take that for the steady state."""
    table = haswell.default_table().with_model(extended.for_cpu("haswell"), "bhive")
    block = haswell.parse_asm("movq 120(%rsp), %rdi\nxorl %esi, %esi\nmovq %r8, 128(%rsp)")
    block = harness.accesses(block, "bhive").attach(block)
    full = haswell.simulate([block], table)
    reported = 100.0 - table.globals["harness_offset_cycles"]  # a cycle an iteration, as BHive's harness reports it
    assert full.steady.tolist() == [reported]
    assert haswell.simulate([block], table, fast_forward=True).steady.tolist() == [reported]


def test_partially_overlapping_port_groups_are_refused(haswell):
    # MCA can crash issuing two partially overlapping groups; LLVM's own rows are kept.
    with pytest.raises(InvalidTable, match="'HWPort05' and 'HWPort56' partially overlap"):
        haswell.compile(_edit(haswell, MOV64rr={"ports": {"HWPort05": 1, "HWPort56": 1}}))
    table = haswell.default_table()
    assert haswell._native.compile(table.globals, [{"key": k, **r} for k, r in table.rows.items()])
