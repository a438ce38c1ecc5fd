"""The ``llvm-mca`` binary of the engine's LLVM, as the reference the engine must equal."""

from __future__ import annotations

import json
import math
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

from difftune_pipeline.engine import LLVM_MCA
from difftune_pipeline.engine.trace import Trace

TRIPLE = "x86_64-unknown-linux-gnu"


def llvm_mca_cycles(asm_lines: list[str], mcpu: str, iterations: int = 100) -> int | None:
    """'Total Cycles' of one block, or None when the binary refuses it."""
    proc = subprocess.run(
        [str(LLVM_MCA), f"-mtriple={TRIPLE}", f"-mcpu={mcpu}", f"-iterations={iterations}"],
        input="\n".join(asm_lines) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("Total Cycles:"):
            return int(line.split()[2])
    return None


def llvm_mca_many(blocks_asm: list[list[str]], mcpu: str, workers: int = 2, iterations: int = 100) -> list[int | None]:
    """One binary process per block, ``workers`` at a time."""
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda asm: llvm_mca_cycles(asm, mcpu, iterations), blocks_asm))


def llvm_mca_views(asm_lines: list[str], mcpu: str, iterations: int, shown: int) -> tuple[dict | None, str]:
    """The binary's timeline (first ``shown`` iterations, no cycle limit), resource
    pressure and bottleneck analysis of one block: its JSON document (None when it
    refuses the block) and its text report (the bottleneck analysis is text only)."""
    args = [
        str(LLVM_MCA),
        f"-mtriple={TRIPLE}",
        f"-mcpu={mcpu}",
        f"-iterations={iterations}",
        "-timeline",
        f"-timeline-max-iterations={shown}",
        "-timeline-max-cycles=0",
        "-resource-pressure",
    ]
    text = "\n".join(asm_lines) + "\n"
    as_json = subprocess.run([*args, "-json"], input=text, capture_output=True, text=True, timeout=120)
    as_text = subprocess.run([*args, "-bottleneck-analysis"], input=text, capture_output=True, text=True, timeout=120)
    return (json.loads(as_json.stdout) if as_json.returncode == 0 else None), as_text.stdout


def llvm_mca_rounded(percent: float) -> float:
    """A percentage to two decimals as the binary prints it: half up (90.625 -> 90.63,
    where Python's formatting gives 90.62)."""
    return float(f"{math.floor(percent * 100 + 0.5) / 100:.2f}")


def _unit_name(name: str) -> str:
    """llvm-mca's JSON writes the unit number of a multi-unit resource as a raw byte."""
    return re.sub(r"\.([\x00-\x09])", lambda m: f".{ord(m[1])}", name)


def _bottleneck_percentages(text: str) -> list[float] | None:
    """Back-end pressure, resources, registers, memory, as llvm-mca's bottleneck analysis prints them."""
    if "No resource or data dependency bottlenecks discovered." in text:
        return None
    lines = text.split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("Cycles with backend pressure increase"))
    wanted = ("Cycles with backend", "  Resource Pressure", "  - Register Dependencies", "  - Memory Dependencies")
    return [float(re.search(r"\[ ([0-9.]+)% \]", line)[1]) for line in lines[at:] if line.startswith(wanted)]


def view_differences(trace: Trace, doc: dict, text: str) -> list[str]:
    """Where a trace differs from ``llvm_mca_views`` of the same block and
    iterations: total cycles, resource units, every timeline cycle, every
    resource-pressure value (the same doubles), the bottleneck percentages."""
    ref = doc["CodeRegions"][0]
    out = []
    if trace.units != [_unit_name(u) for u in doc["TargetInfo"]["Resources"]]:
        out.append(f"units {trace.units} vs {doc['TargetInfo']['Resources']}")
    if trace.cycles != ref["SummaryView"]["TotalCycles"]:
        out.append(f"cycles {trace.cycles} vs {ref['SummaryView']['TotalCycles']}")
    mine = [(e.dispatched, e.ready, e.issued, e.executed, e.retired) for e in trace.timeline]
    theirs = [
        (t["CycleDispatched"], t["CycleReady"], t["CycleIssued"], t["CycleExecuted"], t["CycleRetired"])
        for t in ref["TimelineView"]["TimelineInfo"]
    ]
    out += [f"timeline entry {i}: {a} vs {b}" for i, (a, b) in enumerate(zip(mine, theirs)) if a != b]
    if len(mine) != len(theirs):
        out.append(f"timeline entries {len(mine)} vs {len(theirs)}")
    pressure = {(i, j): float(v) for i, row in enumerate(trace.pressure) for j, v in enumerate(row) if v}
    expected = {
        (p["InstructionIndex"], p["ResourceIndex"]): p["ResourceUsage"]
        for p in ref["ResourcePressureView"]["ResourcePressureInfo"]
    }
    if pressure != expected:
        out.append(f"resource pressure {pressure} vs {expected}")
    percentages = _bottleneck_percentages(text)
    if percentages is None:
        if trace.pressure_cycles["any"] and trace.dispatch_stalls:
            out.append("back-end pressure where llvm-mca reports none")
    else:
        reasons = ("any", "resources", "registers", "memory")
        got = [llvm_mca_rounded(trace.pressure_cycles[k] * 100 / trace.cycles) for k in reasons]
        if not trace.dispatch_stalls or got != percentages:
            out.append(f"bottleneck {got} (dispatch stalls {trace.dispatch_stalls}) vs {percentages}")
    return out
