"""What makes a learning step reproducible from its inputs: budgets counted in
epochs and steps (never seconds), seeds derived from the inputs, one thread
count, torch's deterministic algorithms, and MKL's reproducible code path
(``COMPATIBLE``: under its ``AUTO`` branch, strict or not, a fresh process's
first surrogate batch differed in its last bits in one process in four or five).
The same inputs on the same kind of machine give the same bits;
docs/reference.md ("Determinism") says across what it holds.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os

# Read by MKL when it starts (the first BLAS call), so set before torch computes
# anything; a user's own value is kept.
os.environ.setdefault("MKL_CBWR", "COMPATIBLE")


def seed_of(seed: int, *inputs) -> int:
    """A seed for a step: the configured ``seed`` mixed with what the step reads,
    so the same inputs give the same draws and new inputs fresh ones."""
    text = json.dumps([seed, *inputs], sort_keys=True, default=str)
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


@contextlib.contextmanager
def deterministic(threads: int):
    """torch with ``threads`` threads and its deterministic algorithms only, for
    the length of a learning step; the process's own choices back after it."""
    import torch

    threads_before = torch.get_num_threads()
    strict_before = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(strict_before)
        torch.set_num_threads(threads_before)
