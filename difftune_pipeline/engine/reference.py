"""The ``llvm-mca`` binary of the engine's LLVM, as the reference the engine must equal."""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor

from difftune_pipeline.engine import LLVM_MCA

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
