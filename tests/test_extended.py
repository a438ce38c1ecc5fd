"""The extended model: each mechanism moves cycles the way it should on a
hand-made block; with every mechanism off the engine is llvm-mca; harness
models fall back, with a reason, on blocks they cannot run."""

import json

import numpy as np
import pytest

from conftest import pipeline
from difftune_pipeline import harness
from difftune_pipeline.engine import Engine, InvalidTable, ParamTable, extended
from difftune_pipeline.engine.reference import llvm_mca_many
from difftune_pipeline.model.metrics import helps_where_it_changes

ITER = 100


@pytest.fixture(scope="module")
def base(haswell) -> ParamTable:
    return haswell.default_table()


def cycles(engine: Engine, asm: str, table: ParamTable | None, harness_name: str | None = None) -> int:
    block = engine.parse_asm(asm)
    assert block.ok, block.error
    if harness_name:
        block = harness.accesses(block, harness_name).attach(block)
    result = engine.simulate([block], table, iterations=ITER)
    assert result.status == ["ok"], result.status
    return int(result.cycles[0])


def model(base: ParamTable, mechanisms, harness_name: str = "none", **globals_) -> ParamTable:
    table = base.with_model(mechanisms, harness_name)
    table.globals.update(globals_)
    return table


def test_all_mechanisms_off_is_llvm_mca(haswell, base, sample_rows):
    """A table whose mechanisms were turned on and off again simulates exactly as the binary."""
    on = model(base, ("front_end", "memory", "stack_engine", "move_elimination"))
    kept = on.with_model(())
    assert kept.globals["dispatch_width"] == 8  # without LLVM's table the front end's default stays,
    assert kept.rows["POP64r"]["uops"] == 1  # and so does the pop without its RSP-update µop
    round_trip = on.with_model((), llvm=base)
    assert round_trip.to_dict() == base.to_dict()
    blocks = [haswell.parse_asm("\n".join(haswell.disassemble(h).asm)) for h, _ in sample_rows[:40]]
    blocks = [harness.accesses(b, "bhive").attach(b) for b in blocks]  # accesses change nothing when off
    ours = haswell.simulate(blocks, round_trip).cycles.tolist()
    assert ours == llvm_mca_many([list(b.asm) for b in blocks], "haswell")


LONG = "\n".join(["movabsq $0x123456789abc, %rcx", "movabsq $0x123456789abc, %rdx"] * 2)  # 40 bytes


def test_predecode_bounds_a_block_of_long_instructions(haswell, base):
    plain = cycles(haswell, LONG, base)
    front = cycles(haswell, LONG, model(base, ("front_end",)))
    assert plain < 1.2 * ITER  # llvm-mca: four µops a cycle
    assert 2.4 * ITER <= front <= 2.6 * ITER  # 40 bytes at 16 a cycle
    assert cycles(haswell, LONG, model(base, ("front_end",), predecode_bytes=40)) < 1.2 * ITER


def steady(engine: Engine, asm: str, table: ParamTable) -> float:
    return float(engine.simulate([engine.parse_asm(asm)], table).predicted("steady")[0])


def test_predecoder_marks_five_instructions_a_cycle_of_an_aligned_block(haswell, base):
    """Sixteen 3-byte instructions fill three aligned 16-byte blocks, at most five
    marked a cycle. One that straddles two blocks is marked in the second, but when
    the first's last cycle used all five slots and the straddler's opcode byte is
    still in the first, it costs a cycle of its own. `cmpl $31, %eax` (its opcode
    its first byte): 5, -, 5, -, 5, 1, six cycles (BHive measures 0.37 cycles an
    iteration on Haswell); `movl %r10d, %r14d` (a REX prefix, then the opcode):
    5, 5, -, 5, 1, five cycles (BHive: 3-byte register moves at 0.30)."""
    cmp = "cmpl $31, %eax"
    move = "movl %r10d, %r14d"  # one µop on any ALU port, no fusion
    assert steady(haswell, move, base) == 25.0  # llvm-mca: four a cycle
    assert steady(haswell, cmp, model(base, ("front_end",))) == 37.5
    assert steady(haswell, move, model(base, ("front_end",))) == 31.25
    assert steady(haswell, "movzbl %al, %ecx", model(base, ("front_end",))) == 31.25  # the 0F escape, then the opcode
    assert steady(haswell, move, model(base, ("front_end",), predecode_width=6)) == 25.0
    # the widest predecoder still finds room in the queue: a cmp waiting there for its jcc
    # does not hold it up
    pair = "cmpq %rdx, %rsi\njne .L"
    assert steady(haswell, pair, model(base, ("front_end",), predecode_width=16)) <= 50.0


def test_fusible_instructions_avoid_the_last_decoder_before_skylake(haswell, base):
    """`cmpq $11, %r9` (4 bytes) could fuse with a jcc after it: on Haswell it
    never takes the fourth decoder, three a cycle; on Skylake four."""
    cmp, move = "cmpq $11, %r9", "movzwl %ax, %r9d"  # both 4 bytes, both one ALU µop
    assert steady(haswell, cmp, model(base, ("front_end",))) == pytest.approx(100 / 3)
    assert steady(haswell, move, model(base, ("front_end",))) == 25.0
    skylake = Engine("skylake")
    sky = skylake.default_table([skylake.parse_asm(cmp)]).with_model(("front_end",))
    assert steady(skylake, cmp, sky) == 25.0


def test_complex_instructions_need_the_first_decoder(haswell, base):
    """bswap r64 is two µops: only the first decoder takes it, one a cycle; decoders
    that took two µops would decode all four in a cycle."""
    asm = "\n".join(f"bswapq %r{r}" for r in ("ax", "bx", "cx", "dx"))
    one = cycles(haswell, asm, model(base, ("front_end",)))
    assert one >= 4 * ITER
    assert cycles(haswell, asm, model(base, ("front_end",), simple_decoder_uops=2)) < 0.6 * one


def test_unlamination_comes_after_the_decoders(haswell, base):
    """`cmpq 24(%rcx,%rax,8), %rdx` unlaminates at issue (two fused µops: an
    indexed load whose destination is no source) but the decoders see one µop:
    any decoder takes it, two an iteration a cycle at width 4 (BHive: 0.50 cycles
    an iteration on Haswell); taken as two at decode it would need the first
    decoder, one a cycle. Sandy and Ivy Bridge unlaminate every indexed load."""
    indexed, plain = "cmpq 24(%rcx,%rax,8), %rdx", "cmpq 24(%rcx), %rdx"
    front = model(base, ("front_end",))
    assert steady(haswell, indexed, front) == 50.0
    narrow = model(base, ("front_end",), issue_width=2)  # issue bounds the two fused µops, not the one
    assert (steady(haswell, indexed, narrow), steady(haswell, plain, narrow)) == (100.0, 50.0)
    ivy = Engine("ivybridge")
    ivy_front = ivy.default_table([ivy.parse_asm(indexed)]).with_model(("front_end",))
    assert steady(ivy, indexed, ivy_front) == 50.0


def test_the_steady_state_is_not_read_off_a_filling_pipeline(haswell, base):
    """`movq 96(%rdx), %rsi ; cmpq (%rsi), %r11`: two loads an iteration, one a
    cycle, while the front end issues two iterations a cycle. As the scheduler
    fills, iterations retire in a short repeating pattern faster than one a cycle
    (a 32-iteration window read 91.67 cycles per 100 iterations off it); the
    steady state is the rate BHive's difference of two unroll counts measures."""
    table = model(base, ("front_end", "memory", "folded_load"), "bhive")
    block = haswell.parse_asm("movq 96(%rdx), %rsi\ncmpq (%rsi), %r11")
    block = harness.accesses(block, "bhive").attach(block)
    runs = {n: haswell.simulate([block], table, iterations=n) for n in (100, 200)}
    assert float(runs[100].steady[0]) == float(runs[200].cycles[0] - runs[100].cycles[0]) == 100.0


