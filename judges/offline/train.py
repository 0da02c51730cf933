"""Train the offline judge on labelled SimDROID episodes (and world-model rollouts labelled by SimDROID).

Usage:
    python -m judges.offline.train --data data/simdroid [--data data/wm_rollouts] \\
        --out judges/offline/weights/roboworld_progress --epochs 30

Each ``--data`` directory is a dataset written by ``neuralsim data generate`` (see
:mod:`judges.offline.dataset`); the label of an episode is its final ``rubric_level``.  A seeded
fraction of the episodes is held out (drawn over episode indices, so a world-model replay of an
episode -- ``source_episode_index`` -- sits on the same side as the episode); the checkpoint with the
best held-out exact accuracy (ties: within +-1) is written as ``model.safetensors`` (float16 by
default) + ``config.json``, with ``metrics.json`` beside it: the held-out accuracy of the written
file, overall and per data directory, the per-epoch log and the training settings.

Where a dataset records the level so far at every frame (``ground_truth.rubric_level``), training
uses it twice: as a per-frame loss on the frames the model sees, and for *prefix* episodes -- with
probability ``prefix_prob`` a training episode is cut at a random frame t and labelled with the
level at t, which is exactly the rubric level of the shorter episode.  Prefixes show the model the
moments around the decision (carrying the cube, then releasing it in the bowl) that the final
labels alone rarely contrast.

Two optional auxiliary heads shape the features with the simulator's geometry (in 5 cm units,
clipped at 20 cm; Huber loss, weight ``aux_loss_weight``; neither feeds the rubric prediction):
``--distance-head`` regresses the gripper-to-target distance at every sampled frame
(``ground_truth.target_distance``), ``--goal-head`` regresses where the target object ended
relative to its goal, (dx, dy), from the last frame of a whole episode (the record's final poses; a
prefix has no such label).  The second aims at what separates "touched or grasped" (level 4) from
"done" (level 5).

*Hold* episodes break a length shortcut. The recorded episodes stop a few steps after the expert is done,
while failures run longer, so episode length alone tells success from failure. An episode in a world model
runs to the horizon instead, the arm idle after the task, and a judge trained only on the recordings calls
most such successes failures (docs/EXPERIMENTS.md, "The offline judge"). With probability ``hold_prob`` a
whole training episode is therefore extended to a random length up to ``hold_to`` frames by repeating its
last frame (the arm holding still, as the scripted expert does once done), with its labels unchanged.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from judges.offline import default_weights_dir
from judges.offline.dataset import (
    final_goal_offset,
    heldout_keys,
    iter_episodes,
    read_episode_index,
    split_key,
    split_rows,
)
from judges.offline.evaluate import grouped_accuracy, level_accuracy
from judges.offline.features import collate, episode_inputs, frame_indices, hash_words, resize_frames
from judges.offline.model import DISTANCE_CLIP_UNITS, DISTANCE_UNIT_M, OfflineJudgeConfig, OfflineJudgeModel
from judges.sampling import sample_indices
from neuralsim.envs import DEFAULT_MAX_EPISODE_STEPS

logger = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    """Training settings (the model's own settings are in ``model``).

    Attributes:
        data: dataset directories; episodes from all are pooled (each split into train/held-out).
        out: where the best checkpoint goes; None: the shipped judge of the training data's SimDROID scene
            (:func:`default_out`: ``judges/offline/weights/roboworld_progress`` classic, ``..._legible`` legible).
        epochs: passes over the training episodes.
        batch_size: episodes per step.
        lr: AdamW peak learning rate (cosine decay after a 5 % warm-up).
        weight_decay: AdamW weight decay.
        val_fraction: held-out fraction of each dataset directory.
        seed: seeds the split, the initialisation and the batch order.
        max_episodes: use at most this many episodes per directory (None = all).
        max_steps: stop after this many optimiser steps (None = no limit; for smoke tests).
        max_minutes: wall-clock budget of the training loop (loading excluded; None = none).  The
            learning rate follows the cosine over whichever runs out first, steps or time, so a
            run cut short by the budget still ends annealed.
        class_weighting: weight the loss by inverse square-root level frequency.
        frame_loss_weight: weight of the per-frame loss (the level so far at each sampled frame,
            from the dataset's ``ground_truth.rubric_level`` column; 0 turns it off).
        prefix_prob: probability that a training episode is replaced by a random prefix of itself
            labelled with the level at its last frame (needs per-frame levels; 0 turns it off).
        prefix_stride: prefixes end on every ``prefix_stride``-th frame (frames kept in memory).
        hold_prob: probability that a whole training episode shorter than ``hold_to`` frames is
            extended to a random length in (its length, ``hold_to``] by repeating its last frame
            (labels unchanged; 0 turns it off).
        hold_to: the longest extended episode, in frames (151 = the 150-step default horizon).
        aux_loss_weight: weight of each auxiliary head's loss (``model.distance_head``,
            ``model.goal_head``); targets that were not recorded are ignored.
        augment: brightness/contrast jitter and small shifts during training.
        device: torch device.
        num_threads: torch CPU threads (None: torch's default); 1 shares a small CPU politely.
        weights_dtype: precision of the written weights (``"float16"`` halves the file; the loader
            upcasts); ``"float32"`` keeps them as trained.
        model: the :class:`~judges.offline.model.OfflineJudgeConfig`.
    """

    data: list[str]
    out: str | None = None
    epochs: int = 30
    batch_size: int = 16
    lr: float = 1e-3
    weight_decay: float = 0.05
    val_fraction: float = 0.15
    seed: int = 0
    max_episodes: int | None = None
    max_steps: int | None = None
    max_minutes: float | None = None
    class_weighting: bool = True
    frame_loss_weight: float = 0.5
    prefix_prob: float = 0.5
    prefix_stride: int = 3
    hold_prob: float = 0.5
    hold_to: int = DEFAULT_MAX_EPISODE_STEPS + 1
    aux_loss_weight: float = 0.5
    augment: bool = True
    device: str = "cpu"
    num_threads: int | None = None
    weights_dtype: str = "float16"
    model: OfflineJudgeConfig = field(default_factory=OfflineJudgeConfig)

    def __post_init__(self) -> None:
        if not self.data:
            raise ValueError("TrainConfig.data needs at least one dataset directory")
        if self.epochs < 1 or self.batch_size < 1:
            raise ValueError(f"epochs and batch_size must be >= 1, got {self.epochs}, {self.batch_size}")
        if not 0 <= self.prefix_prob <= 1 or self.prefix_stride < 1:
            raise ValueError(f"need 0 <= prefix_prob <= 1 and prefix_stride >= 1, got {self.prefix_prob}, "
                             f"{self.prefix_stride}")
        if not 0 <= self.hold_prob <= 1 or self.hold_to < 1:
            raise ValueError(f"need 0 <= hold_prob <= 1 and hold_to >= 1, got {self.hold_prob}, {self.hold_to}")
        if self.frame_loss_weight < 0 or self.aux_loss_weight < 0:
            raise ValueError(f"frame_loss_weight and aux_loss_weight must be >= 0, got "
                             f"{self.frame_loss_weight}, {self.aux_loss_weight}")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise ValueError(f"max_minutes must be > 0 or None, got {self.max_minutes}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads must be >= 1 or None, got {self.num_threads}")
        if self.weights_dtype not in ("float16", "bfloat16", "float32"):
            raise ValueError(f"weights_dtype must be 'float16', 'bfloat16' or 'float32', got {self.weights_dtype!r}")


@dataclass
class _Stored:
    """A training episode kept in memory: the frames any of its prefixes needs, and its labels."""

    frames: torch.Tensor  # (K, V, 3, S, S) uint8, the frames at ``kept``
    kept: np.ndarray  # (K,) their indices in the episode
    words: torch.Tensor
    label: int
    source: str
    num_frames: int
    fps: float
    levels: np.ndarray | None  # (num_frames,) level so far at each frame, if recorded
    distances: np.ndarray | None  # (num_frames,) gripper-to-target distance (m) at each frame, if recorded
    goal: np.ndarray | None  # (2,) final target offset from its goal (m), if recorded

    @classmethod
    def from_episode(cls, ep: Any, source: str, cfg: TrainConfig) -> "_Stored":
        n, m = len(ep.frames[cfg.model.views[0]]), cfg.model
        levels = getattr(ep, "frame_levels", None)
        levels = None if levels is None else np.asarray(levels)
        kept = frame_indices(n, ep.fps, m)
        if levels is not None and cfg.prefix_prob > 0:  # the 1 fps grid + every prefix_stride-th frame + the last
            grid = sample_indices(n, ep.fps, m.sample_fps, include_last=True)
            kept = np.unique(np.concatenate([grid, np.arange(0, n, cfg.prefix_stride), [n - 1]]))
        frames = torch.stack([resize_frames(np.asarray(ep.frames[v])[kept], m.image_size) for v in m.views], dim=1)
        dist = getattr(ep, "frame_distances", None)
        return cls(frames, kept, hash_words(ep.instruction, m), ep.label, source, n, ep.fps, levels,
                   None if dist is None else np.asarray(dist, np.float32),
                   final_goal_offset(getattr(ep, "metadata", None) or {}))

    def sample(self, rng: np.random.Generator | None, cfg: TrainConfig) -> tuple:
        """(frames, words, label, frame levels, frame distances, goal offset): the whole episode, with
        ``prefix_prob`` a random prefix, or with ``hold_prob`` the whole episode held to a longer length
        (see the module docstring).  Missing levels are -100, missing distances and offsets NaN (a
        prefix has no goal offset); lengths are in :data:`~judges.offline.model.DISTANCE_UNIT_M`
        units, clipped to :data:`~judges.offline.model.DISTANCE_CLIP_UNITS`.

        ``rng=None`` always gives the whole episode.
        """
        end, label = self.num_frames - 1, self.label
        length = self.num_frames  # frames the model is shown; beyond num_frames the last one repeats
        if rng is not None and self.levels is not None and cfg.prefix_prob > 0 and rng.random() < cfg.prefix_prob:
            ends = self.kept[self.kept >= self.fps]  # at least a second in
            if len(ends):
                end = int(rng.choice(ends))
                label = int(self.levels[end])
                length = end + 1
        elif (rng is not None and cfg.hold_prob > 0 and self.num_frames < cfg.hold_to
              and rng.random() < cfg.hold_prob):
            length = int(rng.integers(self.num_frames + 1, cfg.hold_to + 1))
        idx = np.minimum(frame_indices(length, self.fps, cfg.model), self.num_frames - 1)
        pos = np.searchsorted(self.kept, idx)
        assert np.array_equal(self.kept[pos], idx), "a prefix needs frames that were not kept"
        targets = (torch.full((len(idx),), -100, dtype=torch.int64) if self.levels is None
                   else torch.as_tensor(self.levels[idx], dtype=torch.int64))
        dist = (torch.full((len(idx),), float("nan")) if self.distances is None else
                torch.as_tensor(self.distances[idx] / DISTANCE_UNIT_M).clamp(0.0, DISTANCE_CLIP_UNITS))
        goal = (torch.full((2,), float("nan")) if self.goal is None or end != self.num_frames - 1 else
                torch.as_tensor(self.goal / DISTANCE_UNIT_M).clamp(-DISTANCE_CLIP_UNITS, DISTANCE_CLIP_UNITS))
        return self.frames[pos], self.words, label, targets, dist, goal


def _load(cfg: TrainConfig) -> tuple[list, list]:
    """Decode and pre-process every episode once.

    Returns training episodes as :class:`_Stored` and held-out ones as (frames, words, label, source).
    """
    from tqdm import tqdm

    train, val = [], []
    rows_of = {}
    for root in cfg.data:
        rows = read_episode_index(root)
        rows_of[root] = rows if cfg.max_episodes is None else rows[: cfg.max_episodes]
    heldout = heldout_keys((split_key(r) for rows in rows_of.values() for r in rows), cfg.val_fraction, cfg.seed)
    for root, rows in rows_of.items():
        tr_rows, va_rows = split_rows(rows, cfg.val_fraction, cfg.seed, heldout=heldout)
        for ep in tqdm(iter_episodes(root, tr_rows), total=len(tr_rows), desc=f"loading {Path(root).name}",
                       leave=False):
            train.append(_Stored.from_episode(ep, str(root), cfg))
        for ep in tqdm(iter_episodes(root, va_rows), total=len(va_rows), desc=f"loading {Path(root).name} (held out)",
                       leave=False):
            frames, words = episode_inputs(ep, cfg.model)
            val.append((frames, words, ep.label, str(root)))
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


def _pad_targets(targets: list[torch.Tensor], t: int, fill: float = -100) -> torch.Tensor:
    """(B, t) per-frame targets in their own dtype, ``fill`` beyond each episode's frames.

    Levels use -100 (cross-entropy's ignore index), distances NaN.
    """
    out = torch.full((len(targets), t), fill, dtype=targets[0].dtype)
    for i, y in enumerate(targets):
        out[i, : min(t, len(y))] = y[:t]
    return out


@torch.no_grad()
def _predict(model: OfflineJudgeModel, items: list, batch_size: int, device: str) -> list[int]:
    model.eval()
    preds: list[int] = []
    for i in range(0, len(items), batch_size):
        chunk = items[i : i + batch_size]
        frames, mask, words = collate([(f, w) for f, w, *_ in chunk], model.config.max_frames)
        preds += model(frames.to(device), mask.to(device), words.to(device)).argmax(-1).tolist()
    return preds


def default_out(data: list[str]) -> Path:
    """Where a judge trained on ``data`` goes by default: the shipped judge of the datasets' SimDROID scene
    (their ``meta/info.json`` ``generation.scene``, classic where none is recorded).

    Raises:
        ValueError: the datasets are of different scenes (name the output with ``out``).
    """
    from neuralsim.world_model.batches import data_scene

    try:
        scene = data_scene(",".join(str(d) for d in data))
    except ValueError as e:
        raise ValueError(f"{e}; pass --out to say where this judge goes") from None
    return default_weights_dir(scene or "classic")


def train(cfg: TrainConfig) -> dict[str, Any]:
    """Train, keep the best held-out checkpoint in ``cfg.out`` (None: :func:`default_out`), return the metrics."""
    if cfg.out is None:
        cfg = replace(cfg, out=str(default_out(cfg.data)))
        logger.info("the judge goes to %s (the shipped judge of the data's scene)", cfg.out)
    if cfg.num_threads is not None:
        torch.set_num_threads(cfg.num_threads)
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    t0 = time.time()
    train_items, val_items = _load(cfg)
    n_levels = cfg.model.num_levels
    labels = torch.tensor([it.label for it in train_items])
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
    budget_s = None if cfg.max_minutes is None else 60.0 * cfg.max_minutes
    t_loop = time.time()

    def progress(s: int) -> float:
        """Fraction of the run done: steps, or wall time when a budget is set, whichever is further."""
        frac = s / max(1, total)
        return max(frac, (time.time() - t_loop) / budget_s) if budget_s else frac

    def set_lr(s: int) -> None:
        for g in opt.param_groups:
            g["lr"] = cfg.lr * min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress(s))))

    out_of_time = False
    best: tuple[float, float] | None = None
    log: list[dict[str, Any]] = []
    step = 0
    # with no held-out set, select on training accuracy (whole episodes)
    eval_items = val_items or [(*it.sample(None, cfg)[:3], it.source) for it in train_items]
    rng = np.random.default_rng(cfg.seed)
    for epoch in range(cfg.epochs):
        model.train()
        order = torch.randperm(len(train_items), generator=gen).tolist()
        losses = []
        for i in range(0, len(order), cfg.batch_size):
            batch = [train_items[j].sample(rng, cfg) for j in order[i : i + cfg.batch_size]]
            frames, mask, words = collate([(f, w) for f, w, *_ in batch], cfg.model.max_frames)
            x = _augment(frames, gen) if cfg.augment else frames
            y = torch.tensor([b[2] for b in batch], device=cfg.device)
            out = model.forward_all(x.to(cfg.device), mask.to(cfg.device), words.to(cfg.device))
            logits, frame_logits = out.logits, out.frame_logits
            loss = F.cross_entropy(logits, y, weight=weight, label_smoothing=0.05)
            y_frames = _pad_targets([b[3] for b in batch], frame_logits.shape[1]).to(cfg.device)
            if cfg.frame_loss_weight > 0 and (y_frames >= 0).any():
                loss = loss + cfg.frame_loss_weight * F.cross_entropy(
                    frame_logits.flatten(0, 1), y_frames.flatten(), ignore_index=-100, label_smoothing=0.05)
            aux = []
            if out.distance is not None:
                aux.append((out.distance, _pad_targets([b[4] for b in batch], out.distance.shape[1], float("nan"))))
            if out.goal_offset is not None:
                aux.append((out.goal_offset, torch.stack([b[5] for b in batch])))
            for pred, true in aux:
                true = true.to(cfg.device)
                known = ~torch.isnan(true)
                if cfg.aux_loss_weight > 0 and known.any():
                    loss = loss + cfg.aux_loss_weight * F.smooth_l1_loss(pred[known], true[known])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            set_lr(step)
            opt.step()
            losses.append(float(loss.detach()))
            step += 1
            out_of_time = budget_s is not None and time.time() - t_loop >= budget_s
            if step >= total or out_of_time:
                break
        preds = _predict(model, eval_items, cfg.batch_size, cfg.device)
        acc = level_accuracy([it[2] for it in eval_items], preds, n_levels)
        entry = {"epoch": epoch, "step": step, "loss": float(np.mean(losses)), "heldout_exact": acc["exact"],
                 "heldout_within_1": acc["within_1"], "seconds": round(time.time() - t0, 1)}
        log.append(entry)
        logger.info("epoch %d step %d loss %.4f held-out exact %.3f within-1 %.3f", epoch, step, entry["loss"],
                    acc["exact"], acc["within_1"])
        key = (acc["exact"], acc["within_1"])
        if best is None or key > best:
            best = key
            model.save_pretrained(cfg.out, dtype=cfg.weights_dtype)
        if step >= total or out_of_time:
            if out_of_time:
                logger.info("stopped by the %.1f-minute budget after %d of %d steps", cfg.max_minutes, step, total)
            break
    # score what was written (the best epoch, at the stored precision), overall and per directory
    shipped = OfflineJudgeModel.from_pretrained(cfg.out, device=cfg.device)
    preds = _predict(shipped, eval_items, cfg.batch_size, cfg.device)
    truth = [it[2] for it in eval_items]
    metrics = {
        "heldout": level_accuracy(truth, preds, n_levels),
        "heldout_by_data": grouped_accuracy(zip([it[3] for it in eval_items], truth, preds)),
        "heldout_is_training_set": not val_items, "train_episodes": len(train_items),
        "heldout_episodes": len(val_items), "train_level_counts": counts.tolist(),
        "best_epoch": max(log, key=lambda e: (e["heldout_exact"], e["heldout_within_1"]))["epoch"], "log": log,
        "seconds": time.time() - t0,
        "train_config": {k: v for k, v in asdict(cfg).items() if k != "model"},
    }
    Path(cfg.out, "metrics.json").write_text(json.dumps(metrics, indent=2))
    return metrics


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    p = argparse.ArgumentParser(prog="python -m judges.offline.train", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", action="append", required=True, help="dataset directory (repeatable)")
    p.add_argument("--out", default=None,
                   help="where the judge goes (default: the shipped judge of the --data's SimDROID scene, "
                        "judges/offline/weights/roboworld_progress for classic, roboworld_progress_legible for "
                        "legible)")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--val-fraction", type=float, default=0.15)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-episodes", type=int, default=None)
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--max-minutes", type=float, default=None,
                   help="wall-clock budget of the training loop; the LR schedule anneals within it")
    p.add_argument("--no-class-weighting", action="store_true")
    p.add_argument("--frame-loss-weight", type=float, default=0.5,
                   help="weight of the per-frame level loss (0: episode labels only)")
    p.add_argument("--prefix-prob", type=float, default=0.5,
                   help="probability of training on a random prefix of an episode (0: whole episodes only)")
    p.add_argument("--hold-prob", type=float, default=0.5,
                   help="probability of holding a whole episode's last frame to a longer length (0: off)")
    p.add_argument("--hold-to", type=int, default=DEFAULT_MAX_EPISODE_STEPS + 1,
                   help="longest held episode in frames (default: the env's horizon + 1)")
    p.add_argument("--distance-head", action="store_true",
                   help="auxiliary per-frame gripper-to-target distance head (needs ground_truth.target_distance)")
    p.add_argument("--goal-head", action="store_true",
                   help="auxiliary head: final target offset from its goal (needs final_poses in the records)")
    p.add_argument("--aux-loss-weight", type=float, default=0.5, help="weight of each auxiliary head's loss")
    p.add_argument("--no-augment", action="store_true")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--weights-dtype", default="float16", choices=("float16", "bfloat16", "float32"),
                   help="precision of the written weights")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    a = p.parse_args(argv)
    return TrainConfig(
        data=a.data, out=a.out, epochs=a.epochs, batch_size=a.batch_size, lr=a.lr, val_fraction=a.val_fraction,
        seed=a.seed, max_episodes=a.max_episodes, max_steps=a.max_steps, max_minutes=a.max_minutes,
        class_weighting=not a.no_class_weighting,
        frame_loss_weight=a.frame_loss_weight, prefix_prob=a.prefix_prob,
        hold_prob=a.hold_prob, hold_to=a.hold_to,
        aux_loss_weight=a.aux_loss_weight, augment=not a.no_augment, device=a.device, num_threads=a.threads,
        weights_dtype=a.weights_dtype,
        model=OfflineJudgeConfig(image_size=a.image_size, dim=a.dim, layers=a.layers, distance_head=a.distance_head,
                                 goal_head=a.goal_head),
    )


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    metrics = train(parse_args(argv))
    h = metrics["heldout"]
    logger.info("best held-out accuracy: exact %.3f, within +-1 %.3f (n=%d)", h["exact"], h["within_1"], h["n"])


if __name__ == "__main__":
    main()
