"""The evaluation's figures and explained blocks, kept under ``reports/`` beside
the warehouse per comparison: an evaluation with nothing changed redraws nothing,
and a killed run leaves no half file."""

from __future__ import annotations

import base64
import json
from pathlib import Path


def _figures_path(db, uarch: str, key: str) -> Path:
    return Path(db).parent / "reports" / f"evaluation-{uarch}-{key}.json"


def save_figures(db, uarch: str, key: str, scatter: bytes | None, explained: list[dict]) -> dict:
    """The evaluation's figures and explained blocks, kept under ``reports/``
    beside the warehouse by ``key`` (what they were drawn from), and the scatter
    as ``reports/predicted_vs_measured-<µarch>.png``; returns ``load_figures``' dict."""
    path = _figures_path(db, uarch, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"scatter": scatter, "explained": explained}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, default=_encode))
    tmp.replace(path)  # whole or absent: a killed run leaves no half file to load
    return load_figures(db, uarch, key)


def load_figures(db, uarch: str, key: str) -> dict | None:
    """{"scatter": (png, path) or None, "explained": [...]} kept for ``key``, or None."""
    path = _figures_path(db, uarch, key)
    if not path.exists():
        return None
    doc = json.loads(path.read_text(), object_hook=_decode)
    scatter = None
    if doc["scatter"] is not None:
        png_path = path.parent / f"predicted_vs_measured-{uarch}.png"
        if not png_path.exists() or png_path.read_bytes() != doc["scatter"]:
            png_path.write_bytes(doc["scatter"])
        scatter = doc["scatter"], png_path
    return {"scatter": scatter, "explained": doc["explained"]}


def _encode(value):
    if isinstance(value, bytes):
        return {"__png__": base64.b64encode(value).decode()}
    if isinstance(value, tuple | set):
        return list(value)
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    raise TypeError(f"cannot keep {type(value).__name__} in the evaluation's figures")


def _decode(obj: dict):
    return base64.b64decode(obj["__png__"]) if set(obj) == {"__png__"} else obj
