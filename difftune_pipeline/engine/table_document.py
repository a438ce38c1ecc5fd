"""A table's JSON document and its validation (pydantic): every field typed and
within the engine's range, a bad document refused naming the path of each bad
field. The ranges are the engine's own and those declared with the extended
model's parameters."""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from difftune_pipeline.engine import _engine, extended, mechanisms

FORMAT = "difftune-params/1"
GLOBALS = ("dispatch_width", "micro_op_buffer_size")


# Valid parameter ranges, name -> (min, max), which compile() enforces: the
# engine's own, and those declared with the extended model's parameters.
LIMITS: dict[str, tuple[int, int]] = dict(_engine.LIMITS) | {n: p.limits for n, p in mechanisms.PARAMETERS.items()}


def _int(limit: str | tuple[int, int]):
    """The type of an integer within the engine's own range for ``limit``: no bools, strings or floats."""
    lo, hi = LIMITS[limit] if isinstance(limit, str) else limit
    return Annotated[int, Field(strict=True, ge=lo, le=hi)]


_INDEX = (0, 255)  # an operand index of one instruction


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid")
    latency: list[_int("latency")]
    uops: _int("uops")
    read_advance: list[tuple[_int(_INDEX), _int(_INDEX), _int("read_advance")]]
    ports: dict[str, _int("port_cycles")]


# The globals: llvm-mca's two, and the extended model's, present exactly when their mechanism is on.
_Globals = create_model(
    "_Globals",
    __config__=ConfigDict(extra="forbid"),
    **{name: (_int(name), ...) for name in GLOBALS},
    **{name: (_int(name) | None, None) for name in mechanisms.PARAMETERS},
)


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mechanisms: list[Literal[mechanisms.MECHANISMS]]  # type: ignore[valid-type]
    harness: Literal[extended.HARNESSES]  # type: ignore[valid-type]


class Document(BaseModel):
    """The JSON form of a table (what ``to_dict`` writes)."""

    model_config = ConfigDict(extra="forbid")
    format: Literal[FORMAT]  # type: ignore[valid-type]
    mcpu: Annotated[str, Field(strict=True, min_length=1)]
    llvm_version: Annotated[str, Field(strict=True, min_length=1)]
    globals: _Globals
    model: Model | None = None
    opcodes: dict[str, _Row]


def _short(value, width: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"duplicate key {next(k for k in keys if keys.count(k) > 1)!r}")
    return dict(pairs)


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def validated(text: str, source: str) -> Document:
    """The document, or a ValueError naming the path of each bad field (or why it is not JSON)."""
    try:  # pydantic's own parser lets a duplicate key's last value win: refuse it first
        json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{source} is not valid JSON: {str(exc)[:200]}") from None
    try:
        return Document.model_validate_json(text)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(p) for p in e['loc']) or '(document)'}: {e['msg']}"
            + (
                f" (got {_short(e['input'])})"
                if e["type"] != "missing" and not isinstance(e["input"], dict | list)
                else ""
            )
            for e in exc.errors()[:5]
        ]
        more = f" (and {exc.error_count() - 5} more)" if exc.error_count() > 5 else ""
        raise ValueError(f"{source} is not a valid parameter table: " + "; ".join(problems) + more) from None
