"""The structured surrogate's inputs per block, as the extended model's
mechanisms time them: the rows of its instructions, its dependency graph, its
static hardware features and what its front end and drains read."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from difftune_pipeline.engine.extended import renamed_moves
from difftune_pipeline.model.graph import (
    BatchGraph,
    BlockGraphs,
    dependencies,
    memory_dependencies,
    pages_per_iteration,
    with_partial_merges,
    without_stack_updates,
)

STATIC = ["n_insts", "loads", "stores", "regs_read", "regs_written", "memory_deps"]
LOCK_PREFIX = "LOCK_PREFIX"  # the row of a lock prefix LLVM disassembles as an instruction of its own
DRAINS = ("zero_shift_penalty", "lock_penalty", "x87_assist_penalty")  # the globals of Batch.drains' columns


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
    chase: torch.Tensor  # [B, N] 1.0 where a load takes the short path of a pointer chase
    slow: torch.Tensor  # [B, N] 1.0 where an LEA takes the slow path (under slow_lea)
    renamed: torch.Tensor  # [B, N] 1.0 where a move is renamed away (under move_elimination)
    front: torch.Tensor  # [B, 3] bytes, decoded instructions, instructions
    drains: torch.Tensor  # [B, 3] instructions waiting for a zero-count shift's assist, locked ones, x87 faults
    walks: torch.Tensor  # [B] new pages reached an iteration (each a page walk)


@dataclass
class StructuredBlocks:
    """Blocks with their dependency graphs; ``select`` makes a batch."""

    rows: list[torch.Tensor]
    graphs: BlockGraphs
    static: torch.Tensor
    n_insts: torch.Tensor
    micro: list[torch.Tensor]
    macro: list[torch.Tensor]
    chase: list[torch.Tensor]
    slow: list[torch.Tensor]
    renamed: list[torch.Tensor]
    front: torch.Tensor
    drains: torch.Tensor
    walks: torch.Tensor

    @classmethod
    def build(cls, blocks: list, row_index: dict[str, int], mechanisms=()) -> StructuredBlocks:
        """The graph as the extended model's ``mechanisms`` time it: under ``memory``
        store→load edges come from each block's recorded accesses, timed; under
        ``stack_engine`` no chain runs through RSP from push and pop (the engine's
        stack operations); under ``partial_register`` a partial write reads what it
        merges into; under ``locked`` the lock prefix LLVM disassembles as an
        instruction of its own does not execute (the engine eliminates it); under
        ``slow_lea`` an LEA of three components takes the slow path; under
        ``move_elimination`` a register move is renamed away."""
        memory, locked, slow_lea = "memory" in mechanisms, "locked" in mechanisms, "slow_lea" in mechanisms
        rows, edges, static, micro, macro, chase, slow, renamed, front, drains, walks = ([] for _ in range(11))
        for block in blocks:
            ops = without_stack_updates(block.operands) if "stack_engine" in mechanisms else block.operands
            if "partial_register" in mechanisms:
                ops = with_partial_merges(ops)
            none = len(row_index)  # the zero row: no latency, µops or ports
            keys = ["" if locked and k == LOCK_PREFIX else k for k in block.row_keys]
            rows.append(torch.tensor([row_index.get(k, none) for k in keys], dtype=torch.long))
            deps = dependencies(ops)
            if memory and block.accesses:
                deps = [e for e in deps if e.kind != "memory"] + memory_dependencies(block.accesses, len(ops))
            walks.append(pages_per_iteration(block.accesses) if memory and block.accesses else 0.0)
            edges.append(deps)
            fe = block.front_end or [(1, 0, False)] * len(ops)
            micro.append(torch.tensor([m for _, m, _ in fe], dtype=torch.float32))
            macro.append(torch.tensor([float(f) for _, _, f in fe], dtype=torch.float32))
            chase.append(torch.tensor([float(o["pointer_chase"]) for o in ops], dtype=torch.float32))
            slow.append(torch.tensor([float(slow_lea and o["slow_lea"]) for o in ops], dtype=torch.float32))
            moves = renamed_moves(block) if "move_elimination" in mechanisms else [False] * len(ops)
            renamed.append(torch.tensor(moves, dtype=torch.float32))
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
            chase,
            slow,
            renamed,
            torch.tensor(front, dtype=torch.float32).reshape(-1, 3),
            torch.tensor(drains, dtype=torch.float32).reshape(-1, len(DRAINS)),
            torch.tensor(walks, dtype=torch.float32),
        )

    def select(self, idx: torch.Tensor) -> Batch:
        idx = idx.tolist()
        graph = self.graphs.select(idx)
        rows = torch.full((len(idx), graph.width), -1, dtype=torch.long)
        micro, macro, chase, slow, renamed = (torch.zeros(len(idx), graph.width) for _ in range(5))
        for b, i in enumerate(idx):
            rows[b, : len(self.rows[i])] = self.rows[i]
            micro[b, : len(self.micro[i])] = self.micro[i]
            macro[b, : len(self.macro[i])] = self.macro[i]
            chase[b, : len(self.chase[i])] = self.chase[i]
            slow[b, : len(self.slow[i])] = self.slow[i]
            renamed[b, : len(self.renamed[i])] = self.renamed[i]
        return Batch(
            rows,
            graph,
            self.static[idx],
            micro,
            macro,
            chase,
            slow,
            renamed,
            self.front[idx],
            self.drains[idx],
            self.walks[idx],
        )
