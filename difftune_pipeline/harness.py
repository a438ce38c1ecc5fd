"""Harness models: the addresses a block's loads and stores touch where it was
measured, for the extended model's memory dependencies.

``bhive``: BHive's timing harness (ithemal/bhive ``timing-harness``) starts every
general register at 0x2324000 (RSP at 0x2324800, RBP at 0x23247f0), fills the
page with that 8-byte value, maps every page the block touches onto that one
page, clears the flags and sets MXCSR's flush-to-zero and denormals-are-zero.
The block runs there for a few iterations on a real CPU emulator (Unicorn) and
every access is recorded with its width. Pointers the block loads are thus
0x2324000 too, so ``(%rsi)`` and ``(%rdi)`` are often one address.

``nanobench``: nanoBench's user-mode harness (andreas-abel/nanoBench,
``common/nanoBench.h``, ``SAVE_REGS_FLAGS``; how AnICA measured Zen+) sets RAX,
RBX, RCX, RDX, R8-R13 to 0 and R15 to the loop count (100), and points R14,
RBP, RDI, RSI and RSP each into the middle of a 1 MiB area of its own
(page-aligned, so the five addresses are equal modulo 4 KiB); the areas come
from a fresh allocation (zeros) and are never cleared between runs. The state
carries over from one copy of the block to the next.

``none`` (and the fallback when emulation fails, with the reason kept): symbolic
equality of address expressions. Two accesses meet when they use the same
base, index, scale, segment and displacement and no instruction in between
(in this iteration or an earlier one) wrote the base or index register.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable
from dataclasses import dataclass

from unicorn import (
    UC_ARCH_X86,
    UC_HOOK_CODE,
    UC_HOOK_MEM_READ,
    UC_HOOK_MEM_UNMAPPED,
    UC_HOOK_MEM_WRITE,
    UC_MEM_WRITE,
    UC_MODE_64,
    UC_PROT_ALL,
    Uc,
    UcError,
)
from unicorn import x86_const as X

from difftune_pipeline.engine import Block
from difftune_pipeline.engine.extended import HARNESSES

ITERATIONS = 4  # iterations emulated; later ones continue each access's stride
MAX_ACCESSES = 4096  # per block
STEPS = 64  # emulator steps per instruction and iteration (a rep prefix with RCX = 0x2324000 takes millions)
INIT = 0x2324000
CODE = 0x10000000  # where the block's code is placed (away from the data pages)
PAGE = 4096
NANOBENCH_AREAS = 0x7F0000000000  # nanoBench's areas: R14, RBP, RDI, RSI, RSP, 2 MiB apart
NANOBENCH_LOOP = 100  # R15: AnICA's loop count (-loop 100)
_GPRS = (
    X.UC_X86_REG_RAX, X.UC_X86_REG_RBX, X.UC_X86_REG_RCX, X.UC_X86_REG_RDX, X.UC_X86_REG_RSI, X.UC_X86_REG_RDI,
    X.UC_X86_REG_R8, X.UC_X86_REG_R9, X.UC_X86_REG_R10, X.UC_X86_REG_R11, X.UC_X86_REG_R12, X.UC_X86_REG_R13,
    X.UC_X86_REG_R14, X.UC_X86_REG_R15,
)  # fmt: skip
_SYMBOLIC_REGION = 1 << 40  # symbolic addresses: one region per register-version expression


@dataclass(frozen=True)
class Accesses:
    """Where one block's accesses land under one harness model."""

    harness: str  # the model the addresses come from: "bhive", "nanobench", or "none" (symbolic)
    rows: tuple[tuple[int, int, int, int, bool], ...]  # (iteration, instruction, address, bytes, store)
    status: str  # "ok", or why the requested harness model fell back to symbolic addresses

    @property
    def exact(self) -> bool:
        return self.harness != "none"

    @property
    def one_page(self) -> bool:
        """Whether every page is backed by one physical page (``physical_alias``)."""
        return self.harness == "bhive"

    def attach(self, block: Block) -> Block:
        return block.with_accesses(list(self.rows), self.exact, self.one_page)


class EmulationError(Exception):
    """The harness model could not run the block (a fault, an unsupported
    instruction, control leaving the block, too many accesses)."""


def accesses(block: Block, harness: str) -> Accesses:
    """The block's accesses under ``harness``; a block the harness model cannot
    run gets symbolic addresses, with the reason as its status."""
    if harness not in HARNESSES:
        raise ValueError(f"unknown harness {harness!r}: one of {', '.join(HARNESSES)}")
    if not block.ok:
        return Accesses("none", (), f"bad block: {block.error}")
    if harness in _EMULATED:
        try:
            return Accesses(harness, _EMULATED[harness](block.encoding), "ok")
        except EmulationError as exc:
            return Accesses("none", symbolic(block), f"emulation failed: {exc}")
    return Accesses("none", symbolic(block), "ok")


