"""The extended model's mechanisms and their parameters, declared once: the
engine's checks, the tables' documents, the samplers and the surrogates all
read them from here.

- ``front_end``: a predecoder of aligned blocks and a number of instructions a
  cycle, decoders (one complex; before Skylake not the last for a fusible instruction), the µop
  queue and the issue width, macro-fusion (cmp/test+jcc) and micro-fusion, and
  the predecoder's stall on a length-changing prefix (66h with a 16-bit immediate).
- ``complex_decoder`` (Skylake): a register-form CMOVcc or SETcc (the generation's
  ``complex_decoder`` opcodes) is decoded by the first decoder alone, as an instruction of
  more than one µop is, though it issues as one (with ``front_end``).
- ``memory``: a load waits for the youngest older store to its bytes (once the
  store's data is ready, plus a store-to-load forwarding latency) or for one
  whose address it 4K-aliases (a penalty), at the addresses a harness model
  gives (see ``difftune_pipeline.harness``).
- ``stack_engine``: push and pop leave no dependency chain through RSP (each waits only for
  the last explicit write of RSP, whose value its address is offset from), and push/pop/call/ret
  no µop to update it; an explicit use of RSP after them costs a sync µop, which also sits in
  the RSP chain (one cycle each).
- ``move_elimination``: register-to-register moves are renamed away (no µop,
  no latency), a limited number a cycle.
- ``locked`` (Intel): a locked instruction (a lock prefix, or xchg with memory)
  issues once every older instruction has retired, and a number of cycles later.
- ``zero_shift`` (AMD Zen+): an instruction that reads the flags a zero-count
  shift or rotate left waits, once every older instruction has retired, for an
  assist of a number of cycles.
- ``partial_register`` (Intel): an instruction that writes the low 8 or 16 bits of a
  general-purpose register without reading them (``movb $1, %al``, ``sete %al``; not a load,
  not a zero idiom) waits for the full register, as it merges into it.
- ``x87_stack`` (Intel): an x87 instruction that reads an empty register of the
  x87 stack or pushes onto a full one (the stack followed from empty, as BHive's
  harness leaves it, until it settles) issues once every older instruction has
  retired, and a number of cycles later: the microcode assist of a masked stack fault.
- ``page_walk`` (Intel): an access of a stream that steps by a constant stride
  of less than a page an iteration, the run's first to a 4 KiB page, walks the
  page tables, and no younger memory operation issues until a number of cycles
  after it (with ``memory``, at the addresses a harness model gives).
- ``pointer_chasing`` (Intel): a load through a pointer a plain load gave (base
  plus a displacement under 2048, no index) delivers its data a number of
  cycles sooner: the load pipeline's short path.
- ``bank_conflict`` (Sandy and Ivy Bridge): two loads that read one bank of the
  L1 data cache (address bits 2-5) in different sets do not issue in one cycle:
  the younger waits a number of cycles after the older issues (with ``memory``,
  at the addresses a harness model gives).
- ``folded_load`` (Intel): an instruction that loads an operand is a load and
  an operation: the load starts once its address is ready (and any store it
  reads from has forwarded), the operation once the loaded value and its
  register operands are; the load's cycles are the largest read advance of the
  opcode's row (with ``memory``).
- ``forwarded_load`` (Intel): a plain load (one register written, nothing read
  but its address) that an older store of the block forwards to delivers its data
  a number of cycles after it issues (once the store's data is ready), whatever
  its row's latency, which then times loads from the L1 alone (with ``memory``).
- ``dtlb_miss`` (Intel): a load whose 4 KiB page the first-level DTLB (64
  entries) no longer holds in every iteration of the steady state, at the
  addresses a harness model gives, takes its translation from the second-level
  TLB: its result comes a number of cycles later (with ``memory``).
- ``output_dependency`` (Intel): a register-form bit scan (BSF, BSR), and on
  the generations that have the false dependency POPCNT, LZCNT and TZCNT, waits
  for its destination's last writer (``generations.Generation.reads_destination``),
  a register-form bit test (BT, BTS, BTR, BTC) for the flags' (``reads_flags``).
- ``physical_alias`` (Intel): on a harness's one physical page (BHive's) a load
  that 4K-aliases an older store reads its bytes, unforwarded, a number of cycles
  after the store retires (with ``memory``).
- ``memory_ordering`` (Intel): a load whose address is known before that of
  the older store it reads from runs ahead of it and is issued again once the
  store's address resolves: its data comes a number of cycles after the store's
  (with ``memory``).
- ``slow_lea`` (Intel): an LEA of base, index and displacement (or of a base of
  RBP or R13 with an index) takes a number of cycles on one port (the
  generation's ``slow_lea_port``), where LLVM gives every LEA one cycle on two.

A mechanism's parameters are globals of the table. Each is declared with its
default, the defaults of the generations that differ (``by_generation``, keyed by
``generations.Generation.name``), the range the engine accepts, and how the
samplers draw it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Parameter:
    """One global of a mechanism: its default (``by_generation`` overrides it per
    CPU generation), the range the engine accepts (``limits``), how the sampling
    presets draw it (DiffTune's uniform preset from ``sample``; the perturbing one
    by up to ``step``, or times 0.5..1.5 when ``step`` is None), the scale the
    LSTM surrogate divides it by, and the coordinate search's step (``move``)."""

    mechanism: str
    default: int
    limits: tuple[int, int]
    sample: tuple[int, int]
    step: int | None
    scale: float
    by_generation: tuple[tuple[str, int], ...] = ()
    move: int = 1

    def default_for(self, generation: str) -> int:
        return dict(self.by_generation).get(generation, self.default)


