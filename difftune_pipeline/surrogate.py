"""The differentiable surrogate of the simulator: DiffTune's Ithemal-style
hierarchical LSTM.

A token LSTM reads each instruction (opcode, source operands, ``<MEM>`` operands
and their registers, destination); an instruction LSTM reads the block, each
instruction's embedding concatenated with its parameter vector; the final state
with the two globals gives the predicted cycles. Trained with MAPE against the
engine's cycles on (block, sampled table) pairs.

Sized for 2 CPU cores: embeddings of 32 and hidden states of 64, and batches
grouped by block, so that the token LSTM runs once per block per step however
many tables the block was simulated under.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

PAD, UNK = "<PAD>", "<UNK>"
PARAM_SCALE = 10.0                          # parameter values are fed divided by this
GLOBAL_SCALE = torch.tensor([10.0, 200.0])  # dispatch width, reorder buffer
MAX_TOKENS = 12


def tokens(opcode: str, asm: str) -> list[str]:
    """Ithemal-style tokens of one AT&T instruction: opcode, then its operands
    in AT&T order (sources first, destination last); memory operands become
    ``<MEM>`` followed by their registers."""
    parts = asm.split(None, 1)
    out = [opcode]
    if len(parts) < 2:
        return out
    depth, current, operands = 0, "", []
    for ch in parts[1]:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            operands.append(current.strip())
            current = ""
        else:
            current += ch
    operands.append(current.strip())
    for op in operands:
        if "(" in op or ":" in op:
            out += ["<MEM>"] + re.findall(r"%\w+", op)
        elif op.lstrip("*").startswith("%"):
            out.append(op.lstrip("*"))
        else:
            out.append("<IMM>")
    return out[:MAX_TOKENS]


class Vocabulary:
    def __init__(self, words: list[str]):
        self.words = [PAD, UNK] + sorted(set(words) - {PAD, UNK})
        self.index = {w: i for i, w in enumerate(self.words)}

    def __call__(self, word: str) -> int:
        return self.index.get(word, 1)


@dataclass
class SurrogateConfig:
    embed: int = 32
    hidden: int = 64
    epochs: int = 6
    lr: float = 1e-3
    clip: float = 5.0
    blocks_per_step: int = 16
    heldout_fraction: float = 0.1
    seed: int = 0
    threads: int = 2


class HierarchicalLSTM(nn.Module):
    def __init__(self, vocab_size: int, n_params: int, embed: int, hidden: int, scale: float):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed, padding_idx=0)
        self.token_lstm = nn.LSTM(embed, hidden, batch_first=True)
        self.inst_lstm = nn.LSTM(hidden + n_params, hidden, batch_first=True)
        self.head = nn.Sequential(nn.Linear(hidden + 2, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.log_scale = float(np.log(scale))

    def embed_instructions(self, tok: torch.Tensor, tok_len: torch.Tensor) -> torch.Tensor:
        """[blocks, insts, tokens] -> [blocks, insts, hidden]."""
        nb, ni, nt = tok.shape
        flat_len = tok_len.reshape(-1).clamp(min=1).cpu()
        packed = pack_padded_sequence(self.embedding(tok.reshape(nb * ni, nt)), flat_len,
                                      batch_first=True, enforce_sorted=False)
        _, (h, _) = self.token_lstm(packed)
        return h[-1].reshape(nb, ni, -1)

    def forward(self, inst: torch.Tensor, params: torch.Tensor, n_insts: torch.Tensor,
                globals_: torch.Tensor) -> torch.Tensor:
        """inst [B, I, H], params [B, I, P] (scaled), n_insts [B], globals [B, 2] (scaled) -> cycles [B]."""
        packed = pack_padded_sequence(torch.cat([inst, params], dim=-1), n_insts.clamp(min=1).cpu(),
                                      batch_first=True, enforce_sorted=False)
        _, (h, _) = self.inst_lstm(packed)
        out = self.head(torch.cat([h[-1], globals_], dim=-1)).squeeze(-1)
        return torch.exp(out.clamp(-20, 20) + self.log_scale)


@dataclass
class BlockTensors:
    """Blocks as padded tensors: tokens, token counts, instruction counts, and
    each instruction's row in the parameter space (``n_rows`` = no row)."""
    tok: torch.Tensor
    tok_len: torch.Tensor
    n_insts: torch.Tensor
    rows: torch.Tensor

    @classmethod
    def build(cls, blocks: list[tuple[list[str], list[str], list[str]]], vocab: Vocabulary,
              row_index: dict[str, int]) -> BlockTensors:
        """``blocks``: (opcodes, asm lines, row keys) per block."""
        ni = max(len(b[0]) for b in blocks)
        tok = torch.zeros(len(blocks), ni, MAX_TOKENS, dtype=torch.long)
        tok_len = torch.zeros(len(blocks), ni, dtype=torch.long)
        rows = torch.full((len(blocks), ni), len(row_index), dtype=torch.long)
        for b, (opcodes, asm, keys) in enumerate(blocks):
            for i, (op, line, key) in enumerate(zip(opcodes, asm, keys)):
                ids = [vocab(t) for t in tokens(op, line)]
                tok[b, i, :len(ids)] = torch.tensor(ids)
                tok_len[b, i] = len(ids)
                rows[b, i] = row_index.get(key, len(row_index))
        n_insts = torch.tensor([len(b[0]) for b in blocks], dtype=torch.long)
        return cls(tok, tok_len, n_insts, rows)

    def select(self, idx: torch.Tensor) -> BlockTensors:
        ni = int(self.n_insts[idx].max())
        return BlockTensors(self.tok[idx, :ni], self.tok_len[idx, :ni], self.n_insts[idx], self.rows[idx, :ni])


