"""Where each cube is, and how it looks, in every frame of a video: the measurements MiraBench's indicators read.

:func:`track_video` reads a SimDROID-scene video (true or generated) frame by frame:

* **position**: the fidelity benchmark's object probe (:mod:`benchmarks.common.object_probe`) finds each cube, given its
  colour, in the two exterior views and triangulates a 3-D point;
* **visible area**: the probe's point is projected back into each exterior view, and the pixels within
  :data:`WINDOW_PX` of it whose colour lies within :data:`BLOB_TOLERANCE` of the cube's *reference colour* are
  counted.  The reference colour and area come from frame 0 of the same video (the pixel nearest the palette
  colour at the cube's frame-0 point, and the blob around it), so the measure is reference-free: a generated video
  is compared with its own first frame, which is given.  ``area`` is the larger of the two views' counts relative to
  that view's frame-0 count (1 = as large as at the start, 0 = gone; one view may be occluded by the arm);
* **colour drift**: the distance (uint8 RGB units) between the mean colour of that blob and the reference colour
  (the frame-0 blob's mean).

The arm's tool point comes with the video (:class:`CubeTracks.tcp`): forward kinematics of the joint states the
video was made from (the simulator's for a true video, the env's action adapter for a generated one).
:func:`window_blobs` is the pure pixel part (frames and image points in, counts and colours out).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from neuralsim.episode import VIEW_NAMES

from .object_probe import EXTERIOR_VIEWS, colour_rgb, locate

#: Half-side [px] of the square window around the probe's point (64x64 views; a classic cube spans 3-4 px).
WINDOW_PX = 3
#: Largest RGB distance (uint8 units) from the reference colour of a pixel counted as the cube's.
BLOB_TOLERANCE = 60.0


@dataclass
class CubeTracks:
    """Per-frame measurements of the C cubes of one video of T frames."""

    names: list[str]
    """Cube names (``"<colour>_cube"``), the scene's order."""
    xyz: np.ndarray
    """(T, C, 3) [m] the probe's position of each cube."""
    area: np.ndarray
    """(T, C) visible area relative to frame 0 (the larger of the two exterior views)."""
    colour_drift: np.ndarray
    """(T, C) RGB distance (uint8 units) of the cube's blob colour from its frame-0 colour (NaN: no blob)."""
    tcp: np.ndarray
    """(T, 3) [m] the arm's tool point."""


def image_pixels(uv: np.ndarray, size: int) -> np.ndarray:
    """Image points in [-1, 1] (..., 2) as (column, row) -> integer pixel indices (..., 2), clipped to the image."""
    return np.clip(np.floor((uv + 1.0) * 0.5 * size).astype(int), 0, size - 1)


def window_blobs(images: np.ndarray, pixels: np.ndarray, reference: np.ndarray, radius: int = WINDOW_PX,
                 tolerance: float = BLOB_TOLERANCE) -> tuple[np.ndarray, np.ndarray]:
    """Count the pixels of colour ``reference`` around ``pixels`` in ``images``.

    Args:
        images: (N, S, S, 3) uint8.
        pixels: (N, 2) integer (column, row).
        reference: (N, 3) RGB (uint8 units) per image.
    Returns:
        counts (N,) of window pixels within ``tolerance`` of the reference and their mean colour (N, 3) (NaN where
        the count is 0).
    """
    n, s = images.shape[:2]
    counts = np.zeros(n, int)
    colours = np.full((n, 3), np.nan)
    for i in range(n):
        c, r = pixels[i]
        win = images[i, max(r - radius, 0):r + radius + 1, max(c - radius, 0):c + radius + 1].reshape(-1, 3)
        win = win.astype(np.float64)
        hit = np.linalg.norm(win - reference[i], axis=1) <= tolerance
        counts[i] = int(hit.sum())
        if counts[i]:
            colours[i] = win[hit].mean(0)
    return counts, colours


def reference_colours(images: np.ndarray, pixels: np.ndarray, palette: np.ndarray,
                      radius: int = WINDOW_PX) -> np.ndarray:
    """(N, 3) the window pixel nearest (RGB distance) the palette colour ``palette`` (N, 3) in [0, 1], per image."""
    out = np.zeros((len(images), 3))
    for i, (c, r) in enumerate(pixels):
        win = images[i, max(r - radius, 0):r + radius + 1, max(c - radius, 0):c + radius + 1].reshape(-1, 3)
        win = win.astype(np.float64)
        out[i] = win[np.argmin(np.linalg.norm(win - 255.0 * palette[i], axis=1))]
    return out


def tool_points(joint_position: np.ndarray) -> np.ndarray:
    """(T, 3) tool points of joint states (T, 7) by forward kinematics."""
    from neuralsim import kinematics as K

    return K.tool_pose(joint_position)[0]


def track_video(probe, frames: np.ndarray, cubes: Sequence[str], joint_position: np.ndarray,
                scene: str = "classic") -> CubeTracks:
    """:class:`CubeTracks` of a video ``frames`` (T, V, S, S, 3) uint8 (``VIEW_NAMES`` order) of the cubes ``cubes``
    (names ``"<colour>_cube"``), the arm at ``joint_position`` (T, 7)."""
    from neuralsim.envs.scene import project_exterior

    ext = [VIEW_NAMES.index(v) for v in EXTERIOR_VIEWS]
    views = frames[:, ext]  # (T, 2, S, S, 3)
    t_len, size = len(frames), frames.shape[2]
    palette = np.stack([colour_rgb(c) for c in cubes])  # (C, 3)
    n_c = len(cubes)
    rep_views = np.repeat(views, n_c, axis=0)  # (T*C, 2, S, S, 3): frame-major
    xyz = locate(probe, rep_views, np.tile(palette, (t_len, 1))).reshape(t_len, n_c, 3)
    px = image_pixels(project_exterior(xyz.reshape(-1, 3), scene), size).reshape(t_len, n_c, 2, 2)
    counts = np.zeros((t_len, n_c, 2))
    colours = np.zeros((t_len, n_c, 2, 3))
    ref = np.zeros((n_c, 2, 3))
    for v in range(2):
        seed = reference_colours(views[0, v][None].repeat(n_c, 0), px[0, :, v], palette)
        cnt0, col0 = window_blobs(views[0, v][None].repeat(n_c, 0), px[0, :, v], seed)
        ref[:, v] = np.where(cnt0[:, None] > 0, col0, seed)  # the frame-0 blob's mean colour
        imgs = views[:, v].repeat(n_c, axis=0)  # (T*C, S, S, 3)
        cnt, col = window_blobs(imgs, px[:, :, v].reshape(-1, 2), np.tile(ref[:, v], (t_len, 1)))
        counts[:, :, v], colours[:, :, v] = cnt.reshape(t_len, n_c), col.reshape(t_len, n_c, 3)
    rel = counts / np.maximum(counts[:1], 1.0)  # (T, C, 2)
    best = rel.argmax(-1)  # the view in which the cube is most visible
    area = np.take_along_axis(rel, best[..., None], -1)[..., 0]
    colour = np.take_along_axis(colours, best[..., None, None], 2)[:, :, 0]
    ref_best = np.take_along_axis(np.broadcast_to(ref, (t_len, n_c, 2, 3)), best[..., None, None], 2)[:, :, 0]
    drift = np.linalg.norm(colour - ref_best, axis=-1)  # NaN where the best view has no blob
    return CubeTracks(names=list(cubes), xyz=xyz, area=area, colour_drift=drift,
                      tcp=tool_points(joint_position[:t_len]))
