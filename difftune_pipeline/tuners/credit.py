"""The engine's part of a round it refused. A round of the gradient moves many
rows and globals at once; the engine refuses the whole when a few of them do
what the surrogate does not see (a push's µops under the stack engine, a
divider's latency, the decoders), though most of the others helped. Each moved
row is credited with what the round did, on the engine's own cycles, to the
train blocks it is in; the rows whose blocks it made better are kept (rows the
gradient moves as one, ``tied_rows``, as one), the others and every global go
back to the confirmed table. The engine then judges that part as it judged the
round; once it confirms one, the gradient holds the globals where they are: a
global's harm is every block's, and no credit tells it from the rows'."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import torch

from difftune_pipeline.engine import ParamTable
from difftune_pipeline.model.params import ParamSpace
from difftune_pipeline.tuners.active_learning import Simulate, Visit, visit
from difftune_pipeline.tuners.base import Problem, block_errors, sibling_groups


def incidence(keys: list[str], blocks: list) -> tuple[np.ndarray, np.ndarray]:
    """(train block, row in ``keys``) pairs: the rows each train block uses, once each."""
    index = {k: i for i, k in enumerate(keys)}
    pairs = [(b, index[k]) for b, block in enumerate(blocks) for k in dict.fromkeys(block.row_keys) if k in index]
    pairs = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]


def engine_part(
    space: ParamSpace,
    uses: tuple[np.ndarray, np.ndarray],
    tied: list[list[int]],
    measured: np.ndarray,
    simulate: Simulate,
    refused: tuple[ParamTable, Visit],
    confirmed: tuple[ParamTable, Visit],
) -> tuple[ParamTable, Visit] | None:
    """The confirmed table with the refused round's moved rows whose train blocks
    got better in sum, on the engine's cycles at the two tables, and the part's
    visit (the engine at the blocks it changes, the confirmed table's cycles
    elsewhere); None when no moved row helped. Tied rows are credited and kept as one."""
    (candidate, at_candidate), (table, at_table) = refused, confirmed
    harm = block_errors(at_candidate[2].numpy(), measured) - block_errors(at_table[2].numpy(), measured)
    moved = torch.any(at_candidate[0] != at_table[0], dim=1).numpy()  # the rows as the gradient reads them
    block, row = uses
    credit = np.zeros(len(space.keys))
    np.add.at(credit, row, harm[block])
    for group in tied:
        credit[group] = credit[group].sum()
    kept = moved & (credit < 0)
    if not kept.any():
        return None
    part = replace(
        table, rows={**table.rows, **{space.keys[i]: candidate.rows[space.keys[i]] for i in np.flatnonzero(kept)}}
    )
    positions = np.unique(block[kept[row]])
    matrix, globals_, cycles = visit(space, part, simulate, positions)
    engine = at_table[2].clone()
    engine[positions] = cycles[positions]
    return part, (matrix, globals_, engine)


def tied_rows(space: ParamSpace, problem: Problem) -> list[list[int]]:
    """Rows in a single train block, grouped with their siblings (``tuners.base.sibling_groups``):
    each group moves as one, as the search moves such rows, so that what one block
    says about an opcode is said of its widths too, and pruning finds them agreeing."""
    users = Counter(k for block in problem.blocks for k in dict.fromkeys(block.row_keys))
    rare = [k for k in space.keys if users[k] == 1 and k in problem.default.rows]
    groups: dict[tuple, list[int]] = {}
    for key, group in sibling_groups(rare, problem.default, problem.engine.sched_classes).items():
        groups.setdefault(group, []).append(space.index[key])
    return [rows for rows in groups.values() if len(rows) > 1]