def param_inputs(matrix: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Per-instruction parameter vectors: matrix [rows, P] (a zero row appended
    for instructions outside the space) gathered by rows [B, I] -> [B, I, P]."""
    padded = torch.cat([matrix, torch.zeros(1, matrix.shape[1], dtype=matrix.dtype)], dim=0)
    return padded[rows] / PARAM_SCALE


def mape_loss(pred: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    return ((pred - truth).abs() / truth).mean()


@dataclass
class TrainingData:
    blocks: BlockTensors
    tables: torch.Tensor   # [T, rows + 1, P] raw parameter values; the last row is zeros (no row)
    globals_: torch.Tensor  # [T, 2]
    block_idx: torch.Tensor  # [N]
    table_idx: torch.Tensor  # [N]
    cycles: torch.Tensor     # [N]


class Surrogate:
    """A trained model with what it needs to predict: vocabulary and row index."""

    def __init__(self, model: HierarchicalLSTM, vocab: Vocabulary, row_keys: list[str], config: SurrogateConfig):
        self.model, self.vocab, self.row_keys, self.config = model, vocab, row_keys, config
        self.row_index = {k: i for i, k in enumerate(row_keys)}

    def save(self, path) -> None:
        torch.save({"state": self.model.state_dict(), "vocab": self.vocab.words, "rows": self.row_keys,
                    "config": asdict(self.config), "n_params": self.model.inst_lstm.input_size - self.config.hidden,
                    "log_scale": self.model.log_scale}, path)

    @classmethod
    def load(cls, path) -> Surrogate:
        data = torch.load(path, weights_only=False)
        config = SurrogateConfig(**data["config"])
        vocab = Vocabulary(data["vocab"])
        model = HierarchicalLSTM(len(vocab.words), data["n_params"], config.embed, config.hidden, 1.0)
        model.load_state_dict(data["state"])
        model.log_scale = data["log_scale"]
        model.eval()
        return cls(model, vocab, data["rows"], config)

    def tensors(self, blocks) -> BlockTensors:
        return BlockTensors.build(blocks, self.vocab, self.row_index)

    def predictor(self, blocks: BlockTensors):
        """``predict(matrix, globals, idx)``: cycles of blocks ``idx`` under one table
        (for tuning; the model is frozen, the token LSTM runs once)."""
        self.model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        with torch.no_grad():
            inst = self.model.embed_instructions(blocks.tok, blocks.tok_len)

        def predict(matrix: torch.Tensor, globals_: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
            params = param_inputs(matrix, blocks.rows[idx])
            return self.model(inst[idx], params, blocks.n_insts[idx], (globals_ / GLOBAL_SCALE).expand(len(idx), 2))
        return predict


def train(data: TrainingData, vocab: Vocabulary, row_keys: list[str], config: SurrogateConfig,
          log=print) -> tuple[Surrogate, dict]:
    """Train on the pairs of all but a held-out fraction of blocks; report the
    held-out fidelity (MAPE and Kendall tau against the engine)."""
    from difftune_pipeline.evaluate import kendall_tau

    torch.manual_seed(config.seed)
    torch.set_num_threads(config.threads)
    n_blocks = data.blocks.tok.shape[0]
    rng = np.random.default_rng(config.seed)
    heldout_blocks = set(rng.choice(n_blocks, size=max(1, int(n_blocks * config.heldout_fraction)), replace=False).tolist())
    is_heldout = torch.tensor([int(b) in heldout_blocks for b in data.block_idx.tolist()])
    model = HierarchicalLSTM(len(vocab.words), data.tables.shape[2], config.embed, config.hidden,
                             float(data.cycles[~is_heldout].float().median()))
    surrogate = Surrogate(model, vocab, row_keys, config)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    train_blocks = np.array(sorted(set(range(n_blocks)) - heldout_blocks))
    by_block: dict[int, list[int]] = {}
    for i, (b, h) in enumerate(zip(data.block_idx.tolist(), is_heldout.tolist())):
        if not h:
            by_block.setdefault(b, []).append(i)
    t0 = time.perf_counter()
    for epoch in range(config.epochs):
        model.train()
        order = rng.permutation(train_blocks)
        losses = []
        for start in range(0, len(order), config.blocks_per_step):
            group = [int(b) for b in order[start:start + config.blocks_per_step] if int(b) in by_block]
            if not group:
                continue
            samples = torch.tensor([i for b in group for i in by_block[b]])
            loss = mape_loss(_forward(model, data, samples), data.cycles[samples].float())
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), config.clip)
            optimizer.step()
            losses.append(loss.item())
        log(f"surrogate epoch {epoch + 1}/{config.epochs}: train MAPE {100 * np.mean(losses):.2f}%")
    seconds = time.perf_counter() - t0
    model.eval()
    held = torch.nonzero(is_heldout).squeeze(-1)
    with torch.no_grad():
        pred = torch.cat([_forward(model, data, held[s:s + 4096]) for s in range(0, len(held), 4096)]) if len(held) else torch.zeros(0)
    truth = data.cycles[held].float()
    report = {
        "train_seconds": seconds, "n_train": int((~is_heldout).sum()), "n_heldout": int(len(held)),
        "heldout_mape": float(mape_loss(pred, truth)) if len(held) else float("nan"),
        "heldout_kendall_tau": kendall_tau(pred.numpy(), truth.numpy()) if len(held) > 1 else float("nan"),
    }
    return surrogate, report


def _forward(model: HierarchicalLSTM, data: TrainingData, samples: torch.Tensor) -> torch.Tensor:
    """Predictions for samples, running the token LSTM once per distinct block."""
    blocks, inverse = torch.unique(data.block_idx[samples], return_inverse=True)
    sel = data.blocks.select(blocks)
    inst = model.embed_instructions(sel.tok, sel.tok_len)[inverse]
    rows = sel.rows[inverse]
    tables = data.table_idx[samples]
    params = data.tables[tables.unsqueeze(1), rows] / PARAM_SCALE
    g = data.globals_[tables] / GLOBAL_SCALE
    return model(inst, params, sel.n_insts[inverse], g)
