"""Episode -> offline-judge inputs, shared by training and inference so both see the same frames.

The frames are exactly the ones the RoboWorld VLM protocol shows (1 fps, up to two segments of <= 15
frames, see :func:`judges.judge.segment_plan`), concatenated in time order, every view resized to
``image_size`` squared.  Instruction words are lower-cased and hashed into ``vocab_buckets``.
"""

from __future__ import annotations

import re
import zlib
from typing import Any, Mapping

import numpy as np
import torch
import torch.nn.functional as F

from judges.offline.model import OfflineJudgeConfig
from judges.sampling import sample_indices, split_segments


def frame_indices(num_frames: int, fps: float, config: OfflineJudgeConfig) -> np.ndarray:
    """Indices of the frames the model sees (the RoboWorld segments, concatenated)."""
    idx = sample_indices(num_frames, fps, config.sample_fps, include_last=True)
    return np.concatenate(split_segments(idx, config.num_segments, config.max_frames_per_segment))


def resize_frames(frames: np.ndarray, size: int) -> torch.Tensor:
    """uint8 (T, H, W, 3) -> uint8 (T, 3, size, size) (area interpolation)."""
    x = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float()
    if x.shape[-2:] != (size, size):
        x = F.interpolate(x, size=(size, size), mode="area")
    return x.round().clamp(0, 255).to(torch.uint8)


def encode_frames(frames: Mapping[str, np.ndarray], fps: float, config: OfflineJudgeConfig) -> torch.Tensor:
    """uint8 (T', V, 3, S, S) model input for one episode (T' <= config.max_frames)."""
    n = len(frames[config.views[0]])
    idx = frame_indices(n, fps, config)
    return torch.stack([resize_frames(np.asarray(frames[v])[idx], config.image_size) for v in config.views], dim=1)


def hash_words(instruction: str, config: OfflineJudgeConfig) -> torch.Tensor:
    """int64 (max_words,) bucket ids of the instruction's words, 0-padded."""
    words = re.findall(r"[a-z0-9]+", instruction.lower())[: config.max_words]
    ids = [1 + zlib.crc32(w.encode()) % (config.vocab_buckets - 1) for w in words]
    return torch.tensor(ids + [0] * (config.max_words - len(ids)), dtype=torch.int64)


def collate(items: list[tuple[torch.Tensor, torch.Tensor]],
            max_frames: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pad (frames, words) pairs into a batch: frames (B, T, V, 3, S, S), mask (B, T), words (B, L)."""
    t = min(max_frames, max(f.shape[0] for f, _ in items))
    b = len(items)
    shape = items[0][0].shape[1:]
    frames = torch.zeros((b, t, *shape), dtype=torch.uint8)
    mask = torch.zeros((b, t), dtype=torch.bool)
    for i, (f, _) in enumerate(items):
        n = min(t, f.shape[0])
        frames[i, :n] = f[:n]
        mask[i, :n] = True
    words = torch.stack([w for _, w in items])
    return frames, mask, words


def episode_inputs(episode: Any, config: OfflineJudgeConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """(frames, words) for an Episode-like object with ``frames``, ``fps`` and ``instruction``."""
    frames = encode_frames(episode.frames, float(getattr(episode, "fps", 15.0)), config)
    return frames, hash_words(episode.instruction, config)