def test_macro_fusion_of_cmp_and_jcc(haswell, base):
    front = model(base, ("front_end",), predecode_width=16)  # issue, not the predecoder, bounds the pair
    fused = "cmpq %rdx, %rsi\njne .L"
    unfusable = "cmpq %rdx, %rsi\njo .L"  # cmp never fuses with jo
    assert cycles(haswell, fused, base) == cycles(haswell, unfusable, base)
    assert cycles(haswell, fused, front) < 0.8 * cycles(haswell, unfusable, front)


def test_issue_width_and_micro_fusion(haswell, base):
    """Six µops, four fused (two load+op): one cycle an iteration at width 4
    (llvm-mca's four unfused µops a cycle: 1.5), two at width 2. With five
    decoders (the adds, fusible, avoid the last) decode does not bound them."""
    asm = "addq (%rsp), %r8\naddq (%rsp), %r9\naddq $1, %r10\naddq $1, %r11"
    assert cycles(haswell, asm, base) >= 1.5 * ITER
    wide = cycles(haswell, asm, model(base, ("front_end",), decoders=5))
    assert wide <= 1.15 * ITER
    assert cycles(haswell, asm, model(base, ("front_end",), decoders=5, issue_width=2)) >= 1.8 * wide


STORE_LOAD_TWO_REGISTERS = "movq %rax, (%rsi)\nmovq (%rdi), %rax"  # BHive's harness: rsi == rdi
STORE_LOAD_SAME = "movq %rax, (%rdi)\nmovq (%rdi), %rax"


def test_store_to_load_through_the_same_address(haswell, base):
    plain = cycles(haswell, STORE_LOAD_SAME, base)
    memory = model(base, ("memory",))
    forwarded = cycles(haswell, STORE_LOAD_SAME, memory, "none")  # symbolic: the same expression
    assert forwarded >= 5 * plain  # the loop now carries store -> load -> store
    slower = cycles(haswell, STORE_LOAD_SAME, model(base, ("memory",), store_forward_latency=3), "none")
    assert slower >= forwarded + 2.5 * ITER


def test_each_cycle_of_forwarding_latency_costs_a_cycle_an_iteration(haswell, base):
    for asm in (STORE_LOAD_SAME, "addq $1, (%rdi)"):
        runs = [cycles(haswell, asm, model(base, ("memory",), store_forward_latency=f), "none") for f in range(4)]
        assert [b - a for a, b in zip(runs, runs[1:])] == pytest.approx([ITER] * 3, abs=3)


def test_store_to_load_through_registers_the_harness_makes_equal(haswell, base):
    plain = cycles(haswell, STORE_LOAD_TWO_REGISTERS, base)
    symbolic = cycles(haswell, STORE_LOAD_TWO_REGISTERS, model(base, ("memory",)), "none")
    bhive = cycles(haswell, STORE_LOAD_TWO_REGISTERS, model(base, ("memory",), "bhive"), "bhive")
    assert symbolic <= plain + 5  # different expressions: no dependency without a harness
    assert bhive >= 5 * plain


def test_stores_wait_for_no_other_memory_operation(haswell, base):
    # llvm-mca issues a store after older loads and stores: here the second store
    # would wait for the first, whose data the load gives, and the next load for
    # the second store: a chain an iteration long. Stores execute when their
    # operands are ready, so only the store port bounds the loop.
    block = "movq (%rdi), %rax\nmovq %rax, 64(%rdi)\nmovq %rbx, (%rdi)"
    assert cycles(haswell, block, model(base, ("memory",)), "none") <= 2.2 * ITER
    chained = "movq (%rdi), %rax\nmovq %rax, (%rdi)"  # the store's data is the load's: the chain is real
    assert cycles(haswell, chained, model(base, ("memory",)), "none") >= 6 * ITER


def test_a_load_no_store_holds_whole_waits_for_the_store_to_retire(haswell, base):
    # Widths come from the harness (symbolic addresses are a byte wide).
    wider = "movl %eax, (%rdi)\nmovq (%rdi), %rbx"  # 8 bytes read, 4 of them stored: no forwarding
    within = "movq %rax, (%rdi)\nmovl 4(%rdi), %ebx"  # 4 bytes read from 8 stored: forwarded
    assert cycles(haswell, within, model(base, ("memory",), "bhive"), "bhive") <= 1.2 * ITER
    failed = cycles(haswell, wider, model(base, ("memory",), "bhive", store_forward_fail_penalty=0), "bhive")
    assert failed >= 5 * ITER  # in-order retirement makes the wait a chain across iterations
    slower = cycles(haswell, wider, model(base, ("memory",), "bhive", store_forward_fail_penalty=10), "bhive")
    assert slower >= failed + 9 * ITER


def test_a_load_reads_the_youngest_store_to_its_bytes(haswell, base):
    """Read-modify-writes of a byte the iteration first stores afresh: each load
    is served by this iteration's stores, not chained to the last iteration's
    (an Ivy Bridge block BHive measures at 4.6 cycles an iteration)."""
    fresh = "movb %al, 15(%rsp)\nshrb 15(%rsp)\nandb $1, 15(%rsp)"
    chained = "shrb 15(%rsp)\nandb $1, 15(%rsp)"  # nothing stores the byte before the shift reads it
    memory = model(base, ("memory",), "bhive")
    assert cycles(haswell, fresh, memory, "bhive") <= 4 * ITER
    assert cycles(haswell, chained, memory, "bhive") >= 10 * ITER


def test_4k_aliasing_penalty(haswell, base):
    block = haswell.parse_asm(STORE_LOAD_SAME)
    rows = [(k, 0, 0x1000, 8, True) for k in range(2)] + [(k, 1, 0x3000, 8, False) for k in range(2)]
    aliasing = block.with_accesses(rows, True, False)
    far = block.with_accesses(
        [(k, 1, 0x3008, 8, False) if not s else (k, i, a, n, s) for k, i, a, n, s in rows], True, False
    )

    def run(b, **g):
        return int(haswell.simulate([b], model(base, ("memory",), "bhive", **g)).cycles[0])

    assert run(far) <= run(aliasing) - 4 * ITER
    assert run(aliasing, alias_4k_penalty=10) >= run(aliasing) + 4 * ITER
    symbolic = block.with_accesses(rows, False, False)  # stand-in addresses never 4K-alias
    assert run(symbolic) == run(far)


def test_stack_engine_breaks_the_rsp_chain(haswell, base):
    pushes = "pushq %rax\npopq %rbx\npushq %rcx\npopq %rdx"
    plain = cycles(haswell, pushes, base)
    stack = cycles(haswell, pushes, model(base, ("stack_engine",)))
    assert stack < 0.5 * plain


def test_stack_engine_takes_the_rsp_update_out_of_push_and_pop(haswell, base):
    """LLVM's Haswell pop is a load and an ALU µop for RSP; with the stack engine
    it is the load alone (Ivy Bridge's model never had the ALU µop)."""
    on = model(base, ("stack_engine",))
    assert (on.rows["POP64r"]["uops"], on.rows["POP64r"]["ports"]["HWPort0156"]) == (1, 0)
    assert (on.rows["PUSH64r"]["uops"], on.rows["PUSH64r"]["ports"]["HWPort0156"]) == (2, 0)
    assert on.rows["PUSH64i32"] == base.rows["PUSH64i32"]  # LLVM charges it no update
    ivb = Engine("ivybridge").default_table()
    assert ivb.with_model(("stack_engine",)).rows["POP64r"] == ivb.rows["POP64r"]
    # two pops and four adds: eight µops, two cycles at four a cycle; six with the stack engine
    block = "popq %rbx\npopq %rbp\naddq %rax, %rcx\naddq %rdx, %rsi\naddq %r8, %r9\naddq %r10, %r11"
    assert cycles(haswell, block, base) >= 1.95 * ITER
    assert cycles(haswell, block, on) <= 1.6 * ITER


