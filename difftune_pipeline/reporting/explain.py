"""Why a block costs what it costs under a table, and what another table changes.

An explanation is plain data (JSON as it is): for each table, the total cycles,
the bottleneck, llvm-mca's timeline and resource-pressure views, the cycles each
instruction waited by cause, and back-end pressure; with a second table, the rows
of the block's opcodes that differ and how much each moved the total (that one
change undone, the block simulated again). The terminal, the report and the
asset metadata all render this one structure.
"""

from __future__ import annotations

import polars as pl

from difftune_pipeline import harness
from difftune_pipeline.engine import DEFAULT_ITERATIONS, DEFAULT_SHOWN, Engine, ParamTable, Trace
from difftune_pipeline.engine.table import GLOBAL_ROW, diff
from difftune_pipeline.engine.trace import TimelineEntry, last_cycle
from difftune_pipeline.model.features import block_features
from difftune_pipeline.reporting.compare import errors

# Colours of the wait causes, in the terminal and in the figures; any dispatch
# stall (before the instruction entered the back end) is drawn in STALL_COLOUR.
WAIT_COLOURS = {"register": "#e6ab02", "memory": "#b83dba", "resource": "#d62728"}
STALL_COLOUR = "#1f77b4"

# The timeline's characters, as llvm-mca prints them.
DISPATCHED, WAITING, EXECUTING, EXECUTED, RETIRE_LAG, RETIRED = "D", "=", "e", "E", "-", "R"
LABEL_WIDTH = 10  # llvm-mca pads "[iteration,index]" to this column
MAX_INSTRUCTIONS = 1000  # the bottleneck's dependency chains grow with the square of the block
MAX_TIMELINE_ROWS = 5000  # instructions × iterations shown: a timeline beyond that is unreadable


def timeline_cells(timeline: list[TimelineEntry]) -> list[tuple[str, list[tuple[str, str | None]]]]:
    """Each recorded instruction as llvm-mca's timeline row: its label and one
    (character, wait cause or None) per column, by llvm-mca's rules (zero-latency
    instructions show only 'D'; a row is padded to the last cycle of the view)."""
    last = last_cycle(timeline)
    rows = []
    for e in timeline:
        waits = e.cause_by_cycle()
        cells: list[tuple[str, str | None]] = [("." if c % 5 == 0 else " ", waits.get(c)) for c in range(e.dispatched)]
        cells.append((DISPATCHED, None))
        if e.dispatched != e.executed:
            cells += [(WAITING, waits.get(c)) for c in range(e.dispatched + 1, e.issued)]
            if e.issued == e.executed:
                cells.append((EXECUTED, None))
            else:
                if e.dispatched != e.issued:
                    cells.append((EXECUTING, None))
                cells += [(EXECUTING, None)] * max(0, e.executed - e.issued - 1)
                cells.append((EXECUTED, None))
        cells += [(RETIRE_LAG, None)] * max(0, e.retired - e.executed - 1)
        if e.executed < e.retired:
            cells.append((RETIRED, None))
        cells += [("." if c % 5 == 0 or c == last else " ", None) for c in range(e.retired + 1, last + 1)]
        rows.append((f"[{e.iteration},{e.index}]", cells))
    return rows


