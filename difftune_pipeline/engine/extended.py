"""The extended model: mechanisms llvm-mca does not model, each a learnable part
of the engine, off in the plain ``llvm-mca`` model.

- ``front_end``: a predecoder of aligned blocks and a number of instructions a
  cycle, decoders (one complex; before Skylake not the last for a fusible instruction), the µop
  queue and the issue width, macro-fusion (cmp/test+jcc) and micro-fusion, and
  the predecoder's stall on a length-changing prefix (66h with a 16-bit immediate).
- ``memory``: a load waits for the youngest older store to its bytes (plus a
  store-to-load forwarding latency) or for one whose address it 4K-aliases (a penalty),
  at the addresses a harness model gives (see ``difftune_pipeline.harness``).
- ``stack_engine``: push and pop leave no dependency chain through RSP, and
  push/pop/call/ret no µop to update it; an explicit use of RSP after them costs
  a sync µop, which also sits in the RSP chain (one cycle each).
- ``move_elimination``: register-to-register moves are renamed away (no µop,
  no latency), a limited number a cycle.
- ``locked`` (Intel): a locked instruction (a lock prefix, or xchg with memory)
  issues once every older instruction has retired, and a number of cycles later.
- ``zero_shift`` (AMD Zen+): an instruction that reads the flags a zero-count
  shift or rotate left waits, once every older instruction has retired, for an
  assist of a number of cycles.
- ``partial_register`` (Intel): an instruction that writes the low 8 or 16 bits
  of a general-purpose register without reading them (``movb $1, %al``,
  ``sete %al``; not a load, not a zero idiom) waits for the full register, as it
  merges into it.
- ``bank_conflict`` (Sandy and Ivy Bridge): two loads that read one bank of the
  L1 data cache (address bits 2-5) in different sets do not issue in one cycle:
  the younger waits a number of cycles after the older issues (with ``memory``,
  at the addresses a harness model gives).

Which mechanisms a CPU has follows its generation: Intel's (Sandy Bridge to
Skylake) all but ``zero_shift``, ``bank_conflict`` only Sandy and Ivy Bridge's;
AMD Zen+ the memory dependencies, the stack engine and ``zero_shift`` (its front
end is not Intel's, and is not modelled).

A mechanism's parameters are globals of the table; the defaults below are per
CPU generation, each with its public source.
"""

from __future__ import annotations

from dataclasses import dataclass

from difftune_pipeline.engine import _engine