def test_stack_operations_wait_for_an_explicit_rsp_write(haswell, base):
    """A pop's address is the RSP the last explicit write left (plus the stack
    engine's offset): an epilogue that reloads RSP from the stack chains the pop's
    load into the next iteration's pop (BHive measures `addq $72, %rsp ; popq ×7 ;
    leaq -8(%r10), %rsp` at 7.98 cycles an iteration on Haswell)."""
    reload = "popq %r10\nleaq -8(%r10), %rsp"
    stack = model(base, ("stack_engine",))
    load = max(base.rows["POP64r"]["latency"])
    assert cycles(haswell, reload, stack) >= (load + 1) * ITER  # the load, then the lea, every iteration
    independent = "popq %r10\nleaq -8(%r11), %rsp"
    assert cycles(haswell, independent, stack) <= 2 * ITER


def test_explicit_rsp_read_costs_a_sync_uop(haswell, base):
    explicit = "pushq %rax\nmovq %rsp, %rbx\npopq %rcx\nleaq 8(%rsp), %rdx"
    one = cycles(haswell, explicit, model(base, ("stack_engine",)))
    four = cycles(haswell, explicit, model(base, ("stack_engine",), stack_sync_uops=4))
    assert four > one
    no_sync = "pushq %rax\npopq %rcx\nleaq 8(%rsi), %rdx"  # RSP named only by the stack operations
    assert cycles(haswell, no_sync, model(base, ("stack_engine",), stack_sync_uops=4)) == cycles(
        haswell, no_sync, model(base, ("stack_engine",))
    )


def test_sync_uops_sit_in_the_rsp_chain(haswell, base):
    """An epilogue run in a loop: each add to RSP first syncs the pops' offsets, so
    an iteration is the sync µop and the add, one cycle each (BHive measures
    1.99 cycles for this block on Haswell)."""
    epilogue = "addq $32, %rsp\nmovl %edx, %eax\npopq %rbx"
    one = cycles(haswell, epilogue, model(base, ("stack_engine",)))
    assert 1.95 * ITER <= one <= 2.1 * ITER
    assert cycles(haswell, epilogue, model(base, ("stack_engine",), stack_sync_uops=2)) >= one + 0.95 * ITER
    assert cycles(haswell, epilogue, model(base, ("stack_engine",), stack_sync_uops=0)) <= 1.1 * ITER


def test_a_locked_instruction_waits_for_older_ones_to_retire(haswell, base):
    """BHive measures a lone `lock addl $1, (%rsi)` at 19.0 cycles an iteration on
    Haswell; llvm-mca runs it as a plain read-modify-write."""
    locked = model(base, ("locked",))
    # LLVM disassembles the prefix as an instruction of its own; parsed text keeps it a flag.
    from_hex = haswell.disassemble("f0830601")
    assert from_hex.opcodes == ["LOCK_PREFIX", "ADD32mi8"]
    for block in (from_hex, haswell.parse_asm("lock addl $1, (%rsi)")):
        plain, drained = (haswell.simulate([block], t).predicted("steady")[0] for t in (base, locked))
        assert plain < 300 and 1700 <= drained <= 2100
        assert haswell.simulate([block], model(base, ("locked",), lock_penalty=18)).predicted("steady")[0] == (
            drained + 1000
        )
    assert [
        lk for _, lk, _ in haswell.parse_asm("xchgq %rax, (%rbx)\nxchgq %rax, %rbx\naddl $1, (%rsi)").serialising
    ] == [
        True,
        False,
        False,
    ]


def test_an_x87_stack_out_of_balance_faults_every_iteration(haswell, base):
    """BHive's harness starts with the x87 stack empty and runs the block over and
    over: pushing more than it pops overflows the stack within eight iterations,
    popping more (or reading a register never loaded) underflows it, and each fault
    is a microcode assist (`fldz ; testq %rdi, %rdi`: 330 cycles an iteration on Ivy
    Bridge). A balanced block, or one whose first reads fill what they read, never
    faults once the stack has settled."""
    faults = {
        "fldz\ntestq %rdi, %rdi": [True, False],  # overflows
        "fstpt (%rbp)\naddq 24(%rsp), %rbp": [True, False],  # underflows
        "movq %rsi, 8(%rsp)\nfucomi %st(1), %st": [False, True],  # reads two empty registers, writes none
        "fldt 16(%rbx)\nxorl %ebp, %ebp\nfstpt (%r12)": [False] * 3,  # balanced
        "fxch %st(1)\nfstl 120(%rsp)": [False] * 2,  # its masked response fills both registers
        "flds (%rax)\nfld %st(0)\nfmulp\nfstps (%rcx)": [False] * 4,
        "flds (%rax)\nfcompp": [False, True],  # pops two, pushed one
        "fldz\nfninit": [False, False],  # fninit empties the stack again
        "fld1\nfincstp": [True, False],  # fincstp moves TOP and leaves the tags: the pushes fill all eight
    }
    for asm, expected in faults.items():
        assert [x87 for _, _, x87 in haswell.parse_asm(asm).serialising] == expected, asm
    x87 = model(base, ("x87_stack",))
    for asm in ("fldz\ntestq %rdi, %rdi", "fstpt (%rbp)\naddq 24(%rsp), %rbp"):
        plain, assisted = cycles(haswell, asm, base), cycles(haswell, asm, x87)
        assert plain < 2 * ITER and 330 * ITER <= assisted <= 360 * ITER  # the default: 340 cycles an assist
        assert cycles(haswell, asm, model(base, ("x87_stack",), x87_assist_penalty=440)) == assisted + 100 * ITER
    balanced = "fldt 16(%rbx)\nxorl %ebp, %ebp\nfstpt (%r12)"
    assert cycles(haswell, balanced, x87) == cycles(haswell, balanced, base)


def test_a_stream_that_reaches_a_new_page_waits_for_its_walk(haswell, base):
    """An epilogue whose stack adjustment and pops advance RSP by 824 bytes an
    iteration reaches a new page every 5 iterations, and each costs a walk (BHive
    measures `addq $776, %rsp` and six pops at 4.59 cycles an iteration on Ivy
    Bridge, `addq $40, %rsp` and six pops at 3.19). A stream that jumps a page or
    more an iteration is not charged, nor one that stays put."""
    pops = "\n".join(f"popq %r{r}" for r in ("bx", "bp", "12", "13", "14", "15"))
    walks = ("front_end", "memory", "stack_engine", "page_walk")
    off, on = model(base, walks[:-1], "bhive"), model(base, walks, "bhive")

    def per_iteration(asm, table):
        block = haswell.parse_asm(asm)
        return float(haswell.simulate([harness.accesses(block, "bhive").attach(block)], table).steady[0]) / 100

    sweep = f"addq $776, %rsp\n{pops}"
    walked = per_iteration(sweep, on) - per_iteration(sweep, off)
    assert walked == pytest.approx(7 * 824 / 4096, abs=0.3)
    slower = model(base, walks, "bhive", page_walk_penalty=14)
    assert per_iteration(sweep, slower) - per_iteration(sweep, off) == pytest.approx(2 * walked, abs=0.3)
    for asm in (f"addq $4096, %rsp\n{pops}", "movq 8(%rsp), %rax\naddq %rax, %rbx"):
        assert per_iteration(asm, on) == per_iteration(asm, off)


