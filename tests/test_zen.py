"""AMD Zen+ under the extended model: the zero-count shift's assist, nanoBench's
harness model, and AnICA's measurements (a bundled sample) predicted better."""

import csv
from pathlib import Path

import numpy as np
import pytest
import torch

from difftune_pipeline import harness
from difftune_pipeline.engine import Engine, ParamTable, extended
from difftune_pipeline.engine.table import GLOBALS
from difftune_pipeline.model.features import containment
from difftune_pipeline.model.metrics import mape
from difftune_pipeline.model.params import READ_ADVANCE_SLOTS
from difftune_pipeline.surrogates.structured import bounds, n_bounds
from difftune_pipeline.surrogates.structured_blocks import StructuredBlocks

ANICA = Path(__file__).parent / "data" / "anica_zenplus_60.csv"


@pytest.fixture(scope="module")
def zen() -> Engine:
    return Engine("znver1")


@pytest.fixture(scope="module")
def ext(zen) -> ParamTable:
    return zen.default_table().with_model(extended.for_cpu("znver1"), "nanobench")


def per_iteration(engine: Engine, asm: str, table: ParamTable, harness_name: str = "nanobench") -> float:
    block = engine.parse_asm(asm)
    assert block.ok, block.error
    block = harness.accesses(block, harness_name).attach(block)
    result = engine.simulate([block], table)
    assert result.status == ["ok"], result.status
    return float(result.predicted("steady")[0]) / 100


def test_a_flags_read_after_a_zero_count_shift_waits_for_the_assist(zen, ext):
    # AnICA measured this pair at 25.96 cycles an iteration; the shift alone at 1.0.
    assert per_iteration(zen, "shll $0, %r8d\ncmovgel %edx, %ecx", ext) == pytest.approx(26, abs=1)
    assert per_iteration(zen, "shll $0, %r8d", ext) == 1
    for fast in (
        "shll $3, %r8d\ncmovgel %edx, %ecx",  # a count that is not zero
        "shll $0, %r8d\naddl %edx, %ecx",  # no flags read
        "shll $0, %r8d\ntestl %eax, %eax\ncmovgel %edx, %ecx",  # other flags written in between
        "rcll $0, %r8d\naddl %edx, %ecx",  # rcl reads the carry itself, unassisted
    ):
        assert per_iteration(zen, fast, ext) < 3, fast
    assert per_iteration(zen, "rclb $0, %dl\ncmovgel %r11d, %r10d", ext) > 20  # AnICA: 35.44
    # 32-bit counts are taken modulo 32: $32 is a zero count.
    assert per_iteration(zen, "shll $32, %r8d\ncmovgel %edx, %ecx", ext) > 20
    # The flags read first in the block come from the shift of the iteration before.
    assert per_iteration(zen, "cmovgel %edx, %ecx\nshlq $0, %rax", ext) > 20


def test_a_shift_by_cl_is_zero_count_where_the_harness_model_starts_cl_at_zero(zen, ext):
    asm = "shlq %cl, %rax\nadcq 64(%rsi), %rax"
    assert per_iteration(zen, asm, ext) > 20
    assert per_iteration(zen, "movl $3, %ecx\n" + asm, ext) <= 5  # the block sets CL itself
    symbolic = ext.with_model(ext.mechanisms, "none")
    assert per_iteration(zen, asm, symbolic, "none") <= 5  # no harness model: CL unknown


def test_the_assist_penalty_is_a_parameter(zen, ext):
    asm = "shll $0, %r8d\ncmovgel %edx, %ecx"
    longer = ParamTable(ext.mcpu, ext.llvm_version, {**ext.globals, "zero_shift_penalty": 33}, ext.rows,
                        ext.mechanisms, ext.harness)  # fmt: skip
    assert per_iteration(zen, asm, longer) - per_iteration(zen, asm, ext) == pytest.approx(10, abs=0.5)
    off = ext.with_model(("memory", "stack_engine"), "nanobench")
    assert per_iteration(zen, asm, off) < 3


def test_nanobench_harness_model(zen):
    block = zen.parse_asm("movq 64(%rsi), %rax\nmovq %rax, 64(%rdi)\nmovq 8(%rax), %rbx")
    got = harness.accesses(block, "nanobench")
    assert got.status == "ok" and got.harness == "nanobench"
    first = [r for r in got.rows if r[0] == 0]
    (_, _, load, _, _), (_, _, store, _, _), (_, _, chased, _, _) = first
    assert load != store and load % 4096 == store % 4096 == 64  # areas of their own, 4K-aligned + 512 KiB
    assert chased == 8  # memory starts as zeros: the pointer loaded is 0
    # R15 holds the loop count, RAX..R13 zero.
    rows = harness.accesses(zen.parse_asm("movq (%r15), %rax\nmovq (%rcx,%rdx), %rbx"), "nanobench").rows
    assert [r[2] for r in rows if r[0] == 0] == [100, 0]


def test_anica_measurements_predicted_better_than_by_llvm_mca(zen, ext):
    rows: dict[str, list[float]] = {}
    with open(ANICA) as fh:
        for hex_, c in csv.reader(fh):
            rows.setdefault(hex_, []).append(float(c) * 100)
    blocks = [harness.accesses(b, "nanobench").attach(b) for b in zen.disassemble_many(list(rows))]
    truth = np.array([min(v) for v in rows.values()])
    slow = truth > 1500  # AnICA's zero-count shifts before a flags read
    assert slow.sum() >= 10
    llvm = zen.simulate(blocks, zen.default_table(blocks)).predicted("steady")
    model = zen.simulate(blocks, ext).predicted("steady")
    assert mape(model[slow], truth[slow]) < 0.2 < 0.9 < mape(llvm[slow], truth[slow])
    assert mape(model[~slow], truth[~slow]) <= mape(llvm[~slow], truth[~slow])


def test_the_structured_surrogate_bounds_a_drained_block(zen, ext):
    """Its drain bound: the assist's cycles per waiting instruction, plus the
    iteration's critical path once a block drains at all; none without a wait."""
    blocks = [
        harness.accesses(b, "nanobench").attach(b)
        for b in (
            zen.parse_asm("shll $0, %r8d\ncmovgel %edx, %ecx"),
            zen.parse_asm("shll $3, %r8d\ncmovgel %edx, %ecx"),
        )
    ]
    assert [list(b.serialising) for b in blocks] == [[(False,) * 3, (True, False, False)], [(False,) * 3] * 2]
    keys = sorted({k for b in blocks for k in b.row_keys})
    inputs = StructuredBlocks.build(blocks, {k: i for i, k in enumerate(keys)}, ext.mechanisms)
    batch = inputs.select(torch.tensor([0, 1]))
    contain = torch.tensor(containment(zen.resources()), dtype=torch.float32)
    params = torch.zeros(2, 2, 2 + READ_ADVANCE_SLOTS + contain.shape[0])
    params[..., 0] = params[..., 1] = 1.0  # latency 1, one µop
    names = (*GLOBALS, *extended.parameters(ext.mechanisms))
    globals_ = torch.tensor([[float(ext.globals[n]) for n in names]] * 2)
    b = bounds(params, globals_, batch, contain, names)
    assert b.shape == (2, n_bounds(names)) == (2, 5)
    assert b[0, 3].item() == pytest.approx(23 + b[0, -1].item()) and b[1, 3].item() == 0