def bhive(encoding: list[str], iterations: int = ITERATIONS, watch: Callable | None = None) -> tuple:
    """Runs the block (its instructions' machine code) ``iterations`` times from
    BHive's initial state, recording every load and store. ``watch(uc, iteration,
    instruction)`` is called before each instruction executes (the emulator's state
    as the harness leaves it there: register values for the benchmarks)."""
    registers = {reg: INIT for reg in _GPRS} | {X.UC_X86_REG_RSP: 0x2324800, X.UC_X86_REG_RBP: 0x23247F0}
    page = ctypes.create_string_buffer(INIT.to_bytes(8, "little") * (PAGE // 8), PAGE)
    return _emulate(encoding, registers, 0x1F80 | 0x8040, page, iterations, watch)  # exceptions masked, FTZ, DAZ


def nanobench(encoding: list[str], iterations: int = ITERATIONS) -> tuple:
    """Runs the block ``iterations`` times from nanoBench's initial state (each
    page it touches zeros of its own), recording every load and store."""
    registers = {reg: 0 for reg in _GPRS} | {X.UC_X86_REG_R15: NANOBENCH_LOOP}
    pointers = (X.UC_X86_REG_R14, X.UC_X86_REG_RBP, X.UC_X86_REG_RDI, X.UC_X86_REG_RSI, X.UC_X86_REG_RSP)
    for k, reg in enumerate(pointers):
        registers[reg] = NANOBENCH_AREAS + k * (2 << 20) + (1 << 19)
    return _emulate(encoding, registers, 0x1F80, None, iterations)


def _emulate(encoding: list[str], registers: dict, mxcsr: int, page, iterations: int, watch=None) -> tuple:
    """Runs the block from the given registers, mapping each data page it touches
    onto ``page`` (one shared buffer) or, with None, a zeroed page of its own."""
    code = b"".join(bytes.fromhex(h) for h in encoding)
    starts, offset = {}, 0
    for i, h in enumerate(encoding):
        starts[CODE + offset] = i
        offset += len(h) // 2
    end = CODE + len(code)
    uc = Uc(UC_ARCH_X86, UC_MODE_64)
    uc.mem_map(CODE, -(-len(code) // PAGE) * PAGE, UC_PROT_ALL)
    uc.mem_write(CODE, code)
    for reg, value in registers.items():
        uc.reg_write(reg, value)
    uc.reg_write(X.UC_X86_REG_EFLAGS, 0x2)
    uc.reg_write(X.UC_X86_REG_MXCSR, mxcsr)
    state = {"instr": 0, "iteration": 0, "left": None}
    rows: list[tuple[int, int, int, int, bool]] = []

    def on_code(uc, address, size, _):
        if address not in starts:  # a jump out of (or into the middle of) the block
            state["left"] = address
            uc.emu_stop()
        else:
            state["instr"] = starts[address]
            if watch is not None:
                watch(uc, state["iteration"], state["instr"])

    def on_access(uc, kind, address, size, value, _):
        if len(rows) >= MAX_ACCESSES:
            state["left"] = "accesses"
            uc.emu_stop()
            return
        rows.append((state["iteration"], state["instr"], address, size, kind == UC_MEM_WRITE))

    def on_unmapped(uc, kind, address, size, value, _):
        # Every data page is the one shared page, or a zeroed one. An access may straddle
        # two, one of them mapped already; one that cannot be mapped faults the block.
        mapped = False
        for base in sorted({address & ~(PAGE - 1), (address + max(size, 1) - 1) & ~(PAGE - 1)}):
            if CODE <= base < end:
                continue
            try:
                if page is None:
                    uc.mem_map(base, PAGE, UC_PROT_ALL)
                else:
                    uc.mem_map_ptr(base, PAGE, UC_PROT_ALL, ctypes.addressof(page))
                mapped = True
            except UcError:  # mapped before (the other half of the access), or not mappable
                continue
        return mapped

    uc.hook_add(UC_HOOK_CODE, on_code)
    uc.hook_add(UC_HOOK_MEM_READ | UC_HOOK_MEM_WRITE, on_access)
    uc.hook_add(UC_HOOK_MEM_UNMAPPED, on_unmapped)
    for k in range(iterations):
        state["iteration"] = k
        try:
            uc.emu_start(CODE, end, count=len(encoding) * STEPS)
        except UcError as exc:
            raise EmulationError(f"{exc} at instruction {state['instr']}") from None
        if state["left"] == "accesses":
            raise EmulationError(f"more than {MAX_ACCESSES} memory accesses")
        if state["left"] is not None:
            if state["instr"] != len(encoding) - 1:  # a branch ending the block may go anywhere
                raise EmulationError(f"control left the block at instruction {state['instr']}")
        elif uc.reg_read(X.UC_X86_REG_RIP) != end:
            raise EmulationError(f"did not finish within {STEPS} steps an instruction (at {state['instr']})")
        state["left"] = None
    return tuple(rows)


def _expression(address: str, version: dict[str, int]) -> tuple[tuple, int]:
    """(the registers-and-versions part, the displacement) of a memory operand as
    ``Block.operands`` spells it (base, scale, index, displacement, segment); any
    other shape (an absolute ``moffs`` operand, two memory operands) is keyed whole."""
    fields = address.split(",")
    if len(fields) == 5 and re.fullmatch(r"-?\d+", fields[3]):
        base, scale, index, disp, segment = fields
        return (base, version.get(base, 0), scale, index, version.get(index, 0), segment), int(disp)
    return (address, *(version.get(f, 0) for f in fields)), 0


_EMULATED = {"bhive": bhive, "nanobench": nanobench}


def symbolic(block: Block) -> tuple:
    """Stand-in addresses, one byte wide, that are equal exactly when the address
    expressions are (same registers, not written in between, same displacement)."""
    operands = block.operands
    version: dict[str, int] = {}
    regions: dict[tuple, int] = {}
    rows = []
    for k in range(ITERATIONS):
        for i, op in enumerate(operands):
            if op["address"]:
                key, disp = _expression(op["address"], version)
                region = regions.setdefault(key, len(regions) + 1)
                address = region * _SYMBOLIC_REGION + disp
                if op["may_load"]:
                    rows.append((k, i, address, 1, False))
                if op["may_store"]:
                    rows.append((k, i, address, 1, True))
            for reg in op["writes"]:
                version[reg] = version.get(reg, 0) + 1
    return tuple(rows)