@dataclass(frozen=True)
class Global:
    """One global of a mechanism: its default (``by_family`` overrides it per
    CPU generation), how the sampling presets draw it (DiffTune's uniform preset
    from ``sample``; the perturbing one by up to ``step``, or times 0.5..1.5
    when ``step`` is None) and the scale the LSTM surrogate divides it by."""

    mechanism: str
    default: int
    sample: tuple[int, int]
    step: int | None
    scale: float
    by_family: tuple[tuple[str, int], ...] = ()


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
# instructions taking 6 predecode cycles. Skylake marks 6 a cycle here: on blocks
# 1000-3999 of BHive's Skylake file, LLVM's values under the extended model score
# 10.19% MAPE with 6 and 10.78% with 5 (Haswell: 7.80% with 5 and 8.02% with 6).
# Memory: a load fed by a store gets its data about as late as its own load
# latency (Agner Fog, "The microarchitecture of Intel, AMD and VIA CPUs",
# "store forwarding": ~5 cycles on these cores), so no extra cycles by default;
# a failed forward costs about 10-12 cycles more (same guide); a 4K-aliasing
# load is reissued about 5 cycles later (the Optimization Manual, "4K aliasing").
# Stack engine: one sync µop, an ALU operation of one cycle (Agner Fog, same
# guide, "stack engine").
# Move elimination (Ivy Bridge on; the manual's "eliminating register moves"
# gives no rate): at most the rename width a cycle, to be learned.
# Zen+ (the nanoBench measurements of AnICA's artifact; Ritter and Hack, "AnICA",
# OOPSLA 2022): a flags read after a zero-count shift costs the block about 26
# cycles an iteration (`shll $0, %r8d ; cmovgel %edx, %ecx`: 25.96; the shift
# alone: 1.0). With the pipeline draining first, an
# assist of 23 cycles gives that block 26. Zen+'s memory and stack-engine values
# have no public figure of their own here: they start from the Intel values above
# and are learned like every other.
# Locked instructions drain the store buffer and run alone (Intel's optimization
# manual, "locked instructions"); BHive measures a lone `lock addl $1, (%rsi)` at
# 19.0 cycles an iteration on Haswell. The cycles after the drain are those that
# fit BHive's blocks with a locked instruction best under the other mechanisms'
# defaults (the median of predicted over measured closest to 1): Haswell 8 (23
# blocks of its 10,000), Ivy Bridge 12 (9), Skylake 10 (5).
# L1 bank conflicts (Sandy and Ivy Bridge): Intel's optimization manual (248966),
# "L1D cache bank conflicts": two loads with the same address bits 2-5 in
# different sets (bits 6-12) conflict, and the younger is delayed until the
# conflict resolves, one cycle (Haswell removed them). BHive measures
# `movq 8(%rax), %r12 ; cmpq %rcx, 8(%rsp)` at 2.0 cycles an iteration on Ivy
# Bridge (its loads 0x2324008 and 0x2324808) and 1.0 on Haswell; over 3,000 of
# BHive's Ivy Bridge blocks, those with such a pair are predicted 7.3% too fast
# on average without the mechanism, and those with two loads and none 1.5%.
GLOBALS: dict[str, Global] = {
    "predecode_bytes": Global("front_end", 16, (8, 32), 4, 16.0),
    "predecode_width": Global("front_end", 5, (2, 16), 1, 5.0, (("skylake", 6),)),
    "decoders": Global("front_end", 4, (1, 6), 1, 4.0),
    "simple_decoder_uops": Global("front_end", 1, (1, 4), 1, 1.0),
    "uop_queue_size": Global("front_end", 56, (16, 128), None, 64.0, (("skylake", 64),)),
    "issue_width": Global("front_end", 4, (2, 8), 1, 4.0),
    "lcp_penalty": Global("front_end", 3, (0, 8), 1, 3.0),
    "store_forward_latency": Global("memory", 0, (0, 8), 2, 4.0),
    "alias_4k_penalty": Global("memory", 5, (0, 12), 3, 5.0),
    "store_forward_fail_penalty": Global("memory", 10, (0, 20), 4, 10.0),
    "stack_sync_uops": Global("stack_engine", 1, (0, 3), 1, 1.0),
    "moves_eliminated": Global("move_elimination", 4, (1, 6), 1, 4.0),
    "zero_shift_penalty": Global("zero_shift", 23, (0, 48), 6, 20.0),
    "lock_penalty": Global("locked", 8, (0, 40), 4, 10.0, (("sandybridge", 12), ("skylake", 10))),
    "bank_conflict_penalty": Global("bank_conflict", 1, (0, 3), 1, 1.0),
}
MECHANISMS = (
    "front_end",
    "memory",
    "stack_engine",
    "move_elimination",
    "zero_shift",
    "locked",
    "bank_conflict",
    "partial_register",
)
# What the mechanisms simulate, versioned: a table's id and a parameter space's id
# under the extended model name it, so that results stored by an engine whose
# mechanisms simulated differently are never taken for this one's. Bump it with
# any change to what a mechanism simulates.
REVISION = 6
PARAMETERS: dict[str, tuple[str, ...]] = {
    m: tuple(n for n, g in GLOBALS.items() if g.mechanism == m) for m in MECHANISMS
}
# What ``extended`` turns on (Intel). ``locked`` is left out: with it the default
# table's val MAPE on the sample fell (10.51% -> 10.31%), but the tuners then
# found nothing better on val (learned = default, test 7.64%; without it 6.84%):
# one pair of runs, which the gradient tuner's trajectory decided (docs/results.md).
# Move elimination is left out too: measured on the ``full`` Haswell test split,
# the pipeline's extended table scored 12.07% MAPE with it and 10.32% without,
# and adding it to llvm-mca's learned table took 12.57% to 13.03% (Ivy Bridge
# and Skylake: worse too). See docs/results.md.
EXTENDED = ("front_end", "memory", "stack_engine")
# Harness models (difftune_pipeline.harness); "none": addresses by symbolic
# equality of address expressions.
HARNESSES = ("none", "bhive", "nanobench")
PLAIN = "llvm-mca"

