"""The extended model: mechanisms llvm-mca does not model, each a learnable part
of the engine, off in the plain ``llvm-mca`` model. What each mechanism does and
its parameters are declared in ``mechanisms``; which a CPU has, and what
``extended`` turns on for it, in its generation (``generations``). This module
names models, parses them and chooses their defaults.
"""

from __future__ import annotations

from difftune_pipeline.engine import _engine, generations
from difftune_pipeline.engine.generations import COMMON as EXTENDED
from difftune_pipeline.engine.mechanisms import MECHANISMS, PARAMETERS, parameters_of

# Harness models (difftune_pipeline.harness); "none": addresses by symbolic
# equality of address expressions.
HARNESSES = ("none", "bhive", "nanobench")
PLAIN = "llvm-mca"


def supported(mcpu: str) -> bool:
    """Whether the extended model has rules for ``mcpu``."""
    return generations.of(mcpu) is not None


def for_cpu(mcpu: str) -> tuple[str, ...]:
    """What ``extended`` turns on for ``mcpu`` (() where it has no rules)."""
    generation = generations.of(mcpu)
    return generation.extended if generation else ()


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


def optional(mcpu: str) -> tuple[str, ...]:
    """The mechanisms ``mcpu``'s generation has that ``extended`` leaves out
    (``move_elimination``, ``locked``): ``auto`` adds each where it helps the train
    and val blocks it changes (``metrics.helps_where_it_changes``)."""
    generation = generations.of(mcpu)
    return tuple(m for m in generation.mechanisms if m not in generation.extended) if generation else ()


def label(mechanisms, harness: str, mcpu: str) -> str:
    """How a model reads in results: ``extended``, or ``extended+locked`` (its
    generation's ``extended`` and more), else its name (``name``)."""
    full = for_cpu(mcpu)
    if full and set(full) <= set(mechanisms):
        return "+".join(["extended", *(m for m in mechanisms if m not in full)])
    return name(mechanisms, harness)


def eliminable_moves(mcpu: str) -> frozenset[str]:
    """The move opcodes ``mcpu`` may rename away, so whose latency may be 0 (none
    on a CPU without move elimination or without the extended model's rules)."""
    generation = generations.of(mcpu)
    if generation is None or not generation.eliminates_moves:
        return frozenset()
    return frozenset(_engine.eliminable_moves())


def renamed_moves(block) -> list[bool]:
    """Which of ``block``'s instructions ``move_elimination`` renames away: a move of
    an eliminable opcode between two different registers (``move_elimination.cpp``)."""
    moves = _engine.eliminable_moves()
    return [
        opcode in moves and len(op["reads"]) == 1 and op["writes"] != op["reads"]
        for opcode, op in zip(block.opcodes, block.operands)
    ]


def harness_for(mcpu: str) -> str:
    """The harness model of the tool that measured ``mcpu``'s data: nanoBench's
    for Zen+ (AnICA's set), BHive's for the Intel CPUs."""
    generation = generations.of(mcpu)
    return generation.harness if generation else "bhive"


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
    return tuple(p for m in MECHANISMS if m in mechanisms for p in parameters_of(m))


def defaults(mcpu: str, mechanisms) -> dict[str, int]:
    """Default values of the mechanisms' globals for ``mcpu`` (and the dispatch
    width, which counts unfused µops once the front end models fusion)."""
    generation = generations.of(mcpu)
    if generation is None:
        raise ValueError(f"the extended model has no rules for {mcpu!r} (generations: {generations.covered()})")
    foreign = [m for m in mechanisms if m not in generation.mechanisms]
    if foreign:
        raise ValueError(
            f"{foreign[0]} is not a mechanism of {mcpu} ({generation.name}): one of {', '.join(generation.mechanisms)}"
        )
    out = {p: PARAMETERS[p].default_for(generation.name) for p in parameters(mechanisms)}
    if "front_end" in mechanisms:
        out["dispatch_width"] = generation.dispatch_width
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


def named(model: str) -> tuple[str, ...]:
    """The mechanisms a model ``name`` gave names (none for llvm-mca)."""
    return tuple(model.split("@")[0].split("+")[1:])
