"""The engine's traces and ``difftune explain``: equal to llvm-mca's own views
where llvm-mca has them, and the expected explanation on hand-made blocks."""

import csv
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import SAMPLE, TEST_DATA
from difftune_pipeline.engine import Engine
from difftune_pipeline.engine.reference import llvm_mca_views
from difftune_pipeline.reporting.explain import timeline_header, timeline_text

ITERATIONS, SHOWN = 100, 10
BLOCKS_PER_CPU = 100
PERCENT = re.compile(r"\[ ([0-9.]+)% \]")

POP_CHAIN = "popq %rax\npopq %rbx\npopq %rcx\naddq %rax, %rbx\n"
STORE_LOAD = "movq %rax, 8(%rsp)\nmovq 8(%rsp), %rax\naddq $1, %rax\n"
PORT_BOUND = (
    "vmulps %ymm0, %ymm1, %ymm2\nvmulps %ymm3, %ymm1, %ymm4\nvmulps %ymm5, %ymm1, %ymm6\nvmulps %ymm7, %ymm1, %ymm8\n"
)


def _rows(path, n):
    with open(path) as fh:
        return [h for h, _ in csv.reader(fh)][:n]


def _bottleneck_percentages(text: str) -> list[float] | None:
    """Back-end pressure, resources, registers, memory: llvm-mca's bottleneck analysis."""
    if "No resource or data dependency bottlenecks discovered." in text:
        return None
    lines = text.split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("Cycles with backend pressure increase"))
    wanted = ("Cycles with backend", "  Resource Pressure", "  - Register Dependencies", "  - Memory Dependencies")
    return [float(PERCENT.search(line)[1]) for line in lines[at:] if line.startswith(wanted)]


@pytest.mark.parametrize(
    "mcpu, path",
    [
        ("haswell", SAMPLE / "bhive_hsw_sample.csv"),
        ("skylake", TEST_DATA / "bhive_skl_100.csv"),
        ("ivybridge", TEST_DATA / "bhive_ivb_100.csv"),
    ],
)
def test_trace_equals_llvm_mca_timeline_resource_pressure_and_bottleneck_analysis(mcpu, path):
    engine = Engine(mcpu)
    # Identical input on both sides: the AT&T text both of them parse.
    blocks = [engine.parse_asm("\n".join(b.asm)) for b in engine.disassemble_many(_rows(path, BLOCKS_PER_CPU)) if b.ok]
    with ThreadPoolExecutor(2) as pool:
        references = list(pool.map(lambda b: llvm_mca_views(list(b.asm), mcpu, ITERATIONS, SHOWN), blocks))
    compared = 0
    for block, (doc, text) in zip(blocks, references):
        trace = engine.trace(block, iterations=ITERATIONS, shown=SHOWN)
        assert trace.cycles == engine.simulate([block]).cycles[0]
        if doc is None:
            assert trace.cycles is None, block.asm
            continue
        ref = doc["CodeRegions"][0]
        # Resource units are llvm-mca's columns (its JSON writes a unit's number as a raw byte).
        assert trace.units == [
            re.sub(r"\.([\x00-\x09])", lambda m: f".{ord(m[1])}", u) for u in doc["TargetInfo"]["Resources"]
        ]
        assert trace.cycles == ref["SummaryView"]["TotalCycles"], block.asm
        # The timeline: every cycle of every instruction of the first iterations.
        mine = [(e.dispatched, e.ready, e.issued, e.executed, e.retired) for e in trace.timeline]
        theirs = [
            (t["CycleDispatched"], t["CycleReady"], t["CycleIssued"], t["CycleExecuted"], t["CycleRetired"])
            for t in ref["TimelineView"]["TimelineInfo"]
        ]
        assert mine == theirs, block.asm
        # ... and drawn character by character as the binary draws it.
        lines = text.split("\n")
        at = lines.index("Timeline view:")
        header = timeline_header(trace.last_cycle)
        assert lines[at + 1 : at + 1 + len(header)] == header
        rows = [line for line in lines[at:] if re.match(r"\[\d+,\d+\]", line)]
        assert len(rows) == len(mine)
        assert all(r.startswith(m + "   ") for m, r in zip(timeline_text(trace.timeline), rows)), block.asm
        # Resource pressure per instruction and per iteration: the same doubles.
        theirs = {
            (p["InstructionIndex"], p["ResourceIndex"]): p["ResourceUsage"]
            for p in ref["ResourcePressureView"]["ResourcePressureInfo"]
        }
        mine = {(i, j): v for (i, j), v in _cells(trace.pressure) if v}
        assert mine == theirs, block.asm
        # The bottleneck analysis's percentages (rounded as it prints them).
        cycles = trace.cycles
        expected = _bottleneck_percentages(text)
        pressure = trace.pressure_cycles
        if expected is None:
            assert pressure["any"] == 0 or trace.dispatch_stalls == 0, block.asm
        else:
            assert trace.dispatch_stalls > 0
            got = [pressure[k] * 100 / cycles for k in ("any", "resources", "registers", "memory")]
            assert [float(f"{v:.2f}") for v in got] == expected, block.asm
        compared += 1
    assert compared >= 0.9 * len(blocks)


def _cells(matrix):
    for i, row in enumerate(matrix):
        for j, v in enumerate(row):
            yield (i, j), float(v)