_FAMILY = {
    **dict.fromkeys(("sandybridge", "ivybridge", "corei7-avx", "core-avx-i"), "sandybridge"),
    **dict.fromkeys(("haswell", "core-avx2", "broadwell"), "haswell"),
    **dict.fromkeys(("skylake", "skylake-avx512", "cascadelake"), "skylake"),
    "znver1": "zen",
}
# What ``extended`` turns on where it is not Intel's common set (Sandy and Ivy
# Bridge add their L1 bank conflicts; Intel's generations the partial-register
# merge, which ``auto`` keeps only where val gains), and the mechanisms each
# generation has. The merge: BHive measures `movb $1, %r15b` at 0.99 cycles an
# iteration on Haswell (llvm-mca: 0.5) and `cmpq %rsi, %r14 ; sete %al` at 0.98
# on Ivy Bridge (0.75); of the 30 Haswell and 34 Ivy Bridge blocks of BHive's
# files whose prediction it changes, it brings 23 and 20 closer, 6 and 9 further.
_ZEN_EXTENDED = ("memory", "stack_engine", "zero_shift")
_EXTENDED_OF = {
    "zen": _ZEN_EXTENDED,
    "sandybridge": (*EXTENDED, "bank_conflict", "partial_register"),
    "haswell": (*EXTENDED, "partial_register"),
    "skylake": (*EXTENDED, "partial_register"),
}
_INTEL = ("front_end", "memory", "stack_engine", "move_elimination", "locked", "partial_register")
_OWN_MECHANISMS = {
    "sandybridge": (*_INTEL, "bank_conflict"),
    "haswell": _INTEL,
    "skylake": _INTEL,
    "zen": _ZEN_EXTENDED,
}
# CPUs that rename register-to-register moves away: Intel's from Ivy Bridge on
# (Intel's optimization manual, "eliminating register moves") and AMD Zen (Agner
# Fog's microarchitecture guide, Zen's "register move elimination"); not Sandy Bridge.
_KEEPS_MOVES = ("sandybridge", "corei7-avx")
# The tool each µarch's measurements come from, hence its harness model.
_HARNESS = {"zen": "nanobench"}
# With fusion modelled by the front end, dispatch counts unfused µops, at most
# one per execution port: 6 ports (Sandy and Ivy Bridge), 8 (Haswell on).
_DISPATCH_WIDTH = {"sandybridge": 6, "haswell": 8, "skylake": 8}


def supported(mcpu: str) -> bool:
    """Whether the extended model has rules for ``mcpu``."""
    return mcpu in _FAMILY


def for_cpu(mcpu: str) -> tuple[str, ...]:
    """What ``extended`` turns on for ``mcpu`` (() where it has no rules)."""
    if not supported(mcpu):
        return ()
    return _EXTENDED_OF.get(_FAMILY[mcpu], EXTENDED)


def candidates(mcpu: str) -> dict[tuple[str, ...], str]:
    """The models ``auto`` chooses among on val, simplest first (a tie goes to
    the first), with their names: llvm-mca, ``extended`` without each mechanism
    its generation adds to Intel's common set (Ivy Bridge's bank conflicts,
    Zen+'s zero-count shift), and ``extended``."""
    full = for_cpu(mcpu)
    out = {(): PLAIN}
    for m in full:
        if m not in EXTENDED:
            out[tuple(x for x in full if x != m)] = f"extended without {m}"
    out[full] = "extended"
    return out


def eliminable_moves(mcpu: str) -> frozenset[str]:
    """The move opcodes ``mcpu`` may rename away, so whose latency may be 0 (none
    on a CPU without move elimination or without the extended model's rules)."""
    if not supported(mcpu) or mcpu in _KEEPS_MOVES:
        return frozenset()
    return frozenset(_engine.eliminable_moves())


