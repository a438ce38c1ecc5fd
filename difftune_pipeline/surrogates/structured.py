"""The structured surrogate: llvm-mca's throughput bounds written as
differentiable functions of the parameters, with a small learned correction.

Per iteration a block needs at least
- port pressure: for every resource, the cycles of everything that must run
  inside it spread over its units (``features.containment``), the largest;
- dispatch: its µops over the dispatch width;
- its loop-carried recurrence: the register dependency graph unrolled over a
  few iterations with latencies, less ReadAdvance on register operands, a
  max-plus recurrence (differentiable almost everywhere); under the extended
  model's memory mechanism, store→load edges (from the block's recorded
  accesses) cost the store's latency plus the forwarding latency, or plus the
  failed-forwarding penalty when no one store access holds the bytes the load reads;
- under the extended model's front end: its bytes over the predecoder's block,
  its instructions over the instructions predecoded per cycle, its decoded
  instructions (a macro-fused pair counts once) over the decoders, a cycle of
  the one complex decoder per instruction of more fused µops than the simple
  decoders take (and per four µops of a microcoded one), its fused µops (µops
  less what micro-fusion saves) over the issue width.
- under a mechanism that drains the pipeline (Zen+'s zero-count shift, Intel's
  locked instructions and x87 stack faults): per draining instruction its cycles after the drain,
  plus, once a block drains at all, the critical path of an iteration.
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

from difftune_pipeline.engine.table import GLOBALS
from difftune_pipeline.model.features import containment
from difftune_pipeline.model.graph import (
    BatchGraph,
    BlockGraphs,
    dependencies,
    latency_bounds,
    memory_dependencies,
    with_partial_merges,
    without_stack_updates,
)
from difftune_pipeline.model.params import READ_ADVANCE_SLOTS
from difftune_pipeline.model.sampling import PairBatch, PairFile, Pairs, Split
from difftune_pipeline.surrogates.base import FitConfig, Surrogate, moved

STATIC = ["n_insts", "loads", "stores", "regs_read", "regs_written", "memory_deps"]
MSROM_UOPS = 4  # fused µops a decode cycle of a microcoded instruction (engine/native/front_end.h, kMsromUops)
DRAINS = ("zero_shift_penalty", "lock_penalty", "x87_assist_penalty")  # the globals of Batch.drains' columns


@dataclass
class StructuredConfig(FitConfig):
    hidden: int = 32
    epochs: int = 30
    lr: float = 5e-3
    batch: int = 512


@dataclass
class Batch:
    """A batch of blocks padded to its longest: each instruction's row (-1: none,
    the zero row), the dependency graph, the static features and what the front
    end reads (µops micro-fusion saves and macro-fused jccs per instruction;
    bytes and decoded instructions per block)."""

    rows: torch.Tensor  # [B, N]
    graph: BatchGraph
    static: torch.Tensor  # [B, len(STATIC)]
    micro: torch.Tensor  # [B, N]
    macro: torch.Tensor  # [B, N] 1.0 where a jcc is fused into the instruction before it
    front: torch.Tensor  # [B, 3] bytes, decoded instructions, instructions
    drains: torch.Tensor  # [B, 3] instructions waiting for a zero-count shift's assist, locked ones, x87 faults


@dataclass
class StructuredBlocks:
    """Blocks with their dependency graphs; ``select`` makes a batch."""

    rows: list[torch.Tensor]
    graphs: BlockGraphs
    static: torch.Tensor
    n_insts: torch.Tensor
    micro: list[torch.Tensor]
    macro: list[torch.Tensor]
    front: torch.Tensor
    drains: torch.Tensor

    @classmethod
    def build(cls, blocks: list, row_index: dict[str, int], mechanisms=()) -> StructuredBlocks:
        """The graph as the extended model's ``mechanisms`` time it: under ``memory``
        store→load edges come from each block's recorded accesses, timed; under
        ``stack_engine`` no chain runs through RSP from push and pop (the engine's
        stack operations); under ``partial_register`` a partial write reads what it merges into."""
        memory = "memory" in mechanisms
        rows, edges, static, micro, macro, front, drains = [], [], [], [], [], [], []
        for block in blocks:
            ops = without_stack_updates(block.operands) if "stack_engine" in mechanisms else block.operands
            if "partial_register" in mechanisms:
                ops = with_partial_merges(ops)
            rows.append(torch.tensor([row_index.get(k, len(row_index)) for k in block.row_keys], dtype=torch.long))
            deps = dependencies(ops)
            if memory and block.accesses:
                deps = [e for e in deps if e.kind != "memory"] + memory_dependencies(block.accesses, len(ops))
            edges.append(deps)
            fe = block.front_end or [(1, 0, False)] * len(ops)
            micro.append(torch.tensor([m for _, m, _ in fe], dtype=torch.float32))
            macro.append(torch.tensor([float(f) for _, _, f in fe], dtype=torch.float32))
            front.append([sum(b for b, _, _ in fe), len(fe) - sum(f for _, _, f in fe), len(fe)])
            serial = block.serialising
            drains.append([sum(column) for column in zip(*serial)] if serial else [0] * len(DRAINS))
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
            BlockGraphs.build(edges, [len(r) for r in rows], memory),
            torch.tensor(static, dtype=torch.float32),
            torch.tensor([len(r) for r in rows], dtype=torch.long),
            micro,
            macro,
            torch.tensor(front, dtype=torch.float32).reshape(-1, 3),
            torch.tensor(drains, dtype=torch.float32).reshape(-1, len(DRAINS)),
        )

    def select(self, idx: torch.Tensor) -> Batch:
        idx = idx.tolist()
        graph = self.graphs.select(idx)
        rows = torch.full((len(idx), graph.width), -1, dtype=torch.long)
        micro, macro = torch.zeros(len(idx), graph.width), torch.zeros(len(idx), graph.width)
        for b, i in enumerate(idx):
            rows[b, : len(self.rows[i])] = self.rows[i]
            micro[b, : len(self.micro[i])] = self.micro[i]
            macro[b, : len(self.macro[i])] = self.macro[i]
        return Batch(rows, graph, self.static[idx], micro, macro, self.front[idx], self.drains[idx])


def bounds(
    params: torch.Tensor, globals_: torch.Tensor, batch: Batch, contain: torch.Tensor, names=GLOBALS
) -> torch.Tensor:
    """[B, 4 to 6]: port pressure, dispatch, loop-carried recurrence (cycles per
    iteration), the front end and the drains (with their mechanisms: per
    iteration) and, last, the critical path of one iteration. ``params`` [B, N, P]
    are raw parameter values per instruction (columns of ``ParamSpace``);
    ``globals_`` [B, G] in ``names`` order."""
    lat, uops = params[..., 0], params[..., 1]
    adv = params[..., 2 : 2 + READ_ADVANCE_SLOTS].amax(-1)
    ports = params[..., 2 + READ_ADVANCE_SLOTS :]
    pressure = (ports.sum(1) @ contain).amax(-1)
    dispatch = uops.sum(1) / globals_[:, 0].clamp(min=1.0)

    def g(name: str) -> torch.Tensor:
        return globals_[:, names.index(name)].clamp(min=1.0)

    def optional(name: str) -> torch.Tensor | float:
        return globals_[:, names.index(name)] if name in names else 0.0

    chain, recurrence = latency_bounds(
        lat, adv, batch.graph, optional("store_forward_latency"), optional("store_forward_fail_penalty")
    )
    per_iteration = [pressure, dispatch, recurrence]
    if "issue_width" in names:
        fused = torch.maximum(uops - batch.micro, uops.clamp(max=1.0)) * (1.0 - batch.macro)
        # the first decoder, a cycle for each instruction above the simple decoders'
        # µops (a step, relaxed over one µop) and for each MSROM_UOPS µops of a microcoded one
        complex_ = (fused - g("simple_decoder_uops")[:, None]).clamp(0.0, 1.0) + torch.relu(fused / MSROM_UOPS - 1.0)
        per_iteration.append(
            torch.stack(
                [
                    batch.front[:, 0] / g("predecode_bytes"),
                    batch.front[:, 2] / g("predecode_width"),
                    batch.front[:, 1] / g("decoders"),
                    complex_.sum(1),
                    fused.sum(1) / g("issue_width"),
                ],
                1,
            ).amax(1)
        )
    on = [k for k, name in enumerate(DRAINS) if name in names]
    if on:
        waits = sum(batch.drains[:, k] * optional(DRAINS[k]) for k in on)
        per_iteration.append(waits + (batch.drains[:, on].sum(1) > 0) * chain)
    return torch.stack([*per_iteration, chain], 1)


def n_bounds(names) -> int:
    """How many columns ``bounds`` gives under the globals ``names`` (the critical path included)."""
    return 4 + ("issue_width" in names) + any(name in names for name in DRAINS)


class StructuredModel(nn.Module):
    def __init__(self, n_resources: int, hidden: int, contain: np.ndarray, names=GLOBALS):
        super().__init__()
        self.register_buffer("contain", torch.tensor(contain, dtype=torch.float32))
        self.names = tuple(names)
        self.correction = nn.Sequential(
            nn.Linear(n_bounds(self.names) + len(STATIC) + len(self.names), hidden), nn.Tanh(), nn.Linear(hidden, 1)
        )
        nn.init.zeros_(self.correction[2].weight)
        nn.init.zeros_(self.correction[2].bias)
        self.n_resources = n_resources

    def forward(self, params: torch.Tensor, globals_: torch.Tensor, batch: Batch) -> torch.Tensor:
        b = bounds(params, globals_, batch, self.contain, self.names)
        base = 100.0 * b[:, :-1].amax(1) + b[:, -1]
        x = torch.cat(
            [torch.log1p(torch.relu(b)), torch.log1p(batch.static), torch.log(globals_.clamp(min=1.0)) / 5.0], 1
        )
        return (base + 1.0) * torch.exp(self.correction(x).squeeze(-1))


class StructuredSurrogate(Surrogate):
    """The bounds with their learned correction, over the resources of the CPU."""

    kind = "structured"
    settings_field = "structured"

    def __init__(
        self,
        row_keys: list[str],
        config: StructuredConfig,
        contain: np.ndarray,
        model=None,
        globals_=GLOBALS,
        mechanisms=(),
    ):
        super().__init__(row_keys, config, model, globals_, mechanisms)
        self.contain = contain

    @property
    def epochs(self) -> int:
        return self.config.epochs

    @property
    def eval_batch(self) -> int:
        return self.config.batch

    @classmethod
    def create(
        cls,
        row_keys: list[str],
        config: StructuredConfig,
        blocks: list,
        resources: list[dict],
        globals_=GLOBALS,
        mechanisms=(),
    ) -> StructuredSurrogate:
        return cls(row_keys, config, containment(resources), globals_=globals_, mechanisms=mechanisms)

    def inputs(self, blocks: list) -> StructuredBlocks:
        return StructuredBlocks.build(blocks, self.row_index, self.mechanisms)

    def build_model(self, pairs: Pairs, split: Split) -> StructuredModel:
        return StructuredModel(len(self.contain), self.config.hidden, self.contain, self.globals)

    def order(self, inputs: StructuredBlocks) -> np.ndarray:
        """Block length: a batch of similar lengths keeps the unrolled recurrence short."""
        return inputs.n_insts.numpy()

    def batches(self, inputs: StructuredBlocks, train: PairFile):
        """Runs of ``batch`` pairs of similar block length (the file's order), in random order."""
        starts = range(0, len(train), self.config.batch)
        ranges = [(s, min(self.config.batch, len(train) - s)) for s in starts]
        return lambda rng: (train.read([ranges[i]]) for i in rng.permutation(len(ranges)))

    def forward(self, inputs: StructuredBlocks, pairs: Pairs, samples: PairBatch) -> torch.Tensor:
        table_idx = samples.table_idx
        batch = inputs.select(samples.block_idx)
        params = pairs.tables[table_idx.unsqueeze(1), batch.rows]
        device = self.device
        return self.model(params.to(device), pairs.globals_[table_idx].to(device), moved(batch, device))

    def predict_fn(self, inputs: StructuredBlocks):
        last: list = [None, None]  # the blocks asked about last and their batch: the search asks again and again

        def predict(matrix: torch.Tensor, globals_: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
            if last[0] is None or not torch.equal(last[0], idx):
                last[:] = [idx.clone(), inputs.select(idx)]
            batch = last[1]
            padded = torch.cat([matrix, torch.zeros(1, matrix.shape[1], dtype=matrix.dtype)], 0)
            return self.model(padded[batch.rows], globals_.expand(len(idx), -1), batch)

        return predict

    def checkpoint(self) -> dict:
        return {"n_resources": self.model.n_resources, "contain": self.model.contain.cpu().numpy()}

    @classmethod
    def from_checkpoint(cls, data: dict) -> StructuredSurrogate:
        config = StructuredConfig(**data["config"])
        globals_ = tuple(data.get("globals", GLOBALS))
        model = StructuredModel(data["n_resources"], config.hidden, data["contain"], globals_)
        # a checkpoint saved before its mechanisms were: its inputs had the memory and the
        # stack engine's graph where their globals are, and no partial-register merges
        legacy = [m for m, g in (("memory", "store_forward_latency"), ("stack_engine", "stack_sync_uops")) if g in globals_]
        return cls(data["rows"], config, data["contain"], model, globals_, data.get("mechanisms", legacy))