def test_a_load_through_a_loaded_pointer_takes_the_short_path(haswell, base):
    """BHive measures the chain `movq (%rax), %rax` at 4.0 cycles an iteration on
    Haswell (LLVM's load: 5). The short path needs a displacement under 2048, no
    index, and a base that a plain load wrote."""
    chase = model(base, ("pointer_chasing",))
    assert chase.globals["pointer_chase_saving"] == 1
    for asm, short in [
        ("movq (%rax), %rax", True),
        ("movq 2040(%rax), %rax", True),
        ("popq %rax\nmovq 8(%rax), %rbx", True),
        ("movq 2048(%rax), %rax", False),
        ("movq (%rax,%rcx), %rax", False),
        ("movq (%rax), %rax\naddq $8, %rax", False),  # the add, not the load, wrote the base
    ]:
        assert [o["pointer_chase"] for o in haswell.parse_asm(asm).operands][-1 if "pop" in asm else 0] is short, asm
    assert (steady(haswell, "movq (%rax), %rax", base), steady(haswell, "movq (%rax), %rax", chase)) == (500.0, 400.0)
    assert cycles(haswell, "movq 2048(%rax), %rax", chase) == cycles(haswell, "movq 2048(%rax), %rax", base)


def test_a_load_the_store_buffer_serves_takes_the_forwarded_latency(haswell, base):
    """BHive measures `movl 4(%r14), %eax ; incl %eax ; movl %eax, 4(%r14)` at 6.0
    cycles an iteration on Haswell (LLVM's load of 5: 7) and the 32-bit chase
    `movl 112(%rdi), %edi`, no store near it, at 4.0 (the short path's 5 - 1): a
    plain load that a store forwards to takes its own latency after the store's
    data is ready, whatever its row says; one that reads the L1, one whose forward
    fails and an operation with a folded load keep their rows."""
    off = model(base, ("memory",), "bhive")
    on = model(base, ("memory", "forwarded_load"), "bhive")
    assert on.globals["forwarded_load_latency"] == 4

    def per_iteration(asm, table):
        block = haswell.parse_asm(asm)
        return float(haswell.simulate([harness.accesses(block, "bhive").attach(block)], table).steady[0]) / 100

    counter = "movl 4(%r14), %eax\nincl %eax\nmovl %eax, 4(%r14)"
    assert (per_iteration(counter, off), per_iteration(counter, on)) == (7.0, 6.0)
    assert per_iteration(counter, model(base, ("memory", "forwarded_load"), "bhive", forwarded_load_latency=6)) == 8.0
    within = "movq %rax, (%rdi)\nmovl 4(%rdi), %eax"  # 4 bytes of the 8 stored: forwarded
    assert (per_iteration(within, off), per_iteration(within, on)) == (6.0, 5.0)
    for asm in (
        "movl 112(%rdi), %edi",  # no store
        "movl %eax, (%rdi)\nmovq (%rdi), %rbx\naddq %rbx, %rax",  # 8 bytes read, 4 stored: the forward fails
        "addl 4(%r14), %eax\nmovl %eax, 4(%r14)",  # not a plain load
        "movq %rax, 8(%rsp)\npopq %rax\npushq %rax",  # a pop writes RSP too
    ):
        assert per_iteration(asm, on) == per_iteration(asm, off), asm
    skylake = Engine("skylake").default_table().with_model(("memory", "forwarded_load"), "bhive")
    assert skylake.globals["forwarded_load_latency"] == 3


def test_a_load_that_reaches_a_new_page_through_a_loaded_value_misses_the_dtlb(haswell, base):
    """BHive measures the jump-table chain `movslq (%rax,%rsi,4), %rdx ; addq %rdx, %rax`
    at 14.0 cycles an iteration on Haswell and 15.0 on Skylake (the load and the add: 6):
    the loaded value moves the pointer to a new page every iteration, and the load
    takes its translation from the second-level TLB. A stream a register steps, an
    address that comes back to its pages and symbolic addresses are not charged."""
    off = model(base, ("memory",), "bhive")
    on = model(base, ("memory", "dtlb_miss"), "bhive")
    assert on.globals["dtlb_miss_latency"] == 8

    def per_iteration(asm, table, harness_name="bhive", engine=haswell):
        block = engine.parse_asm(asm)
        return float(engine.simulate([harness.accesses(block, harness_name).attach(block)], table).steady[0]) / 100

    chase = "movslq (%rax,%rsi,4), %rdx\naddq %rdx, %rax"
    assert (per_iteration(chase, off), per_iteration(chase, on)) == (6.0, 14.0)
    assert per_iteration(chase, model(base, ("memory", "dtlb_miss"), "bhive", dtlb_miss_latency=4)) == 10.0
    # the first load's page is the one the second load reached four iterations before: a hit
    two = "movl 24(%rax), %edx\nmovslq (%rax,%rdx,4), %rdx\naddq %rdx, %rax"
    assert (per_iteration(two, off), per_iteration(two, on)) == (11.0, 19.0)
    for asm in (
        "movq (%rsi), %rax\naddq %rcx, %rsi\naddq %rax, %rbx",  # a page a step, a register's stride
        "addl %edi, %ecx\nandl %eax, %ecx\nmovl %ecx, %edi\nmovl (%rsi,%rdi,4), %edi",  # masked: no one stride
        "movq (%rax), %rax",  # BHive's pointers all point at one page
        "popq %rax\nsubq $8192, %rsp\naddq 8(%rsp), %rcx",  # a pop's RSP is not the value it loads
    ):
        assert per_iteration(asm, on) == per_iteration(asm, off), asm
    symbolic = model(base, ("memory", "dtlb_miss"), "none")
    assert per_iteration(chase, symbolic, "none") == per_iteration(chase, model(base, ("memory",), "none"), "none")
    skylake = Engine("skylake")
    skylake_on = skylake.default_table().with_model(("memory", "dtlb_miss"), "bhive")
    assert skylake_on.globals["dtlb_miss_latency"] == 9
    assert per_iteration(chase, skylake_on, engine=skylake) == 15.0
    with pytest.raises(InvalidTable, match="dtlb_miss needs memory on"):
        haswell.compile(model(base, ("dtlb_miss",), "bhive"))


def test_a_load_that_4k_aliases_a_store_on_bhives_one_physical_page_waits_for_it_to_retire(haswell, base):
    """BHive measures `movq (%r12), %rdx ; movq 56(%rsp), %rcx ; movq %rcx, (%rdx,%rax,8) ;
    addl $1, 8(%r12)` at 19.2 cycles an iteration on Skylake: the store through the
    loaded pointer and the add's load meet at one page offset, which on BHive's one
    physical page is one byte. The load is not forwarded; it reads the store's data
    once the store has retired. nanoBench's harness has pages of its own: unchanged."""
    asm = "movq (%r12), %rdx\nmovq 56(%rsp), %rcx\nmovq %rcx, (%rdx,%rax,8)\naddl $1, 8(%r12)"
    block = haswell.parse_asm(asm)
    attached = {h: harness.accesses(block, h).attach(block) for h in ("bhive", "nanobench", "none")}
    assert [attached[h].one_page_accesses for h in attached] == [True, False, False]

    def per_iteration(h, mechanisms, **globals_):
        return float(haswell.simulate([attached[h]], model(base, mechanisms, h, **globals_)).steady[0]) / 100

    on = model(base, ("memory", "physical_alias"), "bhive")
    assert on.globals["physical_alias_penalty"] == 10
    assert (per_iteration("bhive", ("memory",)), per_iteration("bhive", ("memory", "physical_alias"))) == (11.0, 16.0)
    assert per_iteration("bhive", ("memory", "physical_alias"), physical_alias_penalty=14) == 20.0
    # a store a page above a load: the same byte only on BHive's one physical page
    block = haswell.parse_asm("movq %rcx, 4096(%r14)\naddl $1, (%r14)")
    for h, off, on in (("bhive", 6.0, 17.0), ("nanobench", 6.0, 6.0), ("none", 6.0, 6.0)):
        accesses = harness.accesses(block, h)
        store, load = accesses.rows[:2]
        assert store[2] - load[2] == 4096, h
        attached[h] = accesses.attach(block)
        assert (per_iteration(h, ("memory",)), per_iteration(h, ("memory", "physical_alias"))) == (off, on), h
    with pytest.raises(InvalidTable, match="physical_alias needs memory on"):
        haswell.compile(model(base, ("physical_alias",), "bhive"))


