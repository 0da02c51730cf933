"""Train the offline judge on labelled SimDROID episodes (and world-model rollouts labelled by SimDROID).

Usage:
    python -m judges.offline.train --data data/simdroid [--data data/wm_rollouts] --out judges/offline/weights/roboworld_progress --epochs 30

Each ``--data`` directory is a dataset written by ``neuralsim data generate`` (see
:mod:`judges.offline.dataset`); the label of an episode is its final ``rubric_level``.  A seeded
fraction of each directory's episodes is held out; the checkpoint with the best held-out exact
accuracy (ties: within +-1) is written as ``model.safetensors`` + ``config.json``, with
``metrics.json`` (held-out accuracy, per-epoch log, training settings) beside it.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from judges.offline import DEFAULT_WEIGHTS_DIR
from judges.offline.dataset import iter_episodes, read_episode_index, split_rows
from judges.offline.evaluate import level_accuracy
from judges.offline.features import collate, episode_inputs
from judges.offline.model import OfflineJudgeConfig, OfflineJudgeModel

logger = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    """Training settings (the model's own settings are in ``model``).

    Attributes:
        data: dataset directories; episodes from all are pooled (each split into train/held-out).
        out: where the best checkpoint goes.
        epochs: passes over the training episodes.
        batch_size: episodes per step.
        lr: AdamW peak learning rate (cosine decay after a 5 % warm-up).
        weight_decay: AdamW weight decay.
        val_fraction: held-out fraction of each dataset directory.
        seed: seeds the split, the initialisation and the batch order.
        max_episodes: use at most this many episodes per directory (None = all).
        max_steps: stop after this many optimiser steps (None = no limit; for smoke tests).
        class_weighting: weight the loss by inverse square-root level frequency.
        augment: brightness/contrast jitter and small shifts during training.
        device: torch device.
        model: the :class:`~judges.offline.model.OfflineJudgeConfig`.
    """

    data: list[str]
    out: str = str(DEFAULT_WEIGHTS_DIR)
    epochs: int = 30
    batch_size: int = 16
    lr: float = 1e-3
    weight_decay: float = 0.05
    val_fraction: float = 0.15
    seed: int = 0
    max_episodes: int | None = None
    max_steps: int | None = None
    class_weighting: bool = True
    augment: bool = True
    device: str = "cpu"
    model: OfflineJudgeConfig = field(default_factory=OfflineJudgeConfig)

    def __post_init__(self) -> None:
        if not self.data:
            raise ValueError("TrainConfig.data needs at least one dataset directory")
        if self.epochs < 1 or self.batch_size < 1:
            raise ValueError(f"epochs and batch_size must be >= 1, got {self.epochs}, {self.batch_size}")


def _load(cfg: TrainConfig) -> tuple[list, list]:
    """Decode and pre-process every episode once: lists of (frames, words, label, source)."""
    from tqdm import tqdm

    train, val = [], []
    for root in cfg.data:
        rows = read_episode_index(root)
        if cfg.max_episodes is not None:
            rows = rows[: cfg.max_episodes]
        tr_rows, va_rows = split_rows(rows, cfg.val_fraction, cfg.seed)
        for rows_, dest in ((tr_rows, train), (va_rows, val)):
            for ep in tqdm(iter_episodes(root, rows_), total=len(rows_), desc=f"loading {Path(root).name}", leave=False):
                frames, words = episode_inputs(ep, cfg.model)
                dest.append((frames, words, ep.label, str(root)))
    if not train:
        raise ValueError(f"no labelled training episodes found in {cfg.data}")
    return train, val


def _augment(frames: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """uint8 (B, T, V, 3, S, S) -> float in [0, 1] with per-sample jitter and a small random shift."""
    x = frames.float() / 255.0
    b = x.shape[0]
    shape = (b,) + (1,) * (x.dim() - 1)
    gain = 1 + 0.2 * (torch.rand(shape, generator=gen) - 0.5)
    bias = 0.1 * (torch.rand(shape, generator=gen) - 0.5)
    x = (x - 0.5) * gain + 0.5 + bias
    dx, dy = (int(v) for v in torch.randint(-3, 4, (2,), generator=gen))
    x = torch.roll(x, shifts=(dy, dx), dims=(-2, -1))
    return x.clamp(0, 1)


@torch.no_grad()
def _predict(model: OfflineJudgeModel, items: list, batch_size: int, device: str) -> list[int]:
    model.eval()
    preds: list[int] = []
    for i in range(0, len(items), batch_size):
        chunk = items[i : i + batch_size]
        frames, mask, words = collate([(f, w) for f, w, *_ in chunk], model.config.max_frames)
        preds += model(frames.to(device), mask.to(device), words.to(device)).argmax(-1).tolist()
    return preds


def train(cfg: TrainConfig) -> dict[str, Any]:
    """Train, keep the best held-out checkpoint in ``cfg.out``, return the metrics dict."""
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    t0 = time.time()
    train_items, val_items = _load(cfg)
    n_levels = cfg.model.num_levels
    labels = torch.tensor([it[2] for it in train_items])
    if labels.min() < 0 or labels.max() >= n_levels:
        raise ValueError(f"rubric levels must lie in [0, {n_levels - 1}], got {labels.unique().tolist()}")
    counts = torch.bincount(labels, minlength=n_levels).float()
    weight = None
    if cfg.class_weighting:
        weight = torch.where(counts > 0, counts.clamp_min(1).rsqrt(), torch.zeros_like(counts))
        weight = (weight / weight[counts > 0].mean()).to(cfg.device)
    logger.info("train %d / held-out %d episodes; level counts %s", len(train_items), len(val_items), counts.tolist())

    model = OfflineJudgeModel(cfg.model).to(cfg.device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    steps_per_epoch = math.ceil(len(train_items) / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs if cfg.max_steps is None else min(cfg.max_steps, steps_per_epoch * cfg.epochs)
    warm = max(1, int(0.05 * total))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / max(1, total)))))
    best: tuple[float, float] | None = None
    log: list[dict[str, Any]] = []
    step = 0
    eval_items = val_items or train_items  # with no held-out set, select on training accuracy
    for epoch in range(cfg.epochs):
        model.train()
        order = torch.randperm(len(train_items), generator=gen).tolist()
        losses = []
        for i in range(0, len(order), cfg.batch_size):
            batch = [train_items[j] for j in order[i : i + cfg.batch_size]]
            frames, mask, words = collate([(f, w) for f, w, *_ in batch], cfg.model.max_frames)
            x = _augment(frames, gen) if cfg.augment else frames
            y = torch.tensor([b[2] for b in batch], device=cfg.device)
            logits = model(x.to(cfg.device), mask.to(cfg.device), words.to(cfg.device))
            loss = F.cross_entropy(logits, y, weight=weight, label_smoothing=0.05)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
            step += 1
            if step >= total:
                break
        preds = _predict(model, eval_items, cfg.batch_size, cfg.device)
        acc = level_accuracy([it[2] for it in eval_items], preds, n_levels)
        entry = {"epoch": epoch, "step": step, "loss": float(np.mean(losses)), "heldout_exact": acc["exact"],
                 "heldout_within_1": acc["within_1"]}
        log.append(entry)
        logger.info("epoch %d step %d loss %.4f held-out exact %.3f within-1 %.3f", epoch, step, entry["loss"],
                    acc["exact"], acc["within_1"])
        key = (acc["exact"], acc["within_1"])
        if best is None or key > best:
            best = key
            model.save_pretrained(cfg.out)
            best_acc = acc
        if step >= total:
            break
    metrics = {
        "heldout": best_acc, "heldout_is_training_set": not val_items, "train_episodes": len(train_items),
        "heldout_episodes": len(val_items), "train_level_counts": counts.tolist(), "log": log,
        "seconds": time.time() - t0,
        "train_config": {k: v for k, v in asdict(cfg).items() if k != "model"},
    }
    Path(cfg.out, "metrics.json").write_text(json.dumps(metrics, indent=2))
    return metrics


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    p = argparse.ArgumentParser(prog="python -m judges.offline.train", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", action="append", required=True, help="dataset directory (repeatable)")
    p.add_argument("--out", default=str(DEFAULT_WEIGHTS_DIR))
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--val-fraction", type=float, default=0.15)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-episodes", type=int, default=None)
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--no-class-weighting", action="store_true")
    p.add_argument("--no-augment", action="store_true")
    p.add_argument("--device", default="cpu")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    a = p.parse_args(argv)
    return TrainConfig(
        data=a.data, out=a.out, epochs=a.epochs, batch_size=a.batch_size, lr=a.lr, val_fraction=a.val_fraction,
        seed=a.seed, max_episodes=a.max_episodes, max_steps=a.max_steps, class_weighting=not a.no_class_weighting,
        augment=not a.no_augment, device=a.device,
        model=OfflineJudgeConfig(image_size=a.image_size, dim=a.dim, layers=a.layers),
    )


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    metrics = train(parse_args(argv))
    h = metrics["heldout"]
    logger.info("best held-out accuracy: exact %.3f, within +-1 %.3f (n=%d)", h["exact"], h["within_1"], h["n"])


if __name__ == "__main__":
    main()