def harness_for(mcpu: str) -> str:
    """The harness model of the tool that measured ``mcpu``'s data: nanoBench's
    for Zen+ (AnICA's set), BHive's for the Intel CPUs."""
    return _HARNESS.get(_FAMILY.get(mcpu, ""), "bhive")


def check(mechanisms, harness: str) -> tuple[str, ...]:
    """The mechanisms in canonical order; unknown names refused."""
    unknown = set(mechanisms) - set(MECHANISMS)
    if unknown:
        raise ValueError(f"unknown mechanism {sorted(unknown)[0]!r}: one of {', '.join(MECHANISMS)}")
    if harness not in HARNESSES:
        raise ValueError(f"unknown harness {harness!r}: one of {', '.join(HARNESSES)}")
    return tuple(m for m in MECHANISMS if m in set(mechanisms))


def parameters(mechanisms) -> tuple[str, ...]:
    """The globals the mechanisms add, in canonical order."""
    return tuple(p for m in MECHANISMS if m in mechanisms for p in PARAMETERS[m])


def defaults(mcpu: str, mechanisms) -> dict[str, int]:
    """Default values of the mechanisms' globals for ``mcpu`` (and the dispatch
    width, which counts unfused µops once the front end models fusion)."""
    if not supported(mcpu):
        raise ValueError(f"the extended model has no rules for {mcpu!r} (Intel Sandy Bridge to Skylake, AMD Zen+)")
    family = _FAMILY[mcpu]
    foreign = [m for m in mechanisms if m not in _OWN_MECHANISMS[family]]
    if foreign:
        raise ValueError(f"{foreign[0]} is not a mechanism of {mcpu}: one of {', '.join(_OWN_MECHANISMS[family])}")
    out = {p: dict(GLOBALS[p].by_family).get(family, GLOBALS[p].default) for p in parameters(mechanisms)}
    if "front_end" in mechanisms:
        out["dispatch_width"] = _DISPATCH_WIDTH[family]
    return out


# The stack engine updates RSP for push, pop, call and ret without a µop (Agner
# Fog, same guide, "stack engine"; uops.info: POP r64 is one load µop on Haswell
# and Skylake). LLVM's Haswell and Skylake models charge that update as one more
# µop on the ALU ports, so turning the mechanism on takes it out of these rows.
STACK_OPS = (
    *("PUSH16r", "PUSH64r", "PUSH16i8", "PUSH64i8", "PUSH64i32", "POP16r", "POP64r"),
    *("CALL64r", "CALL64m", "CALL64pcrel32", "RET64"),
)
_ALU = ("Port0156", "Port015")  # the resource LLVM charges the update to, by its name's end


def without_stack_update(row: dict) -> dict:
    """A stack operation's row without the µop that updated RSP: one µop and one
    ALU cycle fewer, where LLVM's row has them (Ivy Bridge's pop has not)."""
    alu = [r for r, c in row["ports"].items() if r.endswith(_ALU) and c > 0]
    if not alu or row["uops"] < 2:
        return row
    return {**row, "uops": row["uops"] - 1, "ports": {**row["ports"], alu[0]: row["ports"][alu[0]] - 1}}


def parse(model: str, mcpu: str | None = None) -> tuple[str, ...] | None:
    """The mechanisms a model name turns on: ``llvm-mca``, ``llvm-mca+front_end+…``,
    ``extended`` (``for_cpu(mcpu)``; Intel's set without a CPU), ``extended+move_elimination``;
    ``auto`` (None): llvm-mca or extended, whichever wins on val."""
    if model == "auto":
        return None
    head, *mechanisms = model.split("+")
    if head not in (PLAIN, "extended"):
        raise ValueError(f"unknown model {model!r}: auto, llvm-mca, extended or llvm-mca+<mechanism>+…")
    base = (for_cpu(mcpu) if mcpu else EXTENDED) if head == "extended" else ()
    return check([*base, *mechanisms], "none")


def name(mechanisms, harness: str) -> str:
    """``llvm-mca``, or ``llvm-mca+front_end+memory…`` with ``@harness`` when memory uses one."""
    if not mechanisms:
        return PLAIN
    return "+".join([PLAIN, *mechanisms]) + (f"@{harness}" if "memory" in mechanisms and harness != "none" else "")