AHEAD = "movq (%rbp), %rdx\nmovq %rax, (%rdx)\nmovq (%rbx), %rcx\naddq %rcx, %rax"
AHEAD_FOLDED = "movq (%rbp), %rdx\nmovq %rax, (%rdx)\naddq (%rbx), %rax"


@pytest.mark.parametrize("mcpu", ["ivybridge", "haswell", "skylake"])
def test_a_load_that_runs_ahead_of_the_store_it_reads_is_issued_again(mcpu):
    """BHive loads one value through every pointer, so a store through a pointer the
    block loads writes the bytes a later load of a ready register reads. That load's
    address is known first: it runs ahead of the store, and once the store's address
    resolves it is issued again (a memory-ordering machine clear), its data
    `memory_ordering_penalty` cycles after the store's. Where the store's address is
    known no later than the load's, or the two do not meet, nothing changes."""
    engine = Engine(mcpu)
    assert "memory_ordering" in extended.optional(mcpu)
    on = ("memory", "memory_ordering")
    assert model(engine.default_table(), on, "bhive").globals["memory_ordering_penalty"] == 5

    def simulate(asm, mechanisms, iterations=100, **globals_):
        block = engine.parse_asm(asm)
        block = harness.accesses(block, "bhive").attach(block)
        return engine.simulate(
            [block], model(engine.default_table(), mechanisms, "bhive", **globals_), iterations=iterations
        )

    def per_iteration(asm, mechanisms, **globals_):
        return float(simulate(asm, mechanisms, **globals_).steady[0]) / 100

    def cycles(asm, mechanisms, **globals_):  # the first 10 iterations, where every load gets ahead
        return int(simulate(asm, mechanisms, 10, **globals_).cycles[0])

    off, five, ten = (
        per_iteration(AHEAD, m, **g) for m, g in ((("memory",), {}), (on, {}), (on, {"memory_ordering_penalty": 10}))
    )
    assert off == 7.0 and 7.0 < five < ten < 12.5  # not every iteration's load gets ahead

    # a folded load's load is issued again as a load's is: it starts once the data comes
    for m, g in ((("memory",), {}), (on, {}), (on, {"memory_ordering_penalty": 10})):
        assert cycles(AHEAD_FOLDED, (*m, "folded_load"), **g) == cycles(AHEAD, m, **g), (m, g)
    assert cycles(AHEAD, on) - cycles(AHEAD, ("memory",)) == 10 * 5
    for asm in (
        "movq %rax, (%rbp)\nmovq (%rbx), %rcx\naddq %rcx, %rax",  # the store's address known first
        "movq (%rbp), %rdx\nmovq %rax, (%rdx)\nmovq (%rdx), %rcx\naddq %rcx, %rax",  # both known at once
        "movq (%rbp), %rdx\nmovq $1, (%rdx)\nmovq (%rdx), %rcx\naddq %rcx, %rax",  # at once, the data first
        "movq (%rbp), %rdx\nmovq %rax, (%rdx)\nmovq 8(%rbx), %rcx\naddq %rcx, %rax",  # bytes apart
    ):
        assert per_iteration(asm, on) == per_iteration(asm, ("memory",)), asm
        assert cycles(asm, on) == cycles(asm, ("memory",)), asm  # the first iterations too
    assert "memory_ordering" not in extended.optional("znver1")
    with pytest.raises(InvalidTable, match="memory_ordering needs memory on"):
        engine.compile(model(engine.default_table(), ("memory_ordering",), "bhive"))


def test_bit_scans_and_the_counts_with_a_false_dependency_wait_for_their_destination():
    """BHive measures `bsrq %rsi, %rax ; addq %rdi, %rax` at 4.0 cycles an iteration on
    Skylake (llvm-mca: 1.0): a bit scan keeps its destination when the source is
    zero, so it reads it. POPCNT has the same (false) dependency from Sandy Bridge
    to Skylake, LZCNT and TZCNT on Haswell only (Skylake dropped it; Ivy Bridge runs
    TZCNT's encoding as BSF). A load form is left as LLVM has it."""

    def per_iteration(mcpu, asm, mechanisms):
        engine = Engine(mcpu)
        table = engine.default_table().with_model(mechanisms)
        return float(engine.simulate([engine.parse_asm(asm)], table).steady[0]) / 100

    for mcpu, asm, chained in (
        ("skylake", "bsrq %rsi, %rax\naddq %rdi, %rax", 4.0),
        ("haswell", "bsfl %esi, %eax", 3.0),
        ("haswell", "tzcntq %rsi, %rax", 3.0),
        ("haswell", "lzcntw %si, %ax", 3.0),
        ("skylake", "popcntq %rsi, %rax", 3.0),
        ("skylake", "tzcntq %rsi, %rax", 1.0),
        ("ivybridge", "tzcntl %edi, %esi", 3.0),
        ("skylake", "bsrq (%rdi), %rax", 1.0),
    ):
        assert per_iteration(mcpu, asm, ()) == 1.0, (mcpu, asm)
        assert per_iteration(mcpu, asm, ("output_dependency",)) == chained, (mcpu, asm)


def test_a_bit_test_waits_for_the_flags_it_keeps():
    """A bit test writes the carry flag and keeps the zero flag (Intel's SDM), so
    under ``output_dependency`` its register forms wait for the flags' last writer:
    BHive's Haswell train blocks measure a lone `btl $28, %edx` at 0.98 cycles an
    iteration, where llvm-mca gives 0.49. A load form is left as LLVM has it."""

    def per_iteration(mcpu, asm, mechanisms):
        engine = Engine(mcpu)
        table = engine.default_table().with_model(mechanisms)
        return float(engine.simulate([engine.parse_asm(asm)], table).steady[0]) / 100

    for mcpu, asm, apart, chained in (
        ("haswell", "btl $28, %edx", 0.5, 1.0),
        ("ivybridge", "btl %ebp, %eax", 0.5, 1.0),
        ("skylake", "btq %rax, %rcx", 0.5, 1.0),
        ("haswell", "btsq %rcx, %rax\nbtrq $3, %rdx", 1.0, 2.0),  # one chain through both tests' flags
        ("haswell", "btl %eax, (%rdi)", None, None),
        ("haswell", "addl %eax, %ecx\nbtl $3, %esi", 1.0, 1.0),  # the add's flags are not read: no new chain
    ):
        off, on = per_iteration(mcpu, asm, ()), per_iteration(mcpu, asm, ("output_dependency",))
        if apart is None:
            assert on == off, (mcpu, asm)
        else:
            assert (off, on) == (apart, chained), (mcpu, asm)


def test_skylake_decodes_cmov_and_setcc_on_its_first_decoder_alone():
    """BHive measures `leaq -56(%r15), %rax ; xorl %ebx, %ebx ; testq %r15, %r15 ;
    cmovneq %rax, %rbx ; movq %rbx, %rdi` at 2.00 cycles an iteration on Skylake and
    the four instructions `leaq -56(%rbx), %rsi ; testq %rbx, %rbx ; movq %r13, %rdi ;
    cmoveq %r14, %rsi` at 0.95: four decoders a cycle, the first alone for the one-µop
    CMOVcc and SETcc, give both."""
    skylake = Engine("skylake")
    llvm = skylake.default_table()

    def per_iteration(asm, mechanisms):
        table = llvm.with_model(mechanisms)
        return float(skylake.simulate([skylake.parse_asm(asm)], table).steady[0]) / 100

    five = "leaq -56(%r15), %rax\nxorl %ebx, %ebx\ntestq %r15, %r15\ncmovneq %rax, %rbx\nmovq %rbx, %rdi"
    sets = "cmpb $13, %r9b\nsetne %r13b\ncmpb $10, %r9b\nsetne %r15b\ntestb %r15b, %r13b"
    four = "leaq -56(%rbx), %rsi\ntestq %rbx, %rbx\nmovq %r13, %rdi\ncmoveq %r14, %rsi"
    for asm, off, on in ((five, 1.25, 2.0), (sets, 1.25, 2.0), (four, 1.0, 1.0)):
        assert per_iteration(asm, ("front_end",)) == off, asm
        assert per_iteration(asm, ("front_end", "complex_decoder")) == on, asm
    assert "complex_decoder" in extended.for_cpu("skylake")
    with pytest.raises(InvalidTable, match="complex_decoder needs front_end on"):
        skylake.compile(llvm.with_model(("complex_decoder",)))
    with pytest.raises(ValueError, match="complex_decoder is not a mechanism of haswell"):
        Engine("haswell").default_table().with_model(("front_end", "complex_decoder"))


