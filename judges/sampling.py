"""Which frames a judge looks at: 1 fps sampling, segmenting, late-phase picks and image layout.

The rules follow the papers:

* RoboWorld (Appendix B.2): sample the rollout at one frame per second, split it into two segments
  of at most 15 frames, score each segment, keep the maximum, and skip the second segment when the
  first is already a success (the last two are done by :mod:`judges.judge`).
* MiraBench (Appendix D.2.4): seven frames at 81-97 % of the episode, nominal beside perturbed.

Everything here is plain numpy on the episode's uint8 frames; nothing is resized (APIs resize).
"""

from __future__ import annotations

import hashlib
import io
import math
from typing import Any, Sequence

import numpy as np

VIEW_NAMES = ("exterior_image_1_left", "exterior_image_2_left", "wrist_image_left")


def sample_indices(num_frames: int, fps: float, target_fps: float = 1.0, include_last: bool = True) -> np.ndarray:
    """Indices of frames sampled at ``target_fps`` from a recording at ``fps``.

    Frame 0 is always kept, then one frame every ``fps / target_fps`` frames (15 fps -> 1 fps keeps
    0, 15, 30, ...).  With ``include_last`` the final frame is appended when the regular grid misses
    it, because the end state decides success.

    >>> sample_indices(46, fps=15).tolist()
    [0, 15, 30, 45]
    >>> sample_indices(50, fps=15).tolist()
    [0, 15, 30, 45, 49]
    """
    if num_frames <= 0:
        raise ValueError(f"num_frames must be positive, got {num_frames}")
    if fps <= 0 or target_fps <= 0:
        raise ValueError(f"fps and target_fps must be positive, got fps={fps}, target_fps={target_fps}")
    step = fps / target_fps
    n = int(math.floor((num_frames - 1) / step + 1e-9)) + 1
    idx = np.unique(np.round(np.arange(n) * step).astype(np.int64))
    idx = idx[idx < num_frames]
    if include_last and idx[-1] != num_frames - 1:
        idx = np.append(idx, num_frames - 1)
    return idx


def subsample_uniform(indices: Sequence[int], k: int) -> np.ndarray:
    """At most ``k`` of ``indices``, evenly spread, always keeping the first and the last.

    >>> subsample_uniform(range(31), 15).tolist()[:3], subsample_uniform(range(31), 15).tolist()[-1]
    ([0, 2, 4], 30)
    """
    indices = np.asarray(indices, dtype=np.int64)
    if k <= 0:
        raise ValueError(f"k must be positive, got {k}")
    if len(indices) <= k:
        return indices
    if k == 1:
        return indices[-1:]
    pos = np.round(np.linspace(0, len(indices) - 1, k)).astype(np.int64)
    return indices[pos]


def split_segments(indices: Sequence[int], num_segments: int = 2, max_frames: int = 15) -> list[np.ndarray]:
    """Split sampled frame indices into at most ``num_segments`` contiguous segments of <= ``max_frames``.

    The number of segments is the fewest that fit ``max_frames`` each, capped at ``num_segments``:
    a rollout of up to 15 sampled frames is one segment; up to 30 are two near-equal halves; longer
    rollouts are two halves, each evenly subsampled to ``max_frames`` (first and last kept).

    >>> [s.tolist() for s in split_segments(range(10))]
    [[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]]
    >>> [len(s) for s in split_segments(range(31))]
    [15, 15]
    """
    indices = np.asarray(indices, dtype=np.int64)
    if num_segments < 1 or max_frames < 1:
        raise ValueError(f"num_segments and max_frames must be >= 1, got {num_segments}, {max_frames}")
    if len(indices) == 0:
        raise ValueError("no frames to segment")
    n_seg = min(num_segments, math.ceil(len(indices) / max_frames))
    parts = np.array_split(indices, n_seg)
    return [subsample_uniform(p, max_frames) for p in parts]


def progress_indices(num_frames: int, progress: Sequence[float]) -> np.ndarray:
    """Frame indices at the given fractions of the episode (MiraBench: 0.81 ... 0.97).

    >>> progress_indices(101, [0.81, 0.97]).tolist()
    [81, 97]
    """
    p = np.asarray(progress, dtype=np.float64)
    if np.any((p < 0) | (p > 1)):
        raise ValueError(f"progress fractions must lie in [0, 1], got {list(progress)}")
    return np.round(p * (num_frames - 1)).astype(np.int64)


def collage(ext1: np.ndarray, ext2: np.ndarray, wrist: np.ndarray) -> np.ndarray:
    """DROID's 2x2 collage: exterior 1 | exterior 2 on top, wrist bottom-left, black bottom-right.

    Same layout as :func:`neuralsim.episode.collage` (kept here so ``judges`` needs no simulator
    import for pure image work); works on (H, W, 3) or stacks (..., H, W, 3).
    """
    if not (ext1.shape == ext2.shape == wrist.shape):
        raise ValueError(f"views must share a shape, got {ext1.shape}, {ext2.shape}, {wrist.shape}")
    top = np.concatenate([ext1, ext2], axis=-2)
    bottom = np.concatenate([wrist, np.zeros_like(wrist)], axis=-2)
    return np.concatenate([top, bottom], axis=-3)


def render_frames(frames: dict[str, np.ndarray], indices: Sequence[int], views: Any = "collage") -> list[np.ndarray]:
    """The images a judge is shown: per index, the 2x2 collage or the listed views side by side."""
    idx = np.asarray(indices, dtype=np.int64)
    if views == "collage":
        stack = collage(*(np.asarray(frames[v])[idx] for v in VIEW_NAMES))
    else:
        unknown = [v for v in views if v not in frames]
        if unknown:
            raise ValueError(f"unknown views {unknown}; the episode has {sorted(frames)}")
        stack = np.concatenate([np.asarray(frames[v])[idx] for v in views], axis=-2)
    return [np.ascontiguousarray(f, dtype=np.uint8) for f in stack]


def side_by_side(left: np.ndarray, right: np.ndarray, gap: int = 4) -> np.ndarray:
    """Put two equally-shaped images next to each other with a white gap column (MiraBench layout)."""
    if left.shape != right.shape:
        raise ValueError(f"left and right images must share a shape, got {left.shape} and {right.shape}")
    sep = np.full((left.shape[0], gap, left.shape[2]), 255, dtype=np.uint8)
    return np.concatenate([left, sep, right], axis=1)


def encode_image(image: np.ndarray, fmt: str = "png") -> bytes:
    """Encode a uint8 (H, W, 3) image as PNG or JPEG bytes (Pillow)."""
    from PIL import Image

    fmt = fmt.lower()
    if fmt not in ("png", "jpeg", "jpg"):
        raise ValueError(f"image format must be 'png' or 'jpeg', got {fmt!r}")
    buf = io.BytesIO()
    img = Image.fromarray(np.asarray(image, dtype=np.uint8))
    if fmt == "png":
        img.save(buf, format="PNG", optimize=False)
    else:
        img.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def images_digest(images: Sequence[np.ndarray]) -> str:
    """SHA-256 over the images' raw bytes and shapes (the frame part of the cache key)."""
    h = hashlib.sha256()
    for im in images:
        a = np.ascontiguousarray(im)
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()
