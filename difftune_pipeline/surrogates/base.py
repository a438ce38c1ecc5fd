"""What every surrogate shares: the training pairs, one held-out split, one fit
loop, one MAPE, one save/load and one predictor for tuning. A model supplies
only what is its own: its inputs per block, its network, its forward pass over
(block, table) pairs, and how it batches them.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from difftune_pipeline.determinism import deterministic, seed_of
from difftune_pipeline.engine.table import GLOBALS
from difftune_pipeline.model.metrics import kendall_tau
from difftune_pipeline.model.sampling import PairBatch, PairFile, Pairs, Split

# predict(table matrix [rows, P], globals [G], block indices) -> cycles of those blocks under the table
Predict = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
# epoch(rng) -> the batches of one epoch, each read from its file when it is reached
Epoch = Callable[[np.random.Generator], Iterator[PairBatch]]


@dataclass
class FitConfig:
    """What every surrogate's training reads besides its own fields."""

    lr: float = 1e-3
    heldout_fraction: float = 0.1  # of the blocks, never trained on
    seed: int = 0  # mixed with the training data's fingerprint (determinism.seed_of)
    threads: int = 2  # torch's threads while learning, fixed so the bits are too


DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu")  # devices that hold data ("meta" holds none)


def training_device(name: str | None = None) -> torch.device:
    """Where a surrogate trains: ``name`` (else ``DIFFTUNE_TORCH_DEVICE``) when set,
    else the GPU when torch sees one, else the CPU. Tuning and checkpoints stay on the CPU."""
    name = os.environ.get("DIFFTUNE_TORCH_DEVICE", "") if name is None else name
    name = name or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
        if device.type not in DEVICE_TYPES:
            raise RuntimeError(f"a {device.type} device holds no data")
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as exc:
        raise ValueError(
            f"DIFFTUNE_TORCH_DEVICE={name!r} cannot be used here ({str(exc).splitlines()[0]}): "
            f"cpu, or a GPU torch sees (cuda, cuda:N)"
        ) from None
    return device