def test_loads_of_one_l1_bank_in_different_sets_do_not_issue_together():
    """Sandy and Ivy Bridge: BHive measures ``movq 8(%rax), %r12 ; cmpq %rcx, 8(%rsp)`` at
    2.0 cycles an iteration on Ivy Bridge (its loads 0x2324008 and 0x2324808: one bank,
    two sets) and 1.0 on Haswell."""
    ivy = Engine("ivybridge")
    llvm = ivy.default_table()
    on = llvm.with_model(extended.for_cpu("ivybridge"), "bhive")
    off = llvm.with_model(extended.EXTENDED, "bhive")
    assert "bank_conflict" in on.mechanisms and on.globals["bank_conflict_penalty"] == 1

    def per_iteration(asm, table, harness_name="bhive"):
        block = ivy.parse_asm(asm)
        block = harness.accesses(block, harness_name).attach(block)
        return float(ivy.simulate([block], table).steady[0]) / 100

    conflict = "movq 8(%rax), %r12\ncmpq %rcx, 8(%rsp)"
    assert per_iteration(conflict, off) == pytest.approx(1.0, abs=0.05)
    assert per_iteration(conflict, on) == pytest.approx(2.0, abs=0.05)
    assert per_iteration(conflict, model(on, on.mechanisms, "bhive", bank_conflict_penalty=0)) == per_iteration(
        conflict, off
    )
    # the same line (one set), other banks, or addresses without a harness model: no conflict
    for asm in ("movq 8(%rax), %r12\nmovq 8(%rax), %r13", "movq 8(%rax), %r12\nmovq 16(%rsp), %r13"):
        assert per_iteration(asm, on) == per_iteration(asm, off)
    symbolic = on.with_model(on.mechanisms, "none")
    assert per_iteration(conflict, symbolic, "none") == per_iteration(conflict, off.with_model(off.mechanisms), "none")
    # a load still waiting for its address holds no younger one: no chain through the pointer it loads
    chase = "movq 40(%rsp), %rax\nmovq 104(%rax), %rbx\ntestq %rbx, %rbx"
    assert per_iteration(chase, on) == per_iteration(chase, off)


def test_bank_conflicts_are_sandy_and_ivy_bridges_and_need_memory(haswell, base):
    with pytest.raises(ValueError, match="bank_conflict is not a mechanism of haswell"):
        base.with_model(("memory", "bank_conflict"), "bhive")
    forced = model(base, ("memory",), "bhive")
    forced.mechanisms = ("memory", "bank_conflict")
    forced.globals["bank_conflict_penalty"] = 1
    with pytest.raises(InvalidTable, match="bank_conflict is not a mechanism of haswell"):
        haswell.compile(forced)
    ivy = Engine("ivybridge")
    alone = ivy.default_table().with_model(("bank_conflict",), "bhive")
    with pytest.raises(InvalidTable, match="bank_conflict needs memory on"):
        ivy.compile(alone)
    assert extended.parse("extended", "ivybridge") == (*INTEL, "bank_conflict", "partial_register")


def test_an_lea_of_three_components_takes_the_slow_path():
    """Intel's optimization manual ("Using LEA"): base, index and displacement, or a
    base of RBP or R13 with an index, take 3 cycles on port 1. BHive measures the chain
    `leaq 8(%rbp,%rsi,8), %rbp` at 3.0 cycles an iteration on Skylake and `leaq
    1(%rbx,%r14), %rdi` alone at 1.0; LLVM gives every LEA one cycle on two ports."""
    for mcpu in ("ivybridge", "haswell", "skylake"):
        engine = Engine(mcpu)
        on = engine.default_table().with_model(pipeline(mcpu))
        assert "slow_lea" in on.mechanisms and on.globals["slow_lea_latency"] == 3
        off = on.with_model(tuple(m for m in on.mechanisms if m != "slow_lea"))
        for asm, slow, fast in [
            ("leaq 8(%rbp,%rsi,8), %rbp", 300, 100),
            ("leaq 1(%rbx,%r14), %rdi", 100, 50),
            ("leaq (%rbp,%rcx), %rbp", 300, 100),  # RBP as the base, with an index
            ("leal 1(%rax,%rax), %eax", 300, 100),
            ("leaq (%rbx,%rcx), %rbx", 100, 100),  # two components: the fast path
            ("leaq 8(%rbx), %rbx", 100, 100),
            ("leaq 8(%rip), %rbx", 50, 50),  # RIP-relative: left out (no BHive train or val block has one)
        ]:
            assert (steady(engine, asm, on), steady(engine, asm, off)) == (slow, fast), (mcpu, asm)
            assert engine.parse_asm(asm).operands[0]["slow_lea"] == (slow != fast), (mcpu, asm)
        # the slow form takes slow_lea_latency cycles, whatever the LEA's row says;
        # the row still times the fast path and gives the slow one its µops
        chain = "leaq 8(%rbp,%rsi,8), %rbp"
        slower = model(on, on.mechanisms, slow_lea_latency=5)
        assert steady(engine, chain, slower) == 500
        row = on.copy()
        row.rows["LEA64r"] = {**on.rows["LEA64r"], "latency": [2]}
        assert steady(engine, chain, row) == 300 and steady(engine, "leaq 8(%rbx), %rbx", row) == 200
        row.rows["LEA64r"]["uops"] = 8  # two cycles of issue, four µops a cycle
        assert steady(engine, "leaq 1(%rbx,%r14), %rdi", row) == 200
    zen = Engine("znver1")
    forced = zen.default_table().with_model(extended.for_cpu("znver1"))
    forced.mechanisms = (*forced.mechanisms, "slow_lea")
    forced.globals["slow_lea_latency"] = 3
    with pytest.raises(InvalidTable, match="slow_lea is not a mechanism of znver1"):
        zen.compile(forced)


def test_a_partial_register_write_merges_into_the_full_register(haswell, base):
    """`movb $1, %r15b` keeps r15's upper bits: each waits for the one before
    (BHive: 0.99 cycles an iteration on Haswell). A 32-bit write clears them, a
    read-modify-write already waits, and a load and a high-8 write are left alone."""
    merged = model(base, ("partial_register",))
    for asm, before, after in [
        ("movb $1, %r15b", 25, 100),
        ("sete %al", 50, 100),
        ("movw $1, %ax", 25, 100),
        ("movl $1, %eax", 25, 25),
        ("addb $1, %al", 100, 100),
        ("movb (%rdi), %al", 50, 50),
        ("movb $1, %ah", 25, 25),  # AH is renamed apart from RAX
    ]:
        assert (steady(haswell, asm, base), steady(haswell, asm, merged)) == (before, after), asm
    zen = Engine("znver1")
    forced = zen.default_table()
    forced.mechanisms = ("partial_register",)
    with pytest.raises(InvalidTable, match="partial_register is not a mechanism of znver1 \\(zen\\)"):
        zen.compile(forced)


