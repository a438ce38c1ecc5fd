"""A block's dependency graph and its loop-carried recurrence: one definition,
read by the hardware features and differentiated through by the structured
surrogate.

Edges come from LLVM's instruction descriptions (``Block.operands``). The
recurrence is a max-plus longest path over the graph unrolled for ``UNROLL``
iterations, read as the fastest growth of an instruction's start time; an edge
costs the producer's latency, less the consumer's ReadAdvance when it is a
register operand (not an address). Store→load edges
are timed only under the extended model's memory mechanism (llvm-mca assumes no
aliasing), from the addresses a harness model recorded: once the store's data
is ready (a plain store's the cycle after it issues, a read-modify-write's in
its last cycle: its latency less one, at least one) plus the store-to-load forwarding latency,
or at its latency plus the failed-forwarding penalty when no one store access
holds all the bytes the load reads (the engine counts that penalty from the
store's retirement).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import torch

UNROLL = 8  # iterations unrolled to measure the loop-carried recurrence
# Register forms of moves (MOV, MOVZX, MOVSX, MOVAPS, ... and their VEX forms): a
# core may rename some away, so the floor gives every one of them no cycle.
_REGISTER_MOVE = re.compile(r"^V?MOV\w*rr\w*$")


@dataclass(frozen=True)
class Edge:
    src: int
    dst: int
    distance: int  # 0: within an iteration; 1: from the previous iteration
    kind: str  # "register" | "address" (a register of the address) | "memory" (store -> load)
    forwarded: bool = True  # memory: the store holds every byte the load reads there
    loaded: bool = False  # memory: the store also loads (a read-modify-write): its data comes in its last cycle


def dependencies(operands: list[dict]) -> list[Edge]:
    """Read-after-write edges: each read depends on the last write before it in
    the block, or, when none, on the last write of the previous iteration.
    Memory: a load depends on the last store through the same address expression."""
    edges = []
    for j, op in enumerate(operands):
        address_regs = set(op["address"].split(",")) if op["address"] else set()
        for reg in op["reads"]:
            src = _last(operands, j, lambda o, reg=reg: reg in o["writes"])
            if src is not None:
                edges.append(Edge(src[0], j, src[1], "address" if reg in address_regs else "register"))
        if op["may_load"] and op["address"]:
            src = _last(operands, j, lambda o, address=op["address"]: o["may_store"] and o["address"] == address)
            if src is not None:
                edges.append(Edge(src[0], j, src[1], "memory", True, operands[src[0]]["may_load"]))
    return edges


def without_stack_updates(operands: list[dict]) -> list[dict]:
    """The operands as the extended model's stack engine leaves them: the stack
    operations the engine marks (push and pop; LLVM gives call and ret no RSP
    write, so they never fed a chain) write no RSP, and read the RSP of the last
    explicit write (``addq $8, %rsp``, ``leaq -8(%r10), %rsp``)."""
    return [{**op, "writes": [r for r in op["writes"] if r != "RSP"]} if op["stack_op"] else op for op in operands]


def with_partial_merges(operands: list[dict]) -> list[dict]:
    """The operands as the extended model's partial-register mechanism times
    them: a write of a register's low 8 or 16 bits waits for the register's last
    writer (``merges``, the engine's own rule)."""
    return [{**op, "reads": sorted({*op["reads"], *op["merges"]})} if op["merges"] else op for op in operands]


def memory_dependencies(accesses: list[tuple], n: int) -> list[Edge]:
    """Store→load edges from recorded accesses ``(iteration, instruction, address,
    bytes, store)``: each load of the second iteration depends on the last store
    before it (this iteration, else the previous one) whose bytes it reads;
    ``forwarded`` when that store holds all of them, ``loaded`` when the store's
    instruction also loads."""
    stores = {k: [(i, a, w) for it, i, a, w, st in accesses if it == k and st] for k in (0, 1)}
    loading = {i for _, i, _, _, st in accesses if not st}
    edges = set()
    for it, j, address, width, store in accesses:
        if it != 1 or store:
            continue
        for k, distance in ((1, 0), (0, 1)):
            hits = [
                (i, a, w) for i, a, w in stores[k] if (i < j or distance) and a < address + width and address < a + w
            ]
            if hits:
                i = max(h[0] for h in hits)
                whole = any(a <= address and address + width <= a + w for h, a, w in hits if h == i)
                edges.add(Edge(i, j, distance, "memory", whole, i in loading))
                break
    return sorted(edges, key=lambda e: (e.dst, e.src))


PAGE = 4096


def pages_per_iteration(accesses: list[tuple]) -> float:
    """New 4 KiB pages a block reaches an iteration, as the engine's page walks
    count them (``memory_unit.cpp``): of the streams (an instruction's k-th access)
    whose recorded addresses keep one stride of less than a page, the widest stride
    over a page. Streams of one stride sweep the same pages, so they count once."""
    streams: dict[tuple[int, int], list[int]] = {}
    seen: dict[tuple[int, int], int] = {}
    for it, instr, address, _, _ in sorted(accesses, key=lambda a: (a[0], a[1])):  # stable: k as recorded
        k = seen.get((it, instr), 0)
        seen[(it, instr)] = k + 1
        streams.setdefault((instr, k), []).append(address)
    iterations = 1 + max((a[0] for a in accesses), default=0)
    rate = 0.0
    for addresses in streams.values():
        steps = {b - a for a, b in zip(addresses, addresses[1:])}
        if iterations >= 2 and len(addresses) == iterations and len(steps) == 1 and 0 < abs(next(iter(steps))) < PAGE:
            rate = max(rate, abs(next(iter(steps))) / PAGE)
    return rate


def _last(operands: list[dict], j: int, writes) -> tuple[int, int] | None:
    for i in range(j - 1, -1, -1):
        if writes(operands[i]):
            return i, 0
    for i in range(len(operands) - 1, j - 1, -1):
        if writes(operands[i]):
            return i, 1
    return None


@dataclass
class BatchGraph:
    """The timed edges of a batch of blocks padded to ``width`` instructions, as
    flat indices into the [B * width] instructions (sparse: a block has few edges)."""

    src: torch.Tensor  # [E] producer (b * width + i)
    dst: torch.Tensor  # [E] consumer (b * width + j)
    carried: torch.Tensor  # [E] bool: from the previous iteration
    register: torch.Tensor  # [E] bool: a register operand (ReadAdvance applies), not an address
    memory: torch.Tensor  # [E] bool: store -> load, forwarded (forwarding latency applies)
    failed: torch.Tensor  # [E] bool: store -> load, not forwarded (the failed-forwarding penalty applies)
    loaded: torch.Tensor  # [E] bool: store -> load from a store that also loads (a read-modify-write)
    depth: int  # the longest within-iteration chain of the batch, in edges
    width: int


@dataclass
class BlockGraphs:
    """The timed dependency graphs of many blocks; ``select`` makes a batch."""

    edges: list[torch.Tensor]  # per block [E, 7]: src, dst, carried, register, forwarded, failed, loaded
    sizes: list[int]  # instructions per block
    depth: torch.Tensor  # per block: its longest within-iteration chain, in edges

    @classmethod
    def build(cls, edges: list[list[Edge]], sizes: list[int], memory: bool = False) -> BlockGraphs:
        """From each block's ``dependencies`` and instruction count; store→load
        edges are timed when ``memory``."""
        timed_edges, depth = [], []
        for deps, n in zip(edges, sizes):
            timed = [e for e in deps if memory or e.kind != "memory"]
            timed_edges.append(
                torch.tensor(
                    [
                        [
                            e.src,
                            e.dst,
                            e.distance,
                            e.kind == "register",
                            *((e.forwarded, not e.forwarded, e.loaded) if e.kind == "memory" else (0, 0, 0)),
                        ]
                        for e in timed
                    ],
                    dtype=torch.long,
                ).reshape(-1, 7)
            )
            longest = [0] * n
            for e in sorted((e for e in timed if e.distance == 0), key=lambda e: e.dst):
                longest[e.dst] = max(longest[e.dst], longest[e.src] + 1)
            depth.append(max(longest, default=0))
        return cls(timed_edges, list(sizes), torch.tensor(depth, dtype=torch.long))

    def select(self, idx: list[int]) -> BatchGraph:
        width = max(1, max(self.sizes[i] for i in idx))
        e = torch.cat([self.edges[i] for i in idx]) if idx else torch.zeros(0, 7, dtype=torch.long)
        counts = torch.tensor([len(self.edges[i]) for i in idx], dtype=torch.long)
        e[:, :2] += (torch.arange(len(idx)) * width).repeat_interleave(counts).unsqueeze(1)  # block b's at b * width
        return BatchGraph(
            e[:, 0],
            e[:, 1],
            e[:, 2].bool(),
            e[:, 3].bool(),
            e[:, 4].bool(),
            e[:, 5].bool(),
            e[:, 6].bool(),
            int(self.depth[idx].max()),
            width,
        )


def latency_bounds(
    latency: torch.Tensor,
    advance: torch.Tensor,
    graph: BatchGraph,
    forward: torch.Tensor | float = 0.0,
    fail: torch.Tensor | float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(critical path of one iteration, loop-carried cycles per iteration) of each
    block with unlimited resources; ``latency`` and ``advance`` are [B, width]
    (padding zero), ``forward`` the store-to-load forwarding latency and ``fail``
    the failed-forwarding penalty ([B] or a number). Differentiable almost everywhere."""
    flat_lat = latency.reshape(-1)

    def per_edge(value: torch.Tensor | float) -> torch.Tensor:
        v = torch.as_tensor(value, dtype=flat_lat.dtype).expand(latency.shape[0])
        return v.repeat_interleave(graph.width)[graph.dst]

    extra = per_edge(forward) * graph.memory + per_edge(fail) * graph.failed
    # a forwarded store feeds the load when its data is ready (memory_unit.cpp):
    # a read-modify-write's in its last cycle, a plain store's (a register or an
    # immediate) the cycle after it issues
    last = torch.where(graph.loaded, (flat_lat[graph.src] - 1.0).clamp(min=1.0), torch.ones_like(flat_lat[graph.src]))
    produced = torch.where(graph.memory, last, flat_lat[graph.src])
    weight = torch.relu(produced + extra - advance.reshape(-1)[graph.dst] * graph.register)  # [E]
    # the within-iteration and the carried edges, each selected once: relax runs
    # UNROLL times the longest chain per call
    same = (graph.dst[~graph.carried], graph.src[~graph.carried], weight[~graph.carried])
    carried = (graph.dst[graph.carried], graph.src[graph.carried], weight[graph.carried])

    def relax(into: torch.Tensor, times: torch.Tensor, edges: tuple) -> torch.Tensor:
        """max(into[j], times[i] + w(i, j)) over ``edges`` (dst, src, weight)."""
        dst, src, w = edges
        return into.scatter_reduce(0, dst, times[src] + w, "amax")

    # Start times, iteration by iteration: what the previous iteration feeds in,
    # then max-plus relaxation along the within-iteration edges, as many rounds as
    # the longest chain has edges (exact for a DAG), vectorised over the batch.
    # The recurrence is how fast an instruction's start time grows once the first
    # iterations' transient is over, the fastest of the block: a block's finish
    # would hide a short recurrence behind a long chain for all UNROLL iterations.
    prev, starts = None, []
    for _ in range(UNROLL):
        base = torch.zeros_like(flat_lat)
        if prev is not None:
            base = relax(base, prev, carried)
        t = base
        for _ in range(graph.depth):
            t = relax(base, t, same)
        prev = t
        starts.append(prev.reshape(latency.shape))
    half = UNROLL // 2
    chain = (starts[0] + latency).amax(1)
    return chain, ((starts[-1] - starts[half - 1]) / (UNROLL - half)).amax(1).clamp(min=0.0)


def throughput_floors(blocks: list, issue_width: int | None) -> np.ndarray:
    """The fewest cycles an iteration of each block (engine ``Block``) can take under
    any table, a measurement far below which no CPU, and so no simulator, explains:
    its instructions at ``issue_width`` a cycle (a branch counted with the instruction
    before it, as macro-fusion issues them; none without a width), and its loop-carried
    register chain at one cycle an instruction, none for a register move (every one,
    the eliminable ones and MOVZX, MOVSX, ... as if renamed away), a zero idiom (it reads
    nothing) or a stack operation's update (the stack engine's); memory dependences
    left out. BHive measures `addq $8, %r15 ; cmpq %r13, %r15` (a one-cycle chain) at
    0.48 cycles an iteration on Haswell."""
    if not blocks:
        return np.zeros(0)
    operands = [without_stack_updates(b.operands) for b in blocks]
    graphs = BlockGraphs.build([dependencies(ops) for ops in operands], [len(ops) for ops in operands])
    batch = graphs.select(list(range(len(blocks))))
    latency = torch.zeros(len(blocks), batch.width, dtype=torch.float64)
    counted = np.zeros(len(blocks))
    for b, block in enumerate(blocks):
        for i, opcode in enumerate(block.opcodes):
            free = opcode.endswith("_PREFIX") or bool(_REGISTER_MOVE.match(opcode))
            latency[b, i] = 0.0 if free else 1.0
            counted[b] += not opcode.endswith("_PREFIX") and not (i > 0 and opcode.startswith("JCC"))
    _, carried = latency_bounds(latency, torch.zeros_like(latency), batch)
    issued = counted / issue_width if issue_width else np.zeros(len(blocks))
    return np.maximum(issued, carried.numpy())