def timeline_header(last_cycle: int) -> list[str]:
    """llvm-mca's column header over a timeline ``last_cycle`` + 1 columns wide."""
    tens = "".join(" " if (c // 10) % 2 == 0 else str(c % 10) for c in range(last_cycle + 1))
    ones = "".join(str(c % 10) if (c // 10) % 2 == 0 else " " for c in range(last_cycle + 1))
    head = ["Index".ljust(LABEL_WIDTH) + ones]
    return ([" " * LABEL_WIDTH + tens] if last_cycle >= 10 else []) + head


def timeline_entries(view: dict) -> list[TimelineEntry]:
    """A view's timeline (as JSON) back as entries."""
    return [TimelineEntry(**{**e, "waits": tuple(tuple(w) for w in e["waits"])}) for e in view["timeline"]]


def bottleneck(engine: Engine, block, table: ParamTable, trace: Trace) -> dict:
    """The bound that limits the block (the ``bottleneck:*`` slices of the
    evaluation: ports, dispatch or a loop-carried chain, in cycles per iteration),
    the busiest unit, and llvm-mca's back-end pressure percentages."""
    f = block_features(block, table, engine.resources())
    per_iteration = trace.pressure[-1] if trace.pressure.size else []
    busiest = max(zip(trace.units, per_iteration), key=lambda kv: kv[1], default=(None, 0.0))
    cycles = trace.cycles or 0
    return {
        "kind": f["bottleneck"],
        "bounds_per_iteration": {
            "port_pressure": f["port_pressure_cycles"],
            "dispatch": f["dispatch_cycles"],
            "loop_carried_latency": f["loop_carried_cycles"],
        },
        "simulated_per_iteration": cycles / trace.iterations,
        "busiest_unit": busiest[0],
        "busiest_unit_cycles_per_iteration": float(busiest[1]),
        "backend_pressure_pct": {k: 100 * v / cycles if cycles else 0.0 for k, v in trace.pressure_cycles.items()},
        # llvm-mca's rule: back-end pressure limited throughput only if dispatch ever stalled.
        "dispatch_stalls": trace.dispatch_stalls,
    }


def view(engine: Engine, block, table: ParamTable, label: str, iterations: int, shown: int) -> dict:
    """One table's explanation of one block."""
    trace = engine.trace(block, table, iterations=iterations, shown=shown)
    out = {
        "label": label,
        "cycles": trace.cycles,
        "steady_cycles_per_100": trace.steady,
        "status": trace.status,
        "iterations": iterations,
    }
    if trace.cycles is None:
        return out
    return {
        **out,
        "bottleneck": bottleneck(engine, block, table, trace),
        "wait_cycles": trace.wait_cycles(),
        "timeline": [
            {
                "iteration": e.iteration,
                "index": e.index,
                "dispatched": e.dispatched,
                "ready": e.ready,
                "issued": e.issued,
                "executed": e.executed,
                "retired": e.retired,
                "waits": [list(w) for w in e.waits],
            }
            for e in trace.timeline
        ],
        "units": trace.units,
        "pressure_per_iteration": dict(zip(trace.units, trace.pressure[-1].tolist())),
        "pressure_by_instruction": trace.pressure[:-1].tolist(),
    }


def _complete(table: ParamTable, base: ParamTable) -> ParamTable:
    """``table`` with the rows it leaves to LLVM spelled out from ``base`` (the CPU's
    table with the block's variant resolutions): what the engine simulates."""
    return ParamTable(
        table.mcpu,
        table.llvm_version,
        dict(table.globals),
        {**base.rows, **table.rows},
        table.mechanisms,
        table.harness,
    )


def _with(table: ParamTable, other: ParamTable, key: str) -> ParamTable:
    """``table`` with one row (or global) taken from ``other`` (rows are shared, not copied)."""
    globals_, rows = dict(table.globals), dict(table.rows)
    if key in table.global_names():
        globals_[key] = other.globals[key]
    else:
        rows[key] = other.rows[key]
    return ParamTable(table.mcpu, table.llvm_version, globals_, rows, table.mechanisms, table.harness)


def changes(engine: Engine, block, table: ParamTable, against: ParamTable, cycles: int, iterations: int) -> list[dict]:
    """The rows of the block's opcodes (and the globals) where ``table`` differs from
    ``against`` (both complete: see ``_complete``), each with the total cycles once
    that change alone is undone."""
    keys = [g for g in table.global_names() if g in against.globals and table.globals[g] != against.globals[g]]
    keys += sorted({k for k in block.row_keys if table.rows.get(k) != against.rows.get(k)})
    if not keys:
        return []
    undone = [_with(table, against, k) for k in keys]
    result = engine.simulate_pairs([block], undone, [0] * len(keys), list(range(len(keys))), iterations=iterations)
    values = diff(against, table)
    out = []
    for k, c, st in zip(keys, result.cycles.tolist(), result.status):
        rows = values.filter(values["opcode"] == (GLOBAL_ROW if k in table.globals else k))
        if k in table.globals:
            rows = rows.filter(rows["param"] == k)
        out.append(
            {
                "row": k,
                "values": rows.select("param", "idx", "base", "value").to_dicts(),
                "cycles_without": int(c) if st == "ok" else None,
                "effect": cycles - int(c) if st == "ok" else None,
                "status": st,
            }
        )
    return sorted(out, key=lambda r: (r["effect"] is None, -abs(r["effect"] or 0)))  # failed ones last


def explain(
    engine: Engine,
    block,
    table: ParamTable | None = None,
    *,
    label: str = "table",
    against: ParamTable | None = None,
    against_label: str = "against",
    iterations: int = DEFAULT_ITERATIONS,
    shown: int = DEFAULT_SHOWN,
    base: ParamTable | None = None,
) -> dict:
    """Why ``block`` costs what it costs under ``table`` (LLVM's when None), and,
    with ``against``, the same under it and what the differences contribute.
    ``base``: LLVM's table with the block's variant rows, when the caller has it
    (building one reads every opcode of the CPU)."""
    if not block.ok:
        raise ValueError(f"cannot explain the block: {block.error}")
    if len(block) > MAX_INSTRUCTIONS:
        raise ValueError(f"cannot explain a block of {len(block)} instructions: at most {MAX_INSTRUCTIONS}")
    if shown * len(block) > MAX_TIMELINE_ROWS:
        raise ValueError(
            f"{shown} iterations of {len(block)} instructions is more than {MAX_TIMELINE_ROWS} timeline rows:"
            " show fewer iterations"
        )
    memory = [t for t in (table, against) if t is not None and "memory" in t.mechanisms]
    if memory and not block.accesses:  # the memory mechanism reads where loads and stores land
        block = harness.accesses(block, memory[0].harness).attach(block)
    base = base or engine.default_table([block])
    table = _complete(table, base) if table is not None else base
    against = _complete(against, base) if against is not None else None
    out = {
        "mcpu": engine.mcpu,
        "llvm_version": engine.llvm_version,
        "iterations": iterations,
        "asm": list(block.asm),
        "row_keys": list(block.row_keys),
        "views": [view(engine, block, table, label, iterations, shown)],
    }
    if against is not None:
        out["views"].append(view(engine, block, against, against_label, iterations, shown))
        cycles = out["views"][0]["cycles"]  # None: the table's own simulation failed, nothing to undo
        out["changes"] = changes(engine, block, table, against, cycles, iterations) if cycles is not None else None
    return out


def change_text(change: dict) -> str:
    """A changed row's values, e.g. ``latency[0] 6→0, uops[0] 2→1``."""
    return ", ".join(f"{p['param']}[{p['idx']}] {p['base']}→{p['value']}" for p in change["values"])


def notable(frame: pl.DataFrame) -> list[tuple[str, str]]:
    """(case, block_id): the block the learned table improved most, the one it
    made worse most (if any got worse) and the worst that remains. ``frame`` has
    block_id, measured, default and learned (cycles per 100 iterations)."""
    scored = errors(frame, "default", "learned")
    if scored.is_empty():
        return []
    gain = scored.with_columns((pl.col("base_error") - pl.col("new_error")).alias("gain")).sort("block_id")
    out = [("improved most", gain.sort("gain", descending=True, maintain_order=True)["block_id"][0])]
    worst = gain.sort("gain", maintain_order=True).row(0, named=True)
    if worst["gain"] < 0:
        out.append(("worsened most", worst["block_id"]))
    rest = gain.filter(~pl.col("block_id").is_in([b for _, b in out]))
    if rest.height:
        out.append(("worst remaining", rest.sort("new_error", descending=True, maintain_order=True)["block_id"][0]))
    return out
