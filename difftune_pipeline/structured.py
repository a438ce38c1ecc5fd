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

import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn

from difftune_pipeline.features import UNROLL, containment, dependencies
from difftune_pipeline.params import READ_ADVANCE_SLOTS

STATIC = ["n_insts", "loads", "stores", "regs_read", "regs_written", "memory_deps"]


@dataclass
class StructuredConfig:
    hidden: int = 32
    seconds: float = 120.0       # training time (the comparison gives both surrogates the same)
    max_epochs: int = 30
    lr: float = 5e-3
    batch: int = 512
    heldout_fraction: float = 0.1
    seed: int = 0
    threads: int = 2


@dataclass
class BatchGraph:
    """A batch of blocks padded to its longest, with its dependency edges as flat
    indices into the [B * N] instructions (sparse: a block has few edges)."""
    rows: torch.Tensor       # [B, N] each instruction's row (-1: none, the zero row)
    src: torch.Tensor        # [E] producer (b * N + i)
    dst: torch.Tensor        # [E] consumer (b * N + j)
    carried: torch.Tensor    # [E] bool: from the previous iteration
    register: torch.Tensor   # [E] bool: a register operand (ReadAdvance applies), not an address
    static: torch.Tensor     # [B, len(STATIC)]
    depth: int               # the longest within-iteration chain of the batch, in edges


@dataclass
class StructuredBlocks:
    """Blocks with their dependency graphs; ``select`` makes a batch."""
    rows: list[torch.Tensor]
    edges: list[torch.Tensor]  # [E, 4]: src, dst, carried, register
    static: torch.Tensor
    n_insts: torch.Tensor
    depth: torch.Tensor        # per block: its longest within-iteration chain, in edges

    @classmethod
    def build(cls, blocks: list, row_index: dict[str, int]) -> StructuredBlocks:
        rows, edges, static, depth = [], [], [], []
        for block in blocks:
            ops = block.operands
            rows.append(torch.tensor([row_index.get(k, len(row_index)) for k in block.row_keys], dtype=torch.long))
            every = dependencies(ops)
            deps = [e for e in every if e.kind != "memory"]  # llvm-mca assumes no aliasing
            edges.append(torch.tensor([[e.src, e.dst, e.distance, e.kind == "register"] for e in deps],
                                      dtype=torch.long).reshape(-1, 4))
            longest = [0] * len(ops)
            for e in sorted((e for e in deps if e.distance == 0), key=lambda e: e.dst):
                longest[e.dst] = max(longest[e.dst], longest[e.src] + 1)
            depth.append(max(longest, default=0))
            static.append([len(ops), sum(o["may_load"] for o in ops), sum(o["may_store"] for o in ops),
                           len({r for o in ops for r in o["reads"]}), len({r for o in ops for r in o["writes"]}),
                           sum(e.kind == "memory" for e in every)])
        return cls(rows, edges, torch.tensor(static, dtype=torch.float32),
                   torch.tensor([len(r) for r in rows], dtype=torch.long), torch.tensor(depth, dtype=torch.long))

    def select(self, idx: torch.Tensor) -> BatchGraph:
        idx = idx.tolist()
        n = max(1, max(len(self.rows[i]) for i in idx))
        rows = torch.full((len(idx), n), -1, dtype=torch.long)
        for b, i in enumerate(idx):
            rows[b, :len(self.rows[i])] = self.rows[i]
        offsets = torch.arange(len(idx)) * n
        edges = [self.edges[i] + torch.tensor([o, o, 0, 0]) for i, o in zip(idx, offsets.tolist())]
        e = torch.cat(edges) if edges else torch.zeros(0, 4, dtype=torch.long)
        return BatchGraph(rows, e[:, 0], e[:, 1], e[:, 2].bool(), e[:, 3].bool(), self.static[idx],
                          int(self.depth[idx].max()))


