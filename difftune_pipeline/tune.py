"""Learning the parameter table through the frozen surrogate (DiffTune §4).

The table is a learnable tensor; ``abs()`` keeps it non-negative before the
surrogate; the loss is MAPE against measured throughputs of the train blocks;
Adam with lr 0.05. Every few steps the current table is extracted to valid
integers and scored on the val blocks by the real engine; the best one wins.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from difftune_pipeline.engine import ParamTable
from difftune_pipeline.params import ParamSpace
from difftune_pipeline.surrogate import GLOBAL_SCALE, BlockTensors, Surrogate, mape_loss, param_inputs


@dataclass
class TuneConfig:
    start: str = "default"   # default | random (DiffTune started from a random table)
    steps: int = 300
    lr: float = 0.05
    batch_blocks: int = 256
    validate_every: int = 25
    seed: int = 0


def tune(surrogate: Surrogate, space: ParamSpace, start: ParamTable, blocks: BlockTensors,
         measured: np.ndarray, score: Callable[[ParamTable], float], config: TuneConfig,
         log=print) -> tuple[ParamTable, list[dict]]:
    """Returns the table with the best ``score`` (engine MAPE on val) among the
    start table and the tables extracted along the optimisation, and the history."""
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    model = surrogate.model
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    if list(space.keys) != surrogate.row_keys:
        raise ValueError("the surrogate was trained on another parameter space")
    matrix, globals_ = space.encode(start)
    theta = torch.tensor(matrix, requires_grad=True)
    gvec = torch.tensor(globals_, requires_grad=True)
    truth = torch.tensor(measured, dtype=torch.float32)
    optimizer = torch.optim.Adam([theta, gvec], lr=config.lr)
    with torch.no_grad():
        inst = model.embed_instructions(blocks.tok, blocks.tok_len)

    best_score = score(start)
    best, history = start, [{"step": 0, "surrogate_mape": None, "val_mape": best_score}]
    log(f"tune: start ({config.start}) val MAPE {100 * best_score:.2f}%")
    n = blocks.tok.shape[0]
    for step in range(1, config.steps + 1):
        idx = torch.tensor(rng.choice(n, size=min(config.batch_blocks, n), replace=False))
        params = param_inputs(theta.abs(), blocks.rows[idx])
        g = (gvec.abs() / GLOBAL_SCALE).expand(len(idx), 2)
        pred = model(inst[idx], params, blocks.n_insts[idx], g)
        loss = mape_loss(pred, truth[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % config.validate_every == 0 or step == config.steps:
            candidate = space.decode(theta.detach().numpy(), gvec.detach().numpy(), start)
            val = score(candidate)
            history.append({"step": step, "surrogate_mape": loss.item(), "val_mape": val})
            log(f"tune: step {step}: surrogate train MAPE {100 * loss.item():.2f}%, engine val MAPE {100 * val:.2f}%")
            if val < best_score:
                best, best_score = candidate, val
    return best, history
