"""DiffTune's surrogate: an Ithemal-style hierarchical LSTM.

A token LSTM reads each instruction (opcode, source operands, ``<MEM>`` operands
and their registers, destination); an instruction LSTM reads the block, each
instruction's embedding concatenated with its parameter vector; the final state
with the table's globals gives the predicted cycles. Trained with MAPE against the
engine's cycles on (block, sampled table) pairs.

Sized for 2 CPU cores: embeddings of 32 and hidden states of 64, and batches
grouped by block, so that the token LSTM runs once per block per step however
many tables the block was simulated under.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from difftune_pipeline.engine import mechanisms
from difftune_pipeline.engine.table import GLOBALS
from difftune_pipeline.model.sampling import PairBatch, PairFile, Pairs, Split
from difftune_pipeline.surrogates.base import FitConfig, Surrogate

PAD, UNK = "<PAD>", "<UNK>"
PARAM_SCALE = 10.0  # parameter values are fed divided by this
# Globals are fed divided by these (llvm-mca's two, then the extended model's).
GLOBAL_SCALES = {"dispatch_width": 10.0, "micro_op_buffer_size": 200.0} | {
    n: p.scale for n, p in mechanisms.PARAMETERS.items()
}
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
class LSTMConfig(FitConfig):
    embed: int = 32
    hidden: int = 64
    epochs: int = 20
    lr: float = 1e-3
    clip: float = 5.0
    blocks_per_step: int = 16


class HierarchicalLSTM(nn.Module):
    def __init__(self, vocab_size: int, n_params: int, embed: int, hidden: int, scale: float, n_globals: int = 2):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed, padding_idx=0)
        self.token_lstm = nn.LSTM(embed, hidden, batch_first=True)
        self.inst_lstm = nn.LSTM(hidden + n_params, hidden, batch_first=True)
        self.head = nn.Sequential(nn.Linear(hidden + n_globals, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.log_scale = float(np.log(scale))

    def embed_instructions(self, tok: torch.Tensor, tok_len: torch.Tensor) -> torch.Tensor:
        """[blocks, insts, tokens] -> [blocks, insts, hidden]."""
        nb, ni, nt = tok.shape
        flat_len = tok_len.reshape(-1).clamp(min=1).cpu()
        packed = pack_padded_sequence(
            self.embedding(tok.reshape(nb * ni, nt)), flat_len, batch_first=True, enforce_sorted=False
        )
        _, (h, _) = self.token_lstm(packed)
        return h[-1].reshape(nb, ni, -1)

    def forward(
        self, inst: torch.Tensor, params: torch.Tensor, n_insts: torch.Tensor, globals_: torch.Tensor
    ) -> torch.Tensor:
        """inst [B, I, H], params [B, I, P] (scaled), n_insts [B], globals [B, G] (scaled) -> cycles [B]."""
        packed = pack_padded_sequence(
            torch.cat([inst, params], dim=-1), n_insts.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False
        )
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
    def build(cls, blocks: list, vocab: Vocabulary, row_index: dict[str, int]) -> BlockTensors:
        """From engine blocks (opcodes, asm lines, row keys)."""
        blocks = [(list(b.opcodes), list(b.asm), list(b.row_keys)) for b in blocks]
        ni = max(len(b[0]) for b in blocks)
        tok = torch.zeros(len(blocks), ni, MAX_TOKENS, dtype=torch.long)
        tok_len = torch.zeros(len(blocks), ni, dtype=torch.long)
        rows = torch.full((len(blocks), ni), len(row_index), dtype=torch.long)
        for b, (opcodes, asm, keys) in enumerate(blocks):
            for i, (op, line, key) in enumerate(zip(opcodes, asm, keys)):
                ids = [vocab(t) for t in tokens(op, line)]
                tok[b, i, : len(ids)] = torch.tensor(ids)
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


def vocabulary(blocks: list) -> Vocabulary:
    return Vocabulary([t for b in blocks for op, line in zip(b.opcodes, b.asm) for t in tokens(op, line)])


class LSTMSurrogate(Surrogate):
    """The hierarchical LSTM with its vocabulary (from the blocks it is created over)."""

    kind = "ithemal"
    settings_field = "lstm"

    def __init__(
        self, row_keys: list[str], config: LSTMConfig, vocab: Vocabulary, model=None, globals_=GLOBALS, mechanisms=()
    ):
        super().__init__(row_keys, config, model, globals_, mechanisms)
        self.vocab = vocab
        self.global_scale = torch.tensor([GLOBAL_SCALES[g] for g in self.globals])

    @property
    def epochs(self) -> int:
        return self.config.epochs

    @property
    def clip(self) -> float:
        return self.config.clip

    @classmethod
    def create(
        cls,
        row_keys: list[str],
        config: LSTMConfig,
        blocks: list,
        resources: list[dict],
        globals_=GLOBALS,
        mechanisms=(),
    ) -> LSTMSurrogate:
        return cls(row_keys, config, vocabulary(blocks), globals_=globals_, mechanisms=mechanisms)

    def inputs(self, blocks: list) -> BlockTensors:
        return BlockTensors.build(blocks, self.vocab, self.row_index)

    def build_model(self, pairs: Pairs, split: Split) -> HierarchicalLSTM:
        return HierarchicalLSTM(
            len(self.vocab.words),
            pairs.tables.shape[2],
            self.config.embed,
            self.config.hidden,
            split.train_median,
            len(self.globals),
        )

    def order(self, inputs: BlockTensors) -> np.ndarray:
        """None before the block: a block's pairs lie together, as ``batches`` reads them."""
        return np.zeros(len(inputs.n_insts), dtype=np.int64)

    def batches(self, inputs: BlockTensors, train: PairFile):
        """Groups of ``blocks_per_step`` blocks with all their pairs: the token LSTM
        runs once per block per step however many tables it was simulated under."""
        counts = train.block_counts(len(inputs.n_insts))
        offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
        blocks, step = np.nonzero(counts)[0], self.config.blocks_per_step

        def epoch(rng: np.random.Generator):
            order = rng.permutation(blocks)
            for start in range(0, len(order), step):
                yield train.read([(int(offsets[b]), int(counts[b])) for b in order[start : start + step]])

        return epoch

    def forward(self, inputs: BlockTensors, pairs: Pairs, samples: PairBatch) -> torch.Tensor:
        """Predictions for samples, running the token LSTM once per distinct block."""
        device = self.device
        blocks, inverse = torch.unique(samples.block_idx, return_inverse=True)
        sel = inputs.select(blocks)
        inst = self.model.embed_instructions(sel.tok.to(device), sel.tok_len)[inverse.to(device)]
        rows = sel.rows[inverse]
        tables = samples.table_idx
        params = pairs.tables[tables.unsqueeze(1), rows] / PARAM_SCALE
        g = pairs.globals_[tables] / self.global_scale
        return self.model(inst, params.to(device), sel.n_insts[inverse], g.to(device))

    def predict_fn(self, inputs: BlockTensors):
        with torch.no_grad():
            inst = self.model.embed_instructions(inputs.tok, inputs.tok_len)

        def predict(matrix: torch.Tensor, globals_: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
            params = param_inputs(matrix, inputs.rows[idx])
            g = (globals_ / self.global_scale).expand(len(idx), -1)
            return self.model(inst[idx], params, inputs.n_insts[idx], g)

        return predict

    def checkpoint(self) -> dict:
        return {
            "vocab": self.vocab.words,
            "n_params": self.model.inst_lstm.input_size - self.config.hidden,
            "log_scale": self.model.log_scale,
        }

    @classmethod
    def from_checkpoint(cls, data: dict) -> LSTMSurrogate:
        config = LSTMConfig(**data["config"])
        vocab = Vocabulary(data["vocab"])
        globals_ = tuple(data.get("globals", GLOBALS))
        model = HierarchicalLSTM(len(vocab.words), data["n_params"], config.embed, config.hidden, 1.0, len(globals_))
        model.log_scale = data["log_scale"]
        return cls(data["rows"], config, vocab, model, globals_, data.get("mechanisms", ()))
