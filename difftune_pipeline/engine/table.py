"""Parameter tables: DiffTune's per-opcode parameters as data (JSON, polars).

A table holds the two globals (dispatch width, reorder buffer), the model it
is simulated under (the extended model's mechanisms, each adding globals of its
own, and the harness model that gives memory addresses) and one row per opcode:
write latencies, µops, ReadAdvance entries and the port map as explicit
cycles per named processor resource. Variant opcodes (whose scheduling class
LLVM picks per instruction, e.g. zero idioms) have one row per resolution, keyed
``OPCODE#CLASS``. Rows absent from a table keep LLVM's values.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from difftune_pipeline.engine import extended, mechanisms
from difftune_pipeline.engine.table_document import FORMAT, GLOBALS, Document, Model, validated

GLOBAL_ROW = "*"  # the opcode column's value for globals in the long form


@dataclass
class ParamTable:
    mcpu: str
    llvm_version: str
    globals: dict[str, int]
    rows: dict[str, dict] = field(default_factory=dict)
    mechanisms: tuple[str, ...] = ()  # of the extended model; () is llvm-mca's own
    harness: str = "none"  # where the memory mechanism's addresses come from

    def __post_init__(self):
        self.mechanisms = extended.check(self.mechanisms, self.harness)

    @property
    def model(self) -> str:
        return extended.name(self.mechanisms, self.harness)

    def global_names(self) -> tuple[str, ...]:
        return GLOBALS + extended.parameters(self.mechanisms)

    def model_mismatch(self) -> str | None:
        """Why the globals do not fit the model (the first one missing or extra), or None."""
        expected = set(self.global_names())
        if set(self.globals) == expected:
            return None
        name = sorted(expected ^ set(self.globals))[0]
        why = "required by the model's mechanisms" if name in expected else "belongs to a mechanism that is off"
        return f"globals.{name}: {why} ({self.model})"

    def with_model(self, mechanisms, harness: str = "none", llvm: ParamTable | None = None) -> ParamTable:
        """This table under other mechanisms: a mechanism turned on starts from
        its defaults for the CPU (the front end also resets the dispatch width;
        the stack engine takes the RSP update out of push/pop/call/ret). One
        turned off drops its globals and, given LLVM's table ``llvm``, gives
        back what it changed there (the dispatch width, the stack rows)."""
        mechanisms = extended.check(mechanisms, harness)
        added = [m for m in mechanisms if m not in self.mechanisms]
        removed = [m for m in self.mechanisms if m not in mechanisms]
        out = self.copy()
        out.mechanisms, out.harness = mechanisms, harness
        out.globals.update(extended.defaults(self.mcpu, added) if added else {})
        out.globals = {g: out.globals[g] for g in out.global_names()}
        stack_rows = [k for k in extended.STACK_OPS if k in out.rows]
        if "stack_engine" in added:
            out.rows.update({k: extended.without_stack_update(out.rows[k]) for k in stack_rows})
        if llvm is not None and "stack_engine" in removed:
            out.rows.update(_copy({k: llvm.rows[k] for k in stack_rows if k in llvm.rows}))
        if llvm is not None and "front_end" in removed:  # dispatch counts LLVM's way again
            out.globals["dispatch_width"] = llvm.globals["dispatch_width"]
        return out

    # ---- JSON -------------------------------------------------------------
    def to_dict(self) -> dict:
        doc = {
            "format": FORMAT,
            "mcpu": self.mcpu,
            "llvm_version": self.llvm_version,
            "globals": dict(self.globals),
            "opcodes": {k: canonical_row(r) for k, r in sorted(self.rows.items())},
        }
        if self.mechanisms:  # llvm-mca's tables keep the document (and fingerprint) they always had
            doc["model"] = {"mechanisms": list(self.mechanisms), "harness": self.harness}
        return doc

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=1, sort_keys=True)
        if path is not None:
            Path(path).write_text(text)
        return text

    @classmethod
    def from_json(cls, path: str | Path) -> ParamTable:
        """A table from a JSON file, validated against the document schema first:
        a bad field is refused with its path, never coerced."""
        source = f"parameter file {path}"
        try:
            text = Path(path).read_text(encoding="utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{source}: not UTF-8 text ({exc.reason})") from None
        return cls._from_document(validated(text, source))

    @classmethod
    def _from_document(cls, doc: Document) -> ParamTable:
        rows = {key: canonical_row(row.model_dump()) for key, row in doc.opcodes.items()}
        model = doc.model or Model(mechanisms=[], harness="none")
        globals_ = doc.globals.model_dump(exclude_none=True)
        table = cls(doc.mcpu, doc.llvm_version, globals_, rows, tuple(model.mechanisms), model.harness)
        if problem := table.model_mismatch():
            raise ValueError(problem)
        return table

    # ---- long form (SQL-friendly) -----------------------------------------
    def to_frame(self) -> pl.DataFrame:
        """One row per value: (opcode, param, idx, value); globals under opcode '*',
        with the model as ``mechanism:<name>`` and ``harness:<name>`` rows of value 1."""
        out: list[tuple[str, str, int, int]] = [(GLOBAL_ROW, g, 0, int(self.globals[g])) for g in self.global_names()]
        out += [(GLOBAL_ROW, f"mechanism:{m}", 0, 1) for m in self.mechanisms]
        if self.mechanisms:
            out.append((GLOBAL_ROW, f"harness:{self.harness}", 0, 1))
        for key, row in sorted(self.rows.items()):
            out += [(key, "latency", i, v) for i, v in enumerate(row["latency"])]
            out.append((key, "uops", 0, row["uops"]))
            for use, write, cycles in row["read_advance"]:
                out.append((key, "read_advance" if write == 0 else f"read_advance@{write}", use, cycles))
            out += [(key, f"port:{res}", 0, cy) for res, cy in row["ports"].items()]
        return pl.DataFrame(
            out, schema={"opcode": pl.Utf8, "param": pl.Utf8, "idx": pl.Int32, "value": pl.Int64}, orient="row"
        )

    @classmethod
    def from_frame(cls, frame: pl.DataFrame, mcpu: str, llvm_version: str) -> ParamTable:
        globals_: dict[str, int] = {}
        rows: dict[str, dict] = {}
        mechanisms, harness = [], "none"
        for opcode, param, idx, value in frame.sort(["opcode", "param", "idx"]).iter_rows():
            if opcode == GLOBAL_ROW:
                if param.startswith("mechanism:"):
                    mechanisms.append(param.split(":", 1)[1])
                elif param.startswith("harness:"):
                    harness = param.split(":", 1)[1]
                else:
                    globals_[param] = int(value)
                continue
            row = rows.setdefault(opcode, {"latency": [], "uops": 0, "read_advance": [], "ports": {}})
            if param == "latency":
                row["latency"].append(int(value))
            elif param == "uops":
                row["uops"] = int(value)
            elif param.startswith("read_advance"):
                write = int(param.split("@")[1]) if "@" in param else 0
                row["read_advance"].append([int(idx), write, int(value)])
            elif param.startswith("port:"):
                row["ports"][param[5:]] = int(value)
            else:
                raise ValueError(f"opcode {opcode!r}: unknown parameter {param!r}")
        return cls(
            mcpu, llvm_version, globals_, {k: canonical_row(r) for k, r in rows.items()}, tuple(mechanisms), harness
        )

    # ---- comparisons ------------------------------------------------------
    def fingerprint(self) -> str:
        doc = self.to_dict() | ({"revision": mechanisms.revision(self.mechanisms)} if self.mechanisms else {})
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]

    def changed_rows(self, base: ParamTable) -> dict[str, dict]:
        """Rows of this table that differ from (or are absent in) ``base``."""
        return {k: r for k, r in self.rows.items() if base.rows.get(k) != r}

    def copy(self) -> ParamTable:
        """A deep copy, row by row (``copy.deepcopy`` took seconds on a whole table)."""
        return ParamTable(
            self.mcpu, self.llvm_version, dict(self.globals), _copy(self.rows), self.mechanisms, self.harness
        )


def diff(base: ParamTable, table: ParamTable) -> pl.DataFrame:
    """(opcode, param, idx, base, value, delta) for every value of ``table`` that
    differs from ``base``. Rows absent from ``table`` keep LLVM's values and are
    not compared; an absent port or ReadAdvance entry counts as 0 cycles."""
    mine = table.to_frame()
    keys = [GLOBAL_ROW, *table.rows]
    theirs = base.to_frame().filter(pl.col("opcode").is_in(keys)).rename({"value": "base"})
    return (
        theirs.join(mine, on=["opcode", "param", "idx"], how="full", coalesce=True)
        .with_columns(pl.col("base").fill_null(0), pl.col("value").fill_null(0))
        .filter(pl.col("base") != pl.col("value"))
        .with_columns((pl.col("value") - pl.col("base")).alias("delta"))
        .select("opcode", "param", "idx", "base", "value", "delta")
        .sort(["opcode", "param", "idx"])
    )


def _copy(rows: dict[str, dict]) -> dict[str, dict]:
    return {
        k: {
            "latency": list(r["latency"]),
            "uops": r["uops"],
            "read_advance": [list(e) if isinstance(e, list) else e for e in r["read_advance"]],
            "ports": dict(r["ports"]),
        }
        for k, r in rows.items()
    }


def canonical_row(row: dict) -> dict:
    """A row with plain ints, sorted ReadAdvance entries and ports: equal rows compare equal."""
    return {
        "latency": [int(v) for v in row["latency"]],
        "uops": int(row["uops"]),
        "read_advance": sorted([int(u), int(w), int(c)] for u, w, c in row["read_advance"]),
        "ports": {str(k): int(v) for k, v in sorted(row["ports"].items())},
    }
