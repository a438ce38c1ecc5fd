"""The structured surrogate: llvm-mca's throughput bounds written as
differentiable functions of the parameters, with a small learned correction.

Per iteration a block needs at least
- port pressure: for every resource, the cycles of everything that must run
  inside it spread over its units (``features.containment``), the largest (a
  slow LEA, under ``slow_lea``, a cycle of its one port);
- dispatch: its µops over the dispatch width;
- its loop-carried recurrence: the register dependency graph unrolled over a
  few iterations with latencies (a pointer chase's load shortened by the fast
  path's saving, a slow LEA's the mechanism's, a move renamed away none: no
  port either, its µops still issue), less ReadAdvance on register operands, a
  max-plus recurrence (differentiable almost everywhere); under the extended
  model's memory mechanism, store→load edges (from the block's recorded
  accesses) cost the cycles until the store's data is ready (a plain store's
  one, a read-modify-write's its latency less one) plus the forwarding latency,
  or its latency plus the failed-forwarding penalty when no one store access
  holds the bytes the load reads;
- under the extended model's front end: its bytes over the predecoder's block,
  its instructions over the instructions predecoded per cycle, its decoded
  instructions (a macro-fused pair counts once) over the decoders, a cycle of
  the one complex decoder per instruction of more fused µops than the simple
  decoders take (and per four µops of a microcoded one), its fused µops (µops
  less what micro-fusion saves) over the issue width.
- under a mechanism that drains the pipeline (Zen+'s zero-count shift, Intel's
  locked instructions and x87 stack faults): per draining instruction its cycles after the drain,
  plus, once a block drains at all, the critical path of an iteration;
- under page walks, every per-iteration bound grows by the new pages the block
  reaches an iteration times the walk's cycles (the engine holds memory
  operations meanwhile, so the walks add to whatever bounds the block).
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
from difftune_pipeline.model.graph import latency_bounds
from difftune_pipeline.model.params import READ_ADVANCE_SLOTS
from difftune_pipeline.model.sampling import PairBatch, PairFile, Pairs, Split
from difftune_pipeline.surrogates.base import FitConfig, Surrogate, moved
from difftune_pipeline.surrogates.structured_blocks import DRAINS, STATIC, Batch, StructuredBlocks

MSROM_UOPS = 4  # fused µops a decode cycle of a microcoded instruction (engine/native/front_end.h, kMsromUops)


@dataclass
class StructuredConfig(FitConfig):
    hidden: int = 32
    epochs: int = 30
    lr: float = 5e-3
    batch: int = 512


def bounds(
    params: torch.Tensor,
    globals_: torch.Tensor,
    batch: Batch,
    contain: torch.Tensor,
    names=GLOBALS,
    slow_port: torch.Tensor | None = None,
) -> torch.Tensor:
    """[B, 4 to 6]: port pressure, dispatch, loop-carried recurrence (cycles per
    iteration), the front end and the drains (with their mechanisms: per
    iteration) and, last, the critical path of one iteration. ``params`` [B, N, P]
    are raw parameter values per instruction (columns of ``ParamSpace``);
    ``globals_`` [B, G] in ``names`` order; ``slow_port`` [R] one-hot: the
    resource a slow LEA runs on (needed under ``slow_lea``)."""
    executes = 1.0 - batch.macro  # a macro-fused jcc executes in the µop before it (the engine eliminates it)
    # a move renamed away issues but executes nothing: no latency, no port
    runs = executes * (1.0 - batch.renamed) if "moves_eliminated" in names else executes
    lat, uops = params[..., 0] * runs, params[..., 1]
    if "pointer_chase_saving" in names:  # a pointer chase's load takes the short path
        lat = torch.relu(lat - batch.chase * globals_[:, names.index("pointer_chase_saving")].unsqueeze(-1))
    adv = params[..., 2 : 2 + READ_ADVANCE_SLOTS].amax(-1)
    ports = params[..., 2 + READ_ADVANCE_SLOTS :] * runs.unsqueeze(-1)
    if "slow_lea_latency" in names:  # a slow LEA: its latency, a cycle of its port
        if slow_port is None:
            raise ValueError("the bounds under slow_lea need slow_port, the resource a slow LEA runs on")
        slow = batch.slow
        lat = lat + slow * (globals_[:, names.index("slow_lea_latency")].unsqueeze(-1) - lat)
        ports = ports + slow.unsqueeze(-1) * (slow_port - ports)
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
        fused = torch.maximum(uops - batch.micro, uops.clamp(max=1.0)) * executes
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
    if "page_walk_penalty" in names:
        per_iteration = [bound + batch.walks * optional("page_walk_penalty") for bound in per_iteration]
    on = [k for k, name in enumerate(DRAINS) if name in names]
    if on:
        waits = sum(batch.drains[:, k] * optional(DRAINS[k]) for k in on)
        per_iteration.append(waits + (batch.drains[:, on].sum(1) > 0) * chain)
    return torch.stack([*per_iteration, chain], 1)


def n_bounds(names) -> int:
    """How many columns ``bounds`` gives under the globals ``names`` (the critical path included)."""
    return 4 + ("issue_width" in names) + any(name in names for name in DRAINS)


class StructuredModel(nn.Module):
    def __init__(
        self, n_resources: int, hidden: int, contain: np.ndarray, names=GLOBALS, slow_port: np.ndarray | None = None
    ):
        super().__init__()
        self.register_buffer("contain", torch.tensor(contain, dtype=torch.float32))
        slow_port = np.zeros(n_resources) if slow_port is None else slow_port
        self.register_buffer("slow_port", torch.tensor(slow_port, dtype=torch.float32), persistent=False)
        self.names = tuple(names)
        self.correction = nn.Sequential(
            nn.Linear(n_bounds(self.names) + len(STATIC) + len(self.names), hidden), nn.Tanh(), nn.Linear(hidden, 1)
        )
        nn.init.zeros_(self.correction[2].weight)
        nn.init.zeros_(self.correction[2].bias)
        self.n_resources = n_resources

    def forward(self, params: torch.Tensor, globals_: torch.Tensor, batch: Batch) -> torch.Tensor:
        b = bounds(params, globals_, batch, self.contain, self.names, self.slow_port)
        base = 100.0 * b[:, :-1].amax(1) + b[:, -1]
        if "harness_offset_cycles" in self.names:  # the steady state as BHive's harness reports it
            base = torch.relu(base - globals_[:, self.names.index("harness_offset_cycles")])
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
        slow_port: np.ndarray | None = None,
    ):
        super().__init__(row_keys, config, model, globals_, mechanisms)
        self.contain = contain
        self.slow_port = np.zeros(len(contain)) if slow_port is None else slow_port

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
        slow_port = np.array([float(r["slow_lea"]) for r in resources])  # the engine's own rule
        contain = containment(resources)
        return cls(row_keys, config, contain, globals_=globals_, mechanisms=mechanisms, slow_port=slow_port)

    def inputs(self, blocks: list) -> StructuredBlocks:
        return StructuredBlocks.build(blocks, self.row_index, self.mechanisms)

    def build_model(self, pairs: Pairs, split: Split) -> StructuredModel:
        return StructuredModel(len(self.contain), self.config.hidden, self.contain, self.globals, self.slow_port)

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
        return {
            "n_resources": self.model.n_resources,
            "contain": self.model.contain.cpu().numpy(),
            "slow_port": self.model.slow_port.cpu().numpy(),
        }

    @classmethod
    def from_checkpoint(cls, data: dict) -> StructuredSurrogate:
        config = StructuredConfig(**data["config"])
        globals_ = tuple(data.get("globals", GLOBALS))
        slow_port = data.get("slow_port")  # none before slow_lea
        model = StructuredModel(data["n_resources"], config.hidden, data["contain"], globals_, slow_port)
        # a checkpoint saved before its mechanisms were: its inputs had the memory and the
        # stack engine's graph where their globals are, and no partial-register merges
        read = (("memory", "store_forward_latency"), ("stack_engine", "stack_sync_uops"))
        legacy = [m for m, g in read if g in globals_]
        mechanisms = data.get("mechanisms", legacy)
        return cls(data["rows"], config, data["contain"], model, globals_, mechanisms, slow_port)