def test_move_elimination(haswell, base):
    """A chain of register moves costs a cycle a move in llvm-mca's model; renamed
    away it costs nothing but issue slots, and a limit of one a cycle sits between."""
    chain = "movq %rax, %rbx\nmovq %rbx, %rax\nmovaps %xmm0, %xmm1\nmovaps %xmm1, %xmm0"
    plain = cycles(haswell, chain, base)
    eliminated = cycles(haswell, chain, model(base, ("move_elimination",)))
    one = cycles(haswell, chain, model(base, ("move_elimination",), moves_eliminated=1))
    assert plain >= 2 * ITER and eliminated <= 1.1 * ITER and eliminated < one < plain
    same = "movq %rax, %rax\naddq $1, %rax"  # a move onto itself is not eliminated: the chain stays
    assert cycles(haswell, same, model(base, ("move_elimination",))) >= 2 * ITER


@pytest.mark.parametrize("mcpu", ["haswell", "ivybridge", "skylake"])
def test_a_renamed_move_keeps_the_value_it_copied_when_its_source_is_written_again(mcpu):
    """`movq %rax, %rsi` renamed away makes RSI the value RAX held then: the chain
    RSI → cmov → RSI stays when `movl $1, %eax` writes RAX again (BHive: 1.99 cycles
    an iteration on Haswell). MCA's own elimination aliased RSI to the register RAX,
    so the cmov read the new `movl`'s value and the chain vanished (0.99)."""
    engine = Engine(mcpu)
    table = engine.default_table()
    on = model(table, ("move_elimination",))
    block = "movl $1, %eax\ncmovneq %rsi, %rax\nmovq %rax, %rsi"
    cmov = steady(engine, "cmovneq %rsi, %rsi", table)  # the cmov's latency, a chain of its own
    assert steady(engine, block, on) == pytest.approx(cmov, abs=1.5)
    # an imul between two moves, its source written again after each
    chain = "movq %rbx, %rax\nimulq %rax, %rax\nmovq %rax, %rbx\nmovl $1, %eax"
    alone = steady(engine, "imulq %rax, %rax", table)
    assert steady(engine, chain, on) == pytest.approx(alone, abs=1.5)
    assert steady(engine, chain, table) == pytest.approx(alone + 200, abs=1.5)  # each move a cycle


@pytest.mark.parametrize("mcpu", ["haswell", "ivybridge", "skylake"])
def test_an_eliminated_32_bit_move_starts_a_new_64_bit_value(mcpu):
    """``movl`` zero-extends: renamed away, the 64-bit register that later reads
    see is the move's source, not the last iteration's write of it."""
    engine = Engine(mcpu)
    table = engine.default_table()
    chain = "movl %r8d, %edx\naddq $1, %rdx\nimulq %rdx, %rdx"  # no chain across iterations
    plain = cycles(engine, chain, table)
    eliminated = cycles(engine, chain, model(table, ("move_elimination",)))
    assert eliminated <= plain < 2 * ITER


@pytest.mark.parametrize("mcpu", ["haswell", "ivybridge", "skylake"])
def test_a_folded_load_starts_its_load_before_its_register_operand_is_ready(mcpu):
    """BHive measures `andl $2147483647, %ecx ; addl 192(%r14), %ecx` at 2.0 cycles
    an iteration on Skylake: the add's load runs ahead, and the chain through ECX
    is two one-cycle operations. llvm-mca, which makes the add wait for ECX's
    producer to issue before its read advance counts, says 6. What the load waits
    for keeps its cycles: an address register, a store it reads from."""
    engine = Engine(mcpu)
    # `addq 8(%rax), %rax` moves RAX by a loaded value to a new page every iteration: dtlb_miss's
    on = engine.default_table().with_model(tuple(m for m in pipeline(mcpu) if m != "dtlb_miss"), "bhive")
    off = on.with_model(tuple(m for m in on.mechanisms if m != "folded_load"), "bhive")
    for asm, folded, whole in [
        ("andl $2147483647, %ecx\naddl 192(%r14), %ecx", 200, 600),
        ("cmpq %rax, 24(%rsp)\nsete %al", 200, 600),  # the flags after the load, the merge into RAX
        ("addq 8(%rax), %rax", 600, 600),  # through the address: the load's cycles stay
        ("addl (%rdi), %eax\nmovl %eax, (%rdi)", 700, 700),  # through a store the load reads
        ("imulq (%rdi), %rax", 300, 300),
    ]:
        block = engine.parse_asm(asm)
        block = harness.accesses(block, "bhive").attach(block)
        assert [float(engine.simulate([block], t).steady[0]) for t in (on, off)] == [folded, whole], (mcpu, asm)
    # a block without recorded accesses is timed alike
    assert steady(engine, "andl $2147483647, %ecx\naddl 192(%r14), %ecx", on) == 200


@pytest.mark.parametrize("mcpu,offset", [("ivybridge", 1), ("haswell", 1), ("skylake", 2)])
def test_the_harness_offset_takes_its_cycles_off_the_steady_state_only(mcpu, offset):
    """BHive's figures sit under the steady state by a constant (a median of 1.0,
    1.0 and 2.0 cycles per 100 iterations on the train split under LLVM's values):
    the steady state loses the offset, llvm-mca's Total Cycles do not, and 0 is no offset."""
    engine = Engine(mcpu)
    on = engine.default_table().with_model(extended.for_cpu(mcpu), "bhive")
    assert on.globals["harness_offset_cycles"] == offset
    off = on.with_model(pipeline(mcpu), "bhive")
    none = model(on, on.mechanisms, "bhive", harness_offset_cycles=0)
    for asm in ("addq $1, %rax", "imulq %rax, %rax\nmovq %rax, 8(%rsp)"):
        block = engine.parse_asm(asm)
        block = harness.accesses(block, "bhive").attach(block)
        results = [engine.simulate([block], t) for t in (on, off, none)]
        assert results[0].steady[0] == results[1].steady[0] - offset, (mcpu, asm)
        assert results[2].steady[0] == results[1].steady[0]
        assert results[0].cycles[0] == results[1].cycles[0] == results[2].cycles[0]
    with pytest.raises(InvalidTable, match="harness_offset_cycles = 11 is outside the valid range 0..10"):
        engine.compile(model(on, on.mechanisms, "bhive", harness_offset_cycles=11))


@pytest.mark.parametrize(
    "asm,reason",
    [
        ("divq (%rdi)\nmovq %rax, (%rsi)", "UC_ERR_EXCEPTION"),  # quotient overflow: #DE
        ("ud2", "UC_ERR_INSN_INVALID"),
        ("hex:488b07eb10488906", "control left the block at instruction 1"),  # mov; jmp +16; mov
        ("rep stosb %al, %es:(%rdi)", "did not finish"),  # RCX = 0x2324000 bytes
        ("vmovups %ymm0, (%rdi)", "UC_ERR_INSN_INVALID"),  # the emulator has no 256-bit AVX
    ],
)
def test_blocks_the_harness_cannot_run_fall_back_with_a_reason(haswell, base, asm, reason):
    block = haswell.disassemble(asm[4:]) if asm.startswith("hex:") else haswell.parse_asm(asm)
    assert block.ok, block.error
    got = harness.accesses(block, "bhive")
    assert got.harness == "none" and got.status.startswith("emulation failed") and reason in got.status
    assert got.rows == harness.symbolic(block)
    result = haswell.simulate([got.attach(block)], model(base, ("memory",), "bhive"))
    assert result.status == ["ok"]


def test_symbolic_addresses_of_every_operand_shape(haswell):
    """Absolute (moffs), segment-relative and two-operand string accesses get
    stand-in addresses like any other; the same expression meets itself."""
    block = haswell.parse_asm("movabsq 0x12345678, %rax\nmovq %fs:40, %rbx\nmovsq\nmovq %rax, %fs:40")
    rows = harness.symbolic(block)
    assert {i for _, i, *_ in rows} == {0, 1, 3}  # LLVM does not describe movsq as a load or a store
    assert {i for _, i, *_ in harness.bhive(block.encoding)} == {0, 1, 2, 3}  # the emulator sees it
    first = {(i, s): a for k, i, a, n, s in rows if k == 0}
    assert first[1, False] == first[3, True]  # %fs:40 read, then written
    assert harness.accesses(block, "none").attach(block).accesses