def bounds(params: torch.Tensor, globals_: torch.Tensor, graph: BatchGraph, contain: torch.Tensor) -> torch.Tensor:
    """[B, 4]: port pressure, dispatch, loop-carried recurrence (cycles per
    iteration) and the critical path of one iteration. ``params`` [B, N, P] are
    raw parameter values per instruction (columns of ``ParamSpace``)."""
    lat, uops = params[..., 0], params[..., 1]
    adv = params[..., 2:2 + READ_ADVANCE_SLOTS].amax(-1)
    ports = params[..., 2 + READ_ADVANCE_SLOTS:]
    pressure = (ports.sum(1) @ contain).amax(-1)
    dispatch = uops.sum(1) / globals_[:, 0].clamp(min=1.0)
    flat_lat = lat.reshape(-1)
    weight = torch.relu(flat_lat[graph.src] - adv.reshape(-1)[graph.dst] * graph.register)      # [E]
    same, carried = ~graph.carried, graph.carried

    def relax(into: torch.Tensor, times: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """max(into[j], times[i] + w(i, j)) over the edges in ``mask``."""
        return into.scatter_reduce(0, graph.dst[mask], times[graph.src[mask]] + weight[mask], "amax")

    # Start times, iteration by iteration: what the previous iteration feeds in,
    # then max-plus relaxation along the within-iteration edges, as many rounds as
    # the longest chain has edges (exact for a DAG), vectorised over the batch.
    prev, finish = None, []
    for _ in range(UNROLL):
        base = torch.zeros_like(flat_lat)
        if prev is not None:
            base = relax(base, prev, carried)
        t = base
        for _ in range(graph.depth):
            t = relax(base, t, same)
        prev = t
        finish.append((prev.reshape(lat.shape) + lat).amax(1))
    half = UNROLL // 2
    recurrence = (finish[-1] - finish[half - 1]) / (UNROLL - half)
    return torch.stack([pressure, dispatch, recurrence, finish[0]], 1)


class StructuredModel(nn.Module):
    def __init__(self, n_resources: int, hidden: int, contain: np.ndarray):
        super().__init__()
        self.register_buffer("contain", torch.tensor(contain, dtype=torch.float32))
        self.correction = nn.Sequential(nn.Linear(4 + len(STATIC) + 2, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        nn.init.zeros_(self.correction[2].weight)
        nn.init.zeros_(self.correction[2].bias)
        self.n_resources = n_resources

    def forward(self, params: torch.Tensor, globals_: torch.Tensor, graph: BatchGraph) -> torch.Tensor:
        b = bounds(params, globals_, graph, self.contain)
        base = 100.0 * b[:, :3].amax(1) + b[:, 3]
        x = torch.cat([torch.log1p(torch.relu(b)), torch.log1p(graph.static),
                       torch.log(globals_.clamp(min=1.0)) / 5.0], 1)
        return (base + 1.0) * torch.exp(self.correction(x).squeeze(-1))


class StructuredSurrogate:
    """A trained structured model with its row index (the parameter space's keys)."""

    def __init__(self, model: StructuredModel, row_keys: list[str], config: StructuredConfig):
        self.model, self.row_keys, self.config = model, row_keys, config
        self.row_index = {k: i for i, k in enumerate(row_keys)}

    def save(self, path) -> None:
        torch.save({"state": self.model.state_dict(), "rows": self.row_keys, "config": asdict(self.config),
                    "n_resources": self.model.n_resources, "contain": self.model.contain.numpy()}, path)

    @classmethod
    def load(cls, path) -> StructuredSurrogate:
        data = torch.load(path, weights_only=False)
        config = StructuredConfig(**data["config"])
        model = StructuredModel(data["n_resources"], config.hidden, data["contain"])
        model.load_state_dict(data["state"])
        model.eval()
        return cls(model, data["rows"], config)

    def tensors(self, blocks: list) -> StructuredBlocks:
        return StructuredBlocks.build(blocks, self.row_index)

    def predictor(self, blocks: StructuredBlocks):
        """``predict(matrix, globals, idx)``: cycles of blocks ``idx`` under one table (for tuning; frozen)."""
        self.model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)

        def predict(matrix: torch.Tensor, globals_: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
            sel = blocks.select(idx)
            padded = torch.cat([matrix, torch.zeros(1, matrix.shape[1], dtype=matrix.dtype)], 0)
            return self.model(padded[sel.rows], globals_.expand(len(idx), 2), sel)
        return predict


def _pair_forward(model: StructuredModel, blocks: StructuredBlocks, tables: torch.Tensor, globals_: torch.Tensor,
                  block_idx: torch.Tensor, table_idx: torch.Tensor) -> torch.Tensor:
    sel = blocks.select(block_idx)
    params = tables[table_idx.unsqueeze(1), sel.rows]
    return model(params, globals_[table_idx], sel)


def train(blocks: StructuredBlocks, tables: torch.Tensor, globals_: torch.Tensor, block_idx: torch.Tensor,
          table_idx: torch.Tensor, cycles: torch.Tensor, row_keys: list[str], resources: list[dict],
          config: StructuredConfig, log=print) -> tuple[StructuredSurrogate, dict]:
    """Fit the correction on (block, table) pairs for ``config.seconds``; report
    the held-out fidelity (blocks never seen in training) against the engine.
    ``tables`` [T, rows + 1, P] with a zero last row, as in ``surrogate.TrainingData``."""
    from difftune_pipeline.evaluate import kendall_tau

    torch.manual_seed(config.seed)
    torch.set_num_threads(config.threads)
    rng = np.random.default_rng(config.seed)
    n_blocks = len(blocks.rows)
    held = set(rng.choice(n_blocks, size=max(1, int(n_blocks * config.heldout_fraction)), replace=False).tolist())
    is_held = torch.tensor([int(b) in held for b in block_idx.tolist()])
    model = StructuredModel(len(resources), config.hidden, containment(resources))
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    train_pairs = torch.nonzero(~is_held).squeeze(-1)
    # batches of similar block length keep the unrolled recurrence short
    order = train_pairs[torch.argsort(blocks.n_insts[block_idx[train_pairs]], stable=True)]
    batches = [order[s:s + config.batch] for s in range(0, len(order), config.batch)]
    t0, epochs = time.perf_counter(), 0
    while epochs < config.max_epochs and time.perf_counter() - t0 < config.seconds:
        model.train()
        losses = []
        for i in rng.permutation(len(batches)):
            s = batches[i]
            pred = _pair_forward(model, blocks, tables, globals_, block_idx[s], table_idx[s])
            loss = ((pred - cycles[s]).abs() / cycles[s]).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if time.perf_counter() - t0 > config.seconds:
                break
        epochs += 1
        log(f"structured surrogate epoch {epochs}: train MAPE {100 * np.mean(losses):.2f}%")
    seconds = time.perf_counter() - t0
    model.eval()
    held_pairs = torch.nonzero(is_held).squeeze(-1)
    with torch.no_grad():
        pred = torch.cat([_pair_forward(model, blocks, tables, globals_, block_idx[s], table_idx[s])
                          for s in held_pairs.split(config.batch)]) if len(held_pairs) else torch.zeros(0)
    truth = cycles[held_pairs]
    report = {"train_seconds": seconds, "epochs": epochs, "n_train": len(train_pairs), "n_heldout": len(held_pairs),
              "heldout_mape": float(((pred - truth).abs() / truth).mean()) if len(held_pairs) else float("nan"),
              "heldout_kendall_tau": kendall_tau(pred.numpy(), truth.numpy()) if len(held_pairs) > 1 else float("nan")}
    return StructuredSurrogate(model, row_keys, config), report
