"""Basic blocks: identity, the train/val/test split, and disassembly into rows."""

from __future__ import annotations

import hashlib

import polars as pl

from difftune_pipeline.engine import Engine

BLOCK_SCHEMA = {
    "block_id": pl.Utf8,
    "hex": pl.Utf8,
    "n_insts": pl.Int32,
    "asm": pl.Utf8,
    "opcodes": pl.List(pl.Utf8),
    "status": pl.Utf8,
    "reason": pl.Utf8,
}


def canonical_hex(hex_: str) -> str:
    return hex_.strip().lower()


def block_id(hex_: str) -> str:
    """Content hash of the canonical hex: re-ingesting a block finds the same row."""
    return hashlib.sha256(canonical_hex(hex_).encode()).hexdigest()[:16]


def split_of(block_id_: str) -> str:
    """80/10/10 by block hash: a block's split never changes as data grows."""
    bucket = int(block_id_[:8], 16) % 10
    return "train" if bucket < 8 else "val" if bucket == 8 else "test"


def hex_problem(hex_: str) -> str | None:
    """Why a string is not a hex-encoded block, or None."""
    if not hex_:
        return "empty hex string"
    bad = next((c for c in hex_ if c not in "0123456789abcdef"), None)
    if bad is not None:
        return f"non-hex character {bad!r}"
    if len(hex_) % 2:
        return f"odd number of hex digits ({len(hex_)})"
    return None


def disassemble_rows(engine: Engine, hexes: list[str]) -> pl.DataFrame:
    """Rows for the ``blocks`` table; undecodable blocks are kept as quarantined."""
    decoded = engine.disassemble_many(hexes)
    return pl.DataFrame(
        {
            "block_id": [block_id(h) for h in hexes],
            "hex": hexes,
            "n_insts": [len(b) if b.ok else None for b in decoded],
            "asm": ["\n".join(b.asm) if b.ok else None for b in decoded],
            "opcodes": [b.opcodes if b.ok else None for b in decoded],
            "status": ["ok" if b.ok else "quarantined" for b in decoded],
            "reason": [None if b.ok else f"undecodable: {b.error}" for b in decoded],
        },
        schema=BLOCK_SCHEMA,
    )