def moved(value, device: torch.device):
    """``value`` with every tensor in it (dataclass fields, lists, tuples) on ``device``."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(
            value, **{f.name: moved(getattr(value, f.name), device) for f in dataclasses.fields(value)}
        )
    if isinstance(value, (list, tuple)):
        return type(value)(moved(v, device) for v in value)
    return value


def relative_error(pred: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """|pred - truth| / truth per element."""
    return (pred - truth).abs() / truth


def mape_loss(pred: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """Mean absolute percentage error (a fraction): the loss of training and tuning."""
    return relative_error(pred, truth).mean()


def heldout_blocks(n_blocks: int, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """[blocks] bool: a random ``fraction`` of the blocks (at least one), whose pairs are never trained on."""
    held = np.zeros(n_blocks, dtype=bool)
    held[rng.choice(n_blocks, size=max(1, int(n_blocks * fraction)), replace=False)] = True
    return held


class Surrogate:
    """A differentiable model of the engine: cycles of a block under a parameter table.

    A subclass names itself (``kind``), takes a ``FitConfig`` of its own, and
    supplies the methods marked *model*; the rest is shared.
    """

    kind: ClassVar[str]
    settings_field: ClassVar[str]  # the field of ``config.Settings`` that holds its configuration
    epochs: int  # the training budget: whole passes over the trained-on pairs
    clip: float | None = None  # gradient-norm clipping
    eval_batch: int = 4096  # pairs per forward pass when measuring fidelity

    def __init__(self, row_keys: list[str], config, model: nn.Module | None = None, globals_=GLOBALS, mechanisms=()):
        self.row_keys, self.config, self.model = list(row_keys), config, model
        self.row_index = {k: i for i, k in enumerate(self.row_keys)}
        self.globals = tuple(globals_)  # the table's globals it reads, in ParamSpace order
        self.mechanisms = tuple(mechanisms)  # the extended model's, of the tables it learns: what a block's inputs hold

    # ---- model --------------------------------------------------------------
    def inputs(self, blocks: list):
        """The per-block tensors the forward pass reads, for engine ``blocks``."""
        raise NotImplementedError

    def build_model(self, pairs: Pairs, split: Split) -> nn.Module:
        """A fresh network (``split``: the pairs it will be trained on and held out)."""
        raise NotImplementedError

    def order(self, inputs) -> np.ndarray:
        """[blocks] the key the trained-on pairs are ordered by before the block
        and the table (``batches`` reads that order)."""
        raise NotImplementedError

    def forward(self, inputs, pairs: Pairs, batch: PairBatch) -> torch.Tensor:
        """Predicted cycles of the pairs of ``batch``."""
        raise NotImplementedError

    def batches(self, inputs, train: PairFile) -> Epoch:
        """How the trained-on pairs (a file in ``order``) are batched: ``epoch(rng)``
        yields the batches of one epoch, read from the file as they are needed;
        what does not change between epochs is worked out here, once."""
        raise NotImplementedError

    def predict_fn(self, inputs) -> Predict:
        """``predict`` over ``inputs`` with the model frozen."""
        raise NotImplementedError

    def checkpoint(self) -> dict:
        """What, besides the weights, rebuilds the network."""
        raise NotImplementedError

    @classmethod
    def from_checkpoint(cls, data: dict) -> Surrogate:
        raise NotImplementedError

    # ---- shared -------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        """Where the model is: inputs are assembled on the CPU and moved there."""
        return next(self.model.parameters()).device

    def fit(self, blocks: list, pairs: Pairs, log=print, inputs_id: str = "") -> dict:
        """Train on the pairs of all but a held-out fraction of the blocks (the
        engine ``blocks`` of ``pairs.block_ids``); report the held-out fidelity
        (MAPE and Kendall tau against the engine). The pairs are written, split
        and ordered, to files in a temporary folder and streamed from there a
        batch at a time. Trains on ``training_device()``; the model is back on the
        CPU when it returns. The same pairs, ``inputs_id`` (what they were read
        from) and configuration give the same weights (``determinism``)."""
        config = self.config
        device = training_device()
        seed = seed_of(config.seed, inputs_id)
        with deterministic(config.threads):
            torch.manual_seed(seed)
            rng = np.random.default_rng(seed)
            inputs = self.inputs(blocks)
            held = heldout_blocks(len(pairs.block_ids), config.heldout_fraction, rng)
            with tempfile.TemporaryDirectory(prefix="difftune-pairs-") as folder:
                split = pairs.split(held, self.order(inputs), Path(folder))
                try:
                    return self._fit(inputs, pairs, split, device, rng, log)
                finally:
                    split.train.close()
                    split.held.close()

    def _fit(self, inputs, pairs: Pairs, split: Split, device, rng: np.random.Generator, log) -> dict:
        self.model = self.build_model(pairs, split).to(device)
        optimizer = torch.optim.Adam(self.model.parameters(), lr=self.config.lr)
        epoch = self.batches(inputs, split.train)
        t0 = time.perf_counter()
        for epoch_no in range(1, self.epochs + 1):
            self.model.train()
            losses = []
            for batch in epoch(rng):
                loss = mape_loss(self.forward(inputs, pairs, batch), batch.cycles.to(device))
                optimizer.zero_grad()
                loss.backward()
                if self.clip is not None:
                    nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
                optimizer.step()
                losses.append(loss.item())
            log(f"{self.kind} surrogate epoch {epoch_no}: train MAPE {100 * np.mean(losses):.2f}%")
        seconds = time.perf_counter() - t0
        self.model.to("cpu").eval()
        preds, truths = [], []
        with torch.no_grad():
            for batch in split.held.pieces(self.eval_batch):
                preds.append(self.forward(inputs, pairs, batch))
                truths.append(batch.cycles)
        pred, truth = (torch.cat(x) if x else torch.zeros(0) for x in (preds, truths))
        return {
            "train_seconds": seconds,
            "device": str(device),
            "epochs": self.epochs,
            "n_train": len(split.train),
            "n_heldout": len(split.held),
            "heldout_mape": float(mape_loss(pred, truth)) if len(truth) else float("nan"),
            "heldout_kendall_tau": kendall_tau(pred.numpy(), truth.numpy()),
        }

    def predictor(self, blocks: list) -> Predict:
        """``predict(matrix, globals, idx)``: cycles of ``blocks[idx]`` under one table,
        differentiable in the table (for tuning; the model is frozen)."""
        self.model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        with torch.no_grad():
            inputs = self.inputs(blocks)
        return self.predict_fn(inputs)

    def save(self, path: str | Path) -> None:
        torch.save(
            {
                "state": self.model.state_dict(),
                "rows": self.row_keys,
                "globals": list(self.globals),
                "mechanisms": list(self.mechanisms),
                "config": asdict(self.config),
                **self.checkpoint(),
            },
            path,
        )

    @classmethod
    def load(cls, path: str | Path) -> Surrogate:
        data = torch.load(path, weights_only=False)
        surrogate = cls.from_checkpoint(data)
        surrogate.model.load_state_dict(data["state"])
        surrogate.model.eval()
        return surrogate
