"""CPU generations as data: one record per core generation holds what the
extended model knows of it (its mechanisms, what ``extended`` turns on, the
harness of the tool that measured it, its dispatch width, whether it renames
moves away, its front end's rules) and the LLVM ``-mcpu`` names it covers.
The engine receives a generation's facts when it is built (``facts``), so a CPU
of a known generation is one name added here. A mechanism's defaults per
generation are declared with its parameters (``mechanisms.PARAMETERS``).
"""

from __future__ import annotations

from dataclasses import dataclass

from difftune_pipeline.engine import mechanisms

# What ``extended`` turns on for every Intel generation (``harness_offset`` is
# BHive's harness's, which measured them all here). ``locked`` and move
# elimination are left to ``auto``, which adds each where it helps the blocks it
# changes (``extended.optional``): a locked instruction is in about 1 of 500 of
# BHive's blocks, too few to move the whole val MAPE. Move elimination made the
# learned tables worse in early rounds (docs/history.md), while MCA renamed a
# 32-bit register apart from its 64-bit whole (move_elimination.cpp); renamed as
# whole registers, under LLVM's values it brings 117 of the 166 Haswell train
# blocks it changes closer (Ivy Bridge 539 of 691, Skylake 126 of 176) and helps
# the train and val blocks it changes on all three (bench/optional_mechanisms.py).
COMMON = (
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
_INTEL = (*COMMON, "move_elimination", "locked", "memory_ordering", "partial_register")


@dataclass(frozen=True)
class Generation:
    """One core generation. ``dispatch_width``: with fusion modelled by the front
    end, dispatch counts unfused µops, at most one per execution port (None where
    the front end is not modelled). ``unlaminates_indexed``: micro-fusion never
    keeps an indexed memory operand fused (Sandy and Ivy Bridge; Haswell on keeps
    it when the destination is also a source). ``fusible_on_last_decoder``: an
    instruction a jcc could fuse with may take the last decoder (Skylake on).
    ``slow_lea_port``: how LLVM's names of the port a slow LEA runs on end (port 1:
    SBPort1, HWPort1, BWPort1, SKLPort1, SKXPort1 in the models of the CPUs above).
    ``reads_destination``: the LLVM opcodes (name prefixes) whose register forms
    wait for their destination's last writer (``output_dependency``); ``reads_flags``,
    those whose register forms wait for the flags' last writer (the same mechanism).
    ``complex_decoder``: those whose register forms only the first decoder takes
    though they issue as one µop (``complex_decoder``)."""

    name: str
    cpus: tuple[str, ...]
    mechanisms: tuple[str, ...]
    extended: tuple[str, ...]
    harness: str = "bhive"
    dispatch_width: int | None = None
    eliminates_moves: bool = True
    unlaminates_indexed: bool = False
    fusible_on_last_decoder: bool = False
    slow_lea_port: str = ""
    reads_destination: tuple[str, ...] = ()
    reads_flags: tuple[str, ...] = ()
    complex_decoder: tuple[str, ...] = ()

    def facts(self) -> dict:
        """What the engine reads: the mechanisms with their parameters' ranges, and the front end's rules."""
        return {
            "name": self.name,
            "mechanisms": [mechanisms.spec(m) for m in self.mechanisms],
            "unlaminates_indexed": self.unlaminates_indexed,
            "fusible_on_last_decoder": self.fusible_on_last_decoder,
            "slow_lea_port": self.slow_lea_port,
            "reads_destination": list(self.reads_destination),
            "reads_flags": list(self.reads_flags),
            "complex_decoder": list(self.complex_decoder),
        }


# Move elimination: Intel's from Ivy Bridge on (Intel's optimization manual,
# "eliminating register moves") and AMD Zen (Agner Fog's microarchitecture guide,
# Zen's "register move elimination"); not Sandy Bridge. Dispatch width: 6 ports
# (Sandy and Ivy Bridge), 8 (Haswell on). Micro-fusion and the decoders: the
# optimization manual's sections on each generation's front end. The partial-
# register merge, which ``extended`` turns on for Intel: BHive measures
# `movb $1, %r15b` at 0.99 cycles an iteration on Haswell (llvm-mca: 0.5) and
# `cmpq %rsi, %r14 ; sete %al` at 0.98 on Ivy Bridge (0.75); of the 30 Haswell and
# 34 Ivy Bridge blocks of BHive's files whose prediction it changes, it brings 23
# and 20 closer, 6 and 9 further. The x87 stack's faults are in the common set,
# never weighed by ``auto``: BHive's harness starts with the stack empty, so a block
# out of balance faults on every Intel core (mechanisms.py), and the few blocks
# that do are too few to move a whole val MAPE. Page walks too: under LLVM's
# values they bring 248 of the 339 Haswell train blocks they change closer (Ivy
# Bridge 279 of 375, Skylake 236 of 352), and fast pointer chasing 173 of 231
# (225 of 295, 182 of 232), the train MAPE from 7.36% to 7.02% (8.10% to 7.71%,
# 8.87% to 8.52%; bench/optional_mechanisms.py --extended), and the slow LEA 29 of
# 36 (28 of 29, 31 of 48), the train MAPE from 6.75% to 6.66% (7.40% to 7.34%,
# 8.07% to 7.95%): each follows a rule of Intel's manual that the train split
# confirms, and each changes too few val blocks (the slow LEA: 5, 4 and 3) for
# the whole val MAPE to weigh it. Folded loads: under LLVM's values the train
# MAPE goes from 6.66% to 6.28% (Haswell), 7.34% to 7.23% (Ivy Bridge) and 7.95%
# to 7.58% (Skylake), and val from 7.39% to 7.02%, 7.68% to 7.40% and 7.95% to
# 7.74%; the blocks it changes (87, 119 and 98 train blocks) from 47.7% to 13.0%,
# 23.6% to 16.5% and 39.9% to 10.2% (about as many Haswell train blocks go
# further as come closer, mostly by a cycle). Bank conflicts: Sandy and Ivy Bridge only
# (Haswell removed them). Zen+: the memory dependencies, the stack engine and the
# zero-count shift; its front end is not Intel's and is not modelled; its
# measurements are nanoBench's (AnICA's set).
# Destination reads: a bit scan of a zero source leaves its destination as it
# was (AMD's manual documents it; Intel's calls the result undefined, and its
# cores keep it), so BSF and BSR read it on every Intel core. POPCNT waits for
# its destination's last writer from Sandy Bridge to Skylake, and LZCNT and TZCNT
# on Haswell and Broadwell (Intel's specification updates, "POPCNT Instruction
# May Take Longer to Execute Than Expected" and the like for LZCNT and TZCNT;
# LLVM's X86 target breaks these false dependencies for the same cores,
# TuningPOPCNTFalseDeps and TuningLZCNTFalseDeps); Sandy and Ivy Bridge have no
# LZCNT or TZCNT and run those encodings as BSR and BSF. BHive measures
# `bsrq %rsi, %rax ; addq %rdi, %rax` at 4.0 cycles an iteration on Skylake,
# `bsrq %rax, %rcx ; xorl $63, %ecx ; subl %esi, %ecx ; subl %ecx, %edx ; cmpl
# $64, %edx` at 5.05 on Haswell and `tzcntl %edi, %esi ; ...` at 3.99 on Ivy
# Bridge: the chains through the destination.
_BIT_SCANS_AND_COUNTS = ("BSF", "BSR", "POPCNT", "LZCNT", "TZCNT")
# A bit test (BT, BTS, BTR, BTC) writes the carry flag and leaves the zero flag
# as it was (Intel's SDM, BT: "The ZF flag is unaffected"), so it waits for the
# flags' last writer: BHive's Haswell train blocks measure a lone `btl $28, %edx`
# at 0.98 cycles an iteration (llvm-mca: 0.49), Ivy Bridge's `movl 32(%rsp), %eax ;
# btl %ebp, %eax` at 1.99 and Skylake's `movq 40(%rsp), %rsi ; movzbl (%r8,%rsi),
# %esi ; btl %ecx, %esi` at 1.01: a chain from one bit test to the next, whose
# cycles are the rows' latencies.
_BIT_TESTS = ("BT16", "BT32", "BT64", "BTC", "BTR", "BTS")
# The complex decoder (Skylake): CMOVcc and SETcc of registers issue as one µop
# on Skylake (two before it, which the first decoder takes for that), yet BHive's
# Skylake blocks of five instructions with one of them take 2.0 cycles an
# iteration where four decoders a cycle, the first alone for them, give exactly
# that (`leaq -56(%r15), %rax ; xorl %ebx, %ebx ; testq %r15, %r15 ; cmovneq
# %rax, %rbx ; movq %rbx, %rdi`: 2.00; `cmpb $13, %r9b ; setne %r13b ; cmpb $10,
# %r9b ; setne %r15b ; testb %r15b, %r13b`: 1.94; llvm-mca and any decoder alike
# 1.25), and those of four take 1.0, which rules out a second µop. Abel and
# Reineke's uiCA (ICS 2022) records which instructions need the complex decoder
# per microarchitecture from measurements of this kind.
GENERATIONS: tuple[Generation, ...] = (
    Generation(
        "sandybridge",
        ("sandybridge", "corei7-avx"),
        (*_INTEL, "bank_conflict"),
        (*COMMON, "bank_conflict", "partial_register"),
        dispatch_width=6,
        eliminates_moves=False,
        unlaminates_indexed=True,
        slow_lea_port="Port1",
        reads_destination=_BIT_SCANS_AND_COUNTS,
        reads_flags=_BIT_TESTS,
    ),
    Generation(
        "ivybridge",
        ("ivybridge", "core-avx-i"),
        (*_INTEL, "bank_conflict"),
        (*COMMON, "bank_conflict", "partial_register"),
        dispatch_width=6,
        unlaminates_indexed=True,
        slow_lea_port="Port1",
        reads_destination=_BIT_SCANS_AND_COUNTS,
        reads_flags=_BIT_TESTS,
    ),
    Generation(
        "haswell",
        ("haswell", "core-avx2", "broadwell"),
        _INTEL,
        (*COMMON, "partial_register"),
        dispatch_width=8,
        slow_lea_port="Port1",
        reads_destination=_BIT_SCANS_AND_COUNTS,
        reads_flags=_BIT_TESTS,
    ),
    Generation(
        "skylake",
        ("skylake", "skylake-avx512", "cascadelake"),
        (*_INTEL, "complex_decoder"),
        (*COMMON, "partial_register", "complex_decoder"),
        dispatch_width=8,
        fusible_on_last_decoder=True,
        slow_lea_port="Port1",
        reads_destination=("BSF", "BSR", "POPCNT"),
        reads_flags=_BIT_TESTS,
        complex_decoder=("CMOV", "SETCC"),
    ),
    Generation(
        "zen",
        ("znver1",),
        ("memory", "stack_engine", "zero_shift"),
        ("memory", "stack_engine", "zero_shift"),
        harness="nanobench",
    ),
)


def of(mcpu: str) -> Generation | None:
    """The generation covering ``mcpu`` (None: the extended model has no rules for it)."""
    return next((g for g in GENERATIONS if mcpu in g.cpus), None)


def facts(mcpu: str) -> dict:
    """The engine's facts of ``mcpu``'s generation ({} for a CPU without one: llvm-mca only)."""
    generation = of(mcpu)
    return generation.facts() if generation else {}


def covered() -> str:
    """The generations, for messages."""
    return ", ".join(g.name for g in GENERATIONS)