def test_emulation_records_width_and_iterations(haswell):
    block = haswell.parse_asm("vmovups %xmm0, 32(%rdi)\nmovl 4(%rsi), %eax\naddq $64, %rdi")
    rows = harness.bhive(block.encoding)
    first = [r for r in rows if r[0] == 0]
    assert first == [(0, 0, 0x2324020, 8, True), (0, 0, 0x2324028, 8, True), (0, 1, 0x2324004, 4, False)]
    stores = [a for it, i, a, n, s in rows if s][::2]  # the emulator writes 16 bytes as two halves
    assert stores == [0x2324020 + 64 * k for k in range(harness.ITERATIONS)]


def test_a_watcher_sees_the_registers_before_each_instruction(haswell):
    """BHive's state as each instruction finds it: a division of BHive's fill value
    by itself has quotient 1 (bench/division_operands.py reads operands this way)."""
    from unicorn import x86_const as X

    block = haswell.parse_asm("xorl %edx, %edx\ndivq %rbx\naddq $1, %rcx")
    seen = []
    harness.bhive(block.encoding, 2, lambda uc, k, i: seen.append((k, i, uc.reg_read(X.UC_X86_REG_RAX))))
    assert seen == [(0, 0, 0x2324000), (0, 1, 0x2324000), (0, 2, 1), (1, 0, 1), (1, 1, 1), (1, 2, 0)]


def test_table_records_its_model(tmp_path, base):
    table = model(base, ("front_end", "memory"), "bhive", issue_width=5)
    assert table.model == "llvm-mca+front_end+memory@bhive"
    path = tmp_path / "t.json"
    table.to_json(path)
    again = ParamTable.from_json(path)
    assert again.to_dict() == table.to_dict() and again.mechanisms == ("front_end", "memory")
    frame = table.to_frame()
    assert ParamTable.from_frame(frame, table.mcpu, table.llvm_version).to_dict() == table.to_dict()
    assert base.fingerprint() == base.with_model(()).fingerprint()  # llvm-mca's tables keep their ids


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda d: d["model"].update(mechanisms=["front_end", "branch_predictor"]), "model.mechanisms"),
        (lambda d: d["model"].update(harness="agner"), "model.harness"),
        (lambda d: d["globals"].pop("issue_width"), "globals.issue_width: required"),
        (lambda d: d["globals"].update(stack_sync_uops=1), "globals.stack_sync_uops: belongs to a mechanism"),
        (lambda d: d["globals"].update(predecode_bytes=0), "globals.predecode_bytes"),
        (lambda d: d["globals"].update(predecode_width=17), "globals.predecode_width"),
        (lambda d: d["globals"].update(uop_queue_size="56"), "globals.uop_queue_size"),
    ],
)
def test_bad_model_documents_are_refused(tmp_path, base, edit, message):
    doc = model(base, ("front_end",)).to_dict()
    edit(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        ParamTable.from_json(path)


def test_engine_refuses_out_of_range_parameters_and_unsupported_cpus(haswell, base):
    bad = model(base, ("front_end",), decoders=0)
    result = haswell.simulate([haswell.parse_asm("nop")], bad)
    assert "decoders = 0 is outside the valid range" in result.status[0]
    with pytest.raises(InvalidTable, match="no rules for btver2"):
        jaguar = Engine("btver2")
        table = jaguar.default_table()
        table.mechanisms = ("stack_engine",)
        table.globals["stack_sync_uops"] = 1
        jaguar.compile(table)
    with pytest.raises(ValueError, match="no rules for 'btver2'"):
        Engine("btver2").default_table().with_model(("stack_engine",))
    # A mechanism of another generation: Intel's front end on Zen+, Zen+'s zero-count shift on Haswell.
    zen = Engine("znver1")
    with pytest.raises(ValueError, match="front_end is not a mechanism of znver1"):
        zen.default_table().with_model(("front_end",))
    forced = zen.default_table()
    forced.mechanisms = ("front_end",)
    forced.globals.update(extended.defaults("haswell", ("front_end",)))
    with pytest.raises(InvalidTable, match="globals: front_end is not a mechanism of znver1 \\(zen\\): one of memory"):
        zen.compile(forced)
    with pytest.raises(ValueError, match="zero_shift is not a mechanism of haswell"):
        base.with_model(("zero_shift",))
    forced = model(base, ("stack_engine",))
    forced.mechanisms, forced.globals = ("zero_shift",), {**base.globals, "zero_shift_penalty": 23}
    with pytest.raises(InvalidTable, match="globals: zero_shift is not a mechanism of haswell \\(haswell\\)"):
        haswell.compile(forced)


# What ``extended`` turns on for every Intel generation.
INTEL = (
    "front_end",
    "memory",
    "stack_engine",
    "x87_stack",
    "page_walk",
    "pointer_chasing",
    "slow_lea",
    "folded_load",
    "forwarded_load",
    "dtlb_miss",
    "physical_alias",
    "output_dependency",
    "harness_offset",
)


@pytest.mark.parametrize(
    "name,mechanisms",
    [
        ("auto", None),
        ("llvm-mca", ()),
        ("extended", INTEL),
        ("extended+move_elimination", (*INTEL, "move_elimination")),
        ("extended+locked", (*INTEL, "locked")),
        ("llvm-mca+stack_engine+front_end", ("front_end", "stack_engine")),
    ],
)
def test_model_names(name, mechanisms):
    assert extended.parse(name) == mechanisms


def test_auto_weighs_each_mechanism_only_a_generation_has():
    assert extended.candidates("ivybridge") == {
        (): "llvm-mca",
        (*INTEL, "partial_register"): "extended without bank_conflict",
        (*INTEL, "bank_conflict"): "extended without partial_register",
        (*INTEL, "bank_conflict", "partial_register"): "extended",
    }
    assert extended.candidates("haswell") == {
        (): "llvm-mca",
        INTEL: "extended without partial_register",
        (*INTEL, "partial_register"): "extended",
    }
    assert list(extended.candidates("znver1").values()) == ["llvm-mca", "extended without zero_shift", "extended"]


def test_extended_is_each_generations_own():
    assert extended.parse("extended", "haswell") == (*INTEL, "partial_register")
    assert extended.parse("extended", "znver1") == ("memory", "stack_engine", "zero_shift")
    assert extended.parse("extended", "btver2") == ()
    assert extended.harness_for("znver1") == "nanobench" and extended.harness_for("skylake") == "bhive"


@pytest.mark.parametrize(
    "name,message", [("uica", "unknown model"), ("extended+branch_predictor", "unknown mechanism")]
)
def test_bad_model_names_are_refused(name, message):
    with pytest.raises(ValueError, match=message):
        extended.parse(name)


def test_a_mechanism_is_judged_on_the_blocks_it_changes():
    """Two blocks of a hundred change: both come closer, so it helps, though the
    whole MAPE moves by little; one closer and one further by more does not."""
    measured = np.full(100, 100.0)
    before = np.full(100, 110.0)
    after = before.copy()
    after[:2] = [101.0, 100.0]
    helps, how = helps_where_it_changes(before, after, measured)
    assert helps and how == "2 blocks changed, 2 closer, 0 further, MAPE there 10.0% -> 0.5%"
    after[:2] = [100.0, 140.0]
    assert helps_where_it_changes(before, after, measured)[0] is False
    assert helps_where_it_changes(before, before, measured) == (False, "changes no block")
    after = before.copy()
    after[0] = np.nan  # a block the engine refused is not a change
    assert helps_where_it_changes(before, after, measured) == (False, "changes no block")
    assert extended.optional("haswell") == ("move_elimination", "locked", "memory_ordering")
    assert extended.optional("znver1") == ()
    assert extended.label((*extended.for_cpu("haswell"), "locked"), "bhive", "haswell") == "extended+locked"
    assert extended.label(("front_end",), "none", "haswell") == "llvm-mca+front_end"
