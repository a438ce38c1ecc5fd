"""The structured surrogate: llvm-mca's throughput bounds written as
differentiable functions of the parameters, with a small learned correction.

Per iteration a block needs at least
- port pressure: for every resource, the cycles of everything that must run
  inside it spread over its units (``features.containment``), the largest;
- dispatch: its µops over the dispatch width;
- its loop-carried recurrence: the register dependency graph unrolled over a
  few iterations with latencies, less ReadAdvance on register operands, a
  max-plus recurrence (differentiable almost everywhere).
The prediction for 100 iterations is ``100 · max(bounds) + critical path``,
times ``exp(g)`` where ``g`` is a small MLP over the bounds and the block's
hardware features (counts of instructions, µops, loads, stores, registers,
memory dependencies) — the parts no bound captures (reorder-buffer stalls,
issue order). Gradients of the prediction with respect to the parameter table
are meaningful, so tuning through it moves parameters the way the engine would.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from difftune_pipeline.model.features import containment
from difftune_pipeline.model.graph import BatchGraph, BlockGraphs, dependencies, latency_bounds
from difftune_pipeline.model.params import READ_ADVANCE_SLOTS
from difftune_pipeline.surrogates.base import FitConfig, Pairs, Surrogate, moved

STATIC = ["n_insts", "loads", "stores", "regs_read", "regs_written", "memory_deps"]


@dataclass
class StructuredConfig(FitConfig):
    hidden: int = 32
    seconds: float = 120.0  # training time (the comparison gives both surrogates the same)
    max_epochs: int = 30
    lr: float = 5e-3
    batch: int = 512


@dataclass
class Batch:
    """A batch of blocks padded to its longest: each instruction's row (-1: none,
    the zero row), the dependency graph and the static features."""

    rows: torch.Tensor  # [B, N]
    graph: BatchGraph
    static: torch.Tensor  # [B, len(STATIC)]


@dataclass
class StructuredBlocks:
    """Blocks with their dependency graphs; ``select`` makes a batch."""

    rows: list[torch.Tensor]
    graphs: BlockGraphs
    static: torch.Tensor
    n_insts: torch.Tensor

    @classmethod
    def build(cls, blocks: list, row_index: dict[str, int]) -> StructuredBlocks:
        rows, edges, static = [], [], []
        for block in blocks:
            ops = block.operands
            rows.append(torch.tensor([row_index.get(k, len(row_index)) for k in block.row_keys], dtype=torch.long))
            edges.append(dependencies(ops))
            static.append(
                [
                    len(ops),
                    sum(o["may_load"] for o in ops),
                    sum(o["may_store"] for o in ops),
                    len({r for o in ops for r in o["reads"]}),
                    len({r for o in ops for r in o["writes"]}),
                    sum(e.kind == "memory" for e in edges[-1]),
                ]
            )
        return cls(
            rows,
            BlockGraphs.build(edges, [len(r) for r in rows]),
            torch.tensor(static, dtype=torch.float32),
            torch.tensor([len(r) for r in rows], dtype=torch.long),
        )

    def select(self, idx: torch.Tensor) -> Batch:
        idx = idx.tolist()
        graph = self.graphs.select(idx)
        rows = torch.full((len(idx), graph.width), -1, dtype=torch.long)
        for b, i in enumerate(idx):
            rows[b, : len(self.rows[i])] = self.rows[i]
        return Batch(rows, graph, self.static[idx])


def bounds(params: torch.Tensor, globals_: torch.Tensor, batch: Batch, contain: torch.Tensor) -> torch.Tensor:
    """[B, 4]: port pressure, dispatch, loop-carried recurrence (cycles per
    iteration) and the critical path of one iteration. ``params`` [B, N, P] are
    raw parameter values per instruction (columns of ``ParamSpace``)."""
    lat, uops = params[..., 0], params[..., 1]
    adv = params[..., 2 : 2 + READ_ADVANCE_SLOTS].amax(-1)
    ports = params[..., 2 + READ_ADVANCE_SLOTS :]
    pressure = (ports.sum(1) @ contain).amax(-1)
    dispatch = uops.sum(1) / globals_[:, 0].clamp(min=1.0)
    chain, recurrence = latency_bounds(lat, adv, batch.graph)
    return torch.stack([pressure, dispatch, recurrence, chain], 1)


class StructuredModel(nn.Module):
    def __init__(self, n_resources: int, hidden: int, contain: np.ndarray):
        super().__init__()
        self.register_buffer("contain", torch.tensor(contain, dtype=torch.float32))
        self.correction = nn.Sequential(nn.Linear(4 + len(STATIC) + 2, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        nn.init.zeros_(self.correction[2].weight)
        nn.init.zeros_(self.correction[2].bias)
        self.n_resources = n_resources

    def forward(self, params: torch.Tensor, globals_: torch.Tensor, batch: Batch) -> torch.Tensor:
        b = bounds(params, globals_, batch, self.contain)
        base = 100.0 * b[:, :3].amax(1) + b[:, 3]
        x = torch.cat(
            [torch.log1p(torch.relu(b)), torch.log1p(batch.static), torch.log(globals_.clamp(min=1.0)) / 5.0], 1
        )
        return (base + 1.0) * torch.exp(self.correction(x).squeeze(-1))


class StructuredSurrogate(Surrogate):
    """The bounds with their learned correction, over the resources of the CPU."""

    kind = "structured"
    settings_field = "structured"

    def __init__(self, row_keys: list[str], config: StructuredConfig, contain: np.ndarray, model=None):
        super().__init__(row_keys, config, model)
        self.contain = contain

    @property
    def max_epochs(self) -> int:
        return self.config.max_epochs

    @property
    def seconds(self) -> float:
        return self.config.seconds

    @property
    def eval_batch(self) -> int:
        return self.config.batch

    @classmethod
    def create(
        cls, row_keys: list[str], config: StructuredConfig, blocks: list, resources: list[dict]
    ) -> StructuredSurrogate:
        return cls(row_keys, config, containment(resources))

    def inputs(self, blocks: list) -> StructuredBlocks:
        return StructuredBlocks.build(blocks, self.row_index)

    def build_model(self, pairs: Pairs, train: torch.Tensor) -> StructuredModel:
        return StructuredModel(len(self.contain), self.config.hidden, self.contain)

    def batches(self, inputs: StructuredBlocks, pairs: Pairs, train: torch.Tensor):
        """Batches of similar block length (the unrolled recurrence stays short), in random order."""
        train_pairs = torch.nonzero(train).squeeze(-1)
        order = train_pairs[torch.argsort(inputs.n_insts[pairs.block_idx[train_pairs]], stable=True)]
        batches = [order[s : s + self.config.batch] for s in range(0, len(order), self.config.batch)]
        return lambda rng: (batches[i] for i in rng.permutation(len(batches)))

    def forward(self, inputs: StructuredBlocks, pairs: Pairs, samples: torch.Tensor) -> torch.Tensor:
        table_idx = pairs.table_idx[samples]
        batch = inputs.select(pairs.block_idx[samples])
        params = pairs.tables[table_idx.unsqueeze(1), batch.rows]
        device = self.device
        return self.model(params.to(device), pairs.globals_[table_idx].to(device), moved(batch, device))

    def predict_fn(self, inputs: StructuredBlocks):
        def predict(matrix: torch.Tensor, globals_: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
            batch = inputs.select(idx)
            padded = torch.cat([matrix, torch.zeros(1, matrix.shape[1], dtype=matrix.dtype)], 0)
            return self.model(padded[batch.rows], globals_.expand(len(idx), 2), batch)

        return predict

    def checkpoint(self) -> dict:
        return {"n_resources": self.model.n_resources, "contain": self.model.contain.cpu().numpy()}

    @classmethod
    def from_checkpoint(cls, data: dict) -> StructuredSurrogate:
        config = StructuredConfig(**data["config"])
        return cls(
            data["rows"], config, data["contain"], StructuredModel(data["n_resources"], config.hidden, data["contain"])
        )