# Sources of the defaults. Intel 64 and IA-32 Architectures Optimization
# Reference Manual (248966), the sections on each generation's front end
# ("legacy decode pipeline"): 16 bytes predecoded per cycle, four decoders of
# which only the first decodes instructions of more than one µop, four fused
# µops renamed per cycle; the decoded-µop queue (IDQ) holds 56 µops (Sandy
# Bridge, Ivy Bridge with one thread, Haswell) or 64 (Skylake). A length-changing
# prefix stalls the predecoder 3 cycles (same manual, "Length-Changing Prefixes
# (LCP)", Sandy Bridge on; BHive measures a lone `cmpw $1024, %si` at 3.3 cycles
# an iteration on Haswell, Ivy Bridge and Skylake).
# The predecoder works through aligned 16-byte blocks and marks at most 5
# instructions a cycle, and before Skylake an instruction that a jcc could fuse
# with avoids the last decoder (Abel and Reineke, "uiCA: Accurate Throughput
# Prediction of Basic Blocks on Recent Intel Microarchitectures", ICS 2022, whose
# simulator runs BHive's unrolled blocks through the legacy decoders): BHive
# measures `cmpl $31, %eax` at 0.37 cycles an iteration on Haswell, 16 such
# instructions taking 6 predecode cycles, and 3-byte register moves with a REX
# prefix at 0.30, 16 taking 5: an instruction that straddles two blocks costs a
# cycle of its own only when its opcode byte is in the first (front_end.cpp).
# Five on every generation: on the pipeline's train split of BHive's files (full
# profile), LLVM's values under the extended model score 7.41% MAPE with 5 and
# 8.52% with 6 on Haswell, 8.03% and 9.09% on Ivy Bridge, 9.01% and 9.88% on Skylake.
# Memory: a load fed by a store gets its data about as late as its own load
# latency (Agner Fog, "The microarchitecture of Intel, AMD and VIA CPUs",
# "store forwarding": ~5 cycles on these cores), so no extra cycles by default,
# counted from when the store's data is ready: a plain store's (a register or an
# immediate) the cycle after it issues, whatever latency LLVM gives it (Sandy
# Bridge's push: 5), a read-modify-write's in its last cycle (BHive measures
# `addl $1, 56(%rsp)` at 6.0 cycles an iteration on Haswell, whose instruction
# LLVM times at 7);
# a failed forward costs about 10-12 cycles more (same guide); a 4K-aliasing
# load is reissued about 5 cycles later (the Optimization Manual, "4K aliasing").
# Stack engine: one sync µop, an ALU operation of one cycle (Agner Fog, same
# guide, "stack engine").
# Move elimination (Ivy Bridge on; the manual's "eliminating register moves"
# gives no rate): at most the rename width a cycle, to be learned.
# Zen+ (the nanoBench measurements of AnICA's artifact; Ritter and Hack, "AnICA",
# OOPSLA 2022): a flags read after a zero-count shift costs the block about 26
# cycles an iteration (`shll $0, %r8d ; cmovgel %edx, %ecx`: 25.96; the shift
# alone: 1.0). With the pipeline draining first, an assist of 23 cycles gives 26. Zen+'s memory and stack-engine values
# have no public figure of their own here: they start from the Intel values above
# and are learned like every other.
# Locked instructions drain the store buffer and run alone (Intel's optimization
# manual, "locked instructions"); BHive measures a lone `lock addl $1, (%rsi)` at
# 19.0 cycles an iteration on Haswell. The cycles after the drain are those that
# fit BHive's blocks with a locked instruction best under the other mechanisms'
# defaults (the median of predicted over measured closest to 1): Haswell 8 (23
# blocks of its 10,000), Ivy Bridge 12 (9), Skylake 10 (5).
# x87 stack faults: the Intel SDM (vol. 1, 8.5.1.1, "Stack Overflow or Underflow
# Exception") defines them; the assist's cycles fit BHive's train blocks that fault
# (`fldz ; testq %rdi, %rdi`: 330 cycles an iteration on Ivy Bridge; `fstpt (%rbp)
# ; ...`: 356 on Haswell) best under the other mechanisms' defaults (the median of
# predicted over measured closest to 1: 0.98 over Haswell's five, 1.01 over Ivy
# Bridge's two; Skylake's train split has none).
# L1 bank conflicts (Sandy and Ivy Bridge): Intel's optimization manual (248966),
# "L1D cache bank conflicts": two loads with the same address bits 2-5 in
# different sets (bits 6-12) conflict, and the younger is delayed until the
# conflict resolves, one cycle (Haswell removed them). BHive measures
# `movq 8(%rax), %r12 ; cmpq %rcx, 8(%rsp)` at 2.0 cycles an iteration on Ivy
# Bridge (its loads 0x2324008 and 0x2324808) and 1.0 on Haswell; over 3,000 of
# BHive's Ivy Bridge blocks, those with such a pair are predicted 7.3% too fast
# on average without the mechanism, and those with two loads and none 1.5%.
# Fast pointer chasing: Intel's optimization manual gives Sandy Bridge to Skylake
# a 4-cycle load-to-use latency for simple addressing, 5 otherwise, and Abel and
# Reineke's uiCA (ICS 2022) measured when the short path applies (base plus a
# displacement under 2048, no index, the base from a plain load); BHive measures
# the chain `movq (%rax), %rax` at 4.0 cycles an iteration on Haswell. One cycle.
# Page walks: BHive's harness maps every page a block touches onto one physical
# page, so a block that advances a pointer by a stride (an epilogue's `addq $N,
# %rsp` before its pops) reaches a new virtual page, whose translation the DTLB
# lacks, every 4096/stride iterations (Intel's optimization manual, "DTLB").
# On the pipeline's train split (full profile), the blocks whose one strided
# stream advances 64 to 4095 bytes an iteration are predicted too fast by 5.4 to
# 8.3 cycles per page they reach (medians per stride band), on Haswell, Ivy
# Bridge and Skylake alike.
# Slow LEA: Intel's optimization manual (248966), "Using LEA" (Sandy Bridge on):
# an LEA of three operands (base, index and offset), or with a base of EBP, RBP
# or R13 and an index, has a latency of 3 cycles and must dispatch through port
# 1. BHive measures the chain `leaq 8(%rbp,%rsi,8), %rbp` at 3.0 cycles an
# iteration on Skylake and `leaq 1(%rbx,%r14), %rdi` alone at 1.0 (docs/model.md).
# Forwarded loads: Intel's optimization manual (248966), "store forwarding", and
# Agner Fog's guide (same section) give store-to-load forwarding about the L1's
# latency, but LLVM has one latency per load, which the tuner had to split
# between the pointer chase (BHive measures `movl 112(%rdi), %edi` at 4.0 cycles
# an iteration on Haswell) and a load the store buffer serves (`movl 4(%r14),
# %eax ; incl %eax ; movl %eax, 4(%r14)`: 6.0, of which the load 4 counted from
# the store's data): the learned tables of the previous round lowered the 32-bit
# loads to 4 (Haswell) and 3 (Skylake). The defaults fit the pipeline's train
# split best (docs/model.md; bench/mechanism_on_tables.py --mechanism forwarded_load).
# DTLB misses: Intel's optimization manual (248966): a 64-entry first-level DTLB
# for 4 KiB pages backed by a second-level TLB; the cycles of a miss fit BHive's
# train jump-table chains, 8 (Haswell, Ivy Bridge) and 9 (Skylake) (docs/model.md).
# Physical aliases: on BHive's one physical page a 4K alias is the store's own bytes,
# read once the store has committed: the failed forward's penalty (docs/model.md).
# Harness offset: BHive's figures (its README, "Throughput Calculation") sit under
# the steady state by a constant, subtracted from it (cycles per 100 iterations):
# the train split's median, 1 (Haswell, Ivy Bridge) and 2 (Skylake) (docs/model.md).
# Memory ordering: a load run before an older store's address is known that reads
# its bytes is a machine clear (Intel's optimization manual, "memory disambiguation");
# BHive loads one value through every pointer, so stores and later loads often meet.
# The cycles: the better of 5 and 10 on the changed train blocks (docs/model.md).
PARAMETERS: dict[str, Parameter] = {
    "predecode_bytes": Parameter("front_end", 16, (1, 64), (8, 32), 4, 16.0),
    "predecode_width": Parameter("front_end", 5, (1, 16), (2, 16), 1, 5.0),
    "decoders": Parameter("front_end", 4, (1, 16), (1, 6), 1, 4.0),
    "simple_decoder_uops": Parameter("front_end", 1, (1, 16), (1, 4), 1, 1.0),
    "uop_queue_size": Parameter("front_end", 56, (1, 1024), (16, 128), None, 64.0, (("skylake", 64),), move=8),
    "issue_width": Parameter("front_end", 4, (1, 64), (2, 8), 1, 4.0),
    "lcp_penalty": Parameter("front_end", 3, (0, 100), (0, 8), 1, 3.0),
    "store_forward_latency": Parameter("memory", 0, (0, 100), (0, 8), 2, 4.0),
    "alias_4k_penalty": Parameter("memory", 5, (0, 100), (0, 12), 3, 5.0),
    "store_forward_fail_penalty": Parameter("memory", 10, (0, 100), (0, 20), 4, 10.0),
    "stack_sync_uops": Parameter("stack_engine", 1, (0, 16), (0, 3), 1, 1.0),
    "moves_eliminated": Parameter("move_elimination", 4, (1, 16), (1, 6), 1, 4.0),
    "zero_shift_penalty": Parameter("zero_shift", 23, (0, 1000), (0, 48), 6, 20.0),
    "lock_penalty": Parameter(
        "locked", 8, (0, 1000), (0, 40), 4, 10.0, (("sandybridge", 12), ("ivybridge", 12), ("skylake", 10))
    ),
    "bank_conflict_penalty": Parameter("bank_conflict", 1, (0, 8), (0, 3), 1, 1.0),
    "x87_assist_penalty": Parameter("x87_stack", 340, (0, 2000), (0, 640), None, 300.0, move=16),
    "page_walk_penalty": Parameter("page_walk", 7, (0, 200), (0, 16), 2, 7.0),
    "pointer_chase_saving": Parameter("pointer_chasing", 1, (0, 4), (0, 2), 1, 1.0),
    "slow_lea_latency": Parameter("slow_lea", 3, (1, 30), (1, 6), 1, 3.0),
    "forwarded_load_latency": Parameter("forwarded_load", 4, (1, 30), (2, 8), 1, 4.0, (("skylake", 3),)),
    "dtlb_miss_latency": Parameter("dtlb_miss", 8, (0, 100), (0, 16), 1, 8.0, (("skylake", 9),)),
    "physical_alias_penalty": Parameter("physical_alias", 10, (0, 100), (0, 20), 2, 10.0),
    "harness_offset_cycles": Parameter("harness_offset", 1, (0, 10), (0, 4), 1, 2.0, (("skylake", 2),)),
    "memory_ordering_penalty": Parameter("memory_ordering", 5, (0, 100), (0, 16), 2, 5.0),
}
MECHANISMS = (
    "front_end",
    "complex_decoder",
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
    "move_elimination",
    "zero_shift",
    "locked",
    "bank_conflict",
    "partial_register",
    "memory_ordering",
)
# The mechanisms another needs on: bank conflicts, page walks, forwarded loads, DTLB
# misses, physical aliases and memory ordering read the addresses the memory mechanism
# is given; a folded load's load is held in its load unit; the complex decoder is the front end's.
_ON_ADDRESSES = (
    "bank_conflict",
    "page_walk",
    "folded_load",
    "forwarded_load",
    "dtlb_miss",
    "physical_alias",
    "memory_ordering",
)
REQUIRES: dict[str, tuple[str, ...]] = {**dict.fromkeys(_ON_ADDRESSES, ("memory",)), "complex_decoder": ("front_end",)}
# What the mechanisms simulate, versioned: tables' and spaces' ids under the extended
# model name it, so results of an engine that simulated differently are never reused.
# Bump REVISION with a change all such tables feel (the memory unit, the stages), a
# mechanism's own number with a change to it alone (only the tables that turn it on
# are renamed); a new mechanism needs neither.
REVISION = 17
REVISIONS: dict[str, int] = {"memory_ordering": 2}


def revision(mechanisms) -> int | list:
    """REVISION, with the own numbers of ``mechanisms`` that have one."""
    own = {m: REVISIONS[m] for m in sorted(mechanisms) if m in REVISIONS}
    return [REVISION, own] if own else REVISION


def issue_width(generation: str) -> int:
    """Fused µops a core of ``generation`` renames a cycle (the front end's default): the
    issue bound of the evaluation's throughput floor, a fact no table moves."""
    return PARAMETERS["issue_width"].default_for(generation)


def parameters_of(mechanism: str) -> tuple[str, ...]:
    """The globals ``mechanism`` adds, in declaration order."""
    return tuple(n for n, p in PARAMETERS.items() if p.mechanism == mechanism)


def spec(mechanism: str) -> dict:
    """What the engine checks of a table that turns ``mechanism`` on."""
    return {
        "name": mechanism,
        "requires": list(REQUIRES.get(mechanism, ())),
        "parameters": [(n, *PARAMETERS[n].limits) for n in parameters_of(mechanism)],
    }
