"""Where the manipulated cube can be: per-frame masks over the latent grid that weight the DiT's loss.

The target cube covers about 3x3 of a view's 64x64 pixels, a fraction of one 4x4-pixel latent cell, so in the
plain mean-squared loss its whole journey (grasp, carry, release) weighs less than a percent of a frame and the
DiT learns to leave it where it stood (docs/fidelity_history.md, "The cube on the model's own training episodes").
``neuralsim train --focus-weight W`` makes the latent cells near the cube weigh ``1 + W``.

A SimDROID record keeps the target's pose at the start and at the end, and every frame the flange pose; the
cube, while it moves, is in the gripper or pushed by it.  So the mask of frame ``t`` in each view marks the
cells within :data:`FOCUS_RADIUS` of three points projected through that view's camera: the target's start and
end positions and the tool centre point (between the fingertips) at ``t``.  That over-covers (the start and
end marks hold in every frame, the gripper's when it is far from the cube) but never misses the cube.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: Radius of a focus mark, in latent cells (one cell = ``image_size / latent_size`` pixels, 4 at 64x64).
FOCUS_RADIUS = 1.0
#: The tool centre point in the flange frame: SimDROID's ``tcp`` site (scene.py), between the fingertips [m].
TCP_OFFSET = 0.130


def exterior_camera_frames() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """SimDROID-v0's exterior cameras (:func:`neuralsim.envs.scene.exterior_camera_frames` of the classic scene)."""
    from neuralsim.envs import scene as S

    return S.exterior_camera_frames(S.CLASSIC)


def project_exterior(points: np.ndarray) -> np.ndarray:
    """World points (N, 3) -> image points (N, 2 views, 2) in SimDROID-v0's exterior cameras, (column, row) in
    [-1, 1]."""
    from neuralsim.envs import scene as S

    return S.project_exterior(points, S.CLASSIC)


def project_wrist(points: np.ndarray, cartesian: np.ndarray) -> np.ndarray:
    """World points (N, 3) seen by the wrist camera at flange poses ``cartesian`` (N, 6) -> (N, 2) (column, row) in
    [-1, 1]; a point behind the camera is returned far outside the image (NaN-free)."""
    from neuralsim import kinematics as K

    cam_pos, cam_rot = K.wrist_camera_pose(np.asarray(cartesian, float))  # columns: right, up, backwards
    local = np.einsum("nji,nj->ni", cam_rot, np.asarray(points, float) - cam_pos)
    depth = -local[:, 2]
    tan = math.tan(math.radians(K.WRIST_CAMERA_FOVY) / 2)
    safe = np.where(depth > 1e-3, depth, 1.0)
    uv = np.stack([local[:, 0] / safe / tan, -local[:, 1] / safe / tan], -1)
    return np.where((depth > 1e-3)[:, None], uv, 10.0)


def tool_centre(cartesian):
    """The tool centre point (..., 3) [m] of flange poses ``cartesian`` (..., 6): a numpy array (float64) or a torch
    tensor (its own dtype; :class:`~neuralsim.world_model.dit.TcpMarkEmbedding` calls it with one)."""
    from neuralsim import kinematics as K

    if not type(cartesian).__module__.startswith("torch"):
        cartesian = np.asarray(cartesian, float)
    return cartesian[..., :3] + K.euler_xyz_to_matrix(cartesian[..., 3:6])[..., :, 2] * TCP_OFFSET


def _marks(uv: np.ndarray, grid: int, radius: float) -> np.ndarray:
    """Image points (T, P, 2) in [-1, 1] -> (T, grid, grid) bool: cells whose centre lies within ``radius`` cells of
    any point."""
    pix = (uv + 1.0) / 2.0 * grid  # in cells, 0 .. grid
    cc = np.arange(grid) + 0.5  # cell centres, in cells
    dc = cc[None, None, None, :] - pix[..., 0][..., None, None]  # (T, P, 1, grid) columns
    dr = cc[None, None, :, None] - pix[..., 1][..., None, None]  # (T, P, grid, 1) rows
    return ((dc ** 2 + dr ** 2) <= radius ** 2).any(axis=1)


def focus_mask(cartesian: np.ndarray, start: np.ndarray, end: np.ndarray, grid: int,
               radius: float = FOCUS_RADIUS) -> np.ndarray:
    """Focus mask (T, 3 views, grid, grid) bool of one episode: the cells near the target's ``start`` and ``end``
    positions (3,) and the tool centre point of each flange pose ``cartesian`` (T, 6), in the two exterior views
    and the wrist view (the dataset's view order)."""
    cartesian = np.asarray(cartesian, float)
    if cartesian.ndim != 2 or cartesian.shape[1] < 6:
        raise ValueError(f"cartesian must be (T, 6) flange poses, got shape {cartesian.shape}")
    if not np.isfinite(cartesian[:, :6]).all():
        raise ValueError("cartesian holds non-finite values")
    T = len(cartesian)
    pts = np.stack([np.broadcast_to(np.asarray(start, float), (T, 3)), np.broadcast_to(np.asarray(end, float), (T, 3)),
                    tool_centre(cartesian)], 1)  # (T, 3 points, 3)
    ext = project_exterior(pts.reshape(-1, 3)).reshape(T, 3, 2, 2)  # (T, P, view, 2)
    wrist = project_wrist(pts.reshape(-1, 3), np.repeat(cartesian[:, :6], 3, axis=0)).reshape(T, 3, 2)
    views = [_marks(ext[:, :, v], grid, radius) for v in range(2)] + [_marks(wrist, grid, radius)]
    return np.stack(views, 1)


def record_focus(record: dict[str, Any], cartesian: np.ndarray, grid: int, radius: float = FOCUS_RADIUS) -> np.ndarray:
    """:func:`focus_mask` of a SimDROID episode record (its ``target`` and the target's ``initial_poses`` and
    ``final_poses``) with flange poses ``cartesian`` (T, 6) -- the recorded ones: the frames show where the arm went."""
    try:
        target = record["target"]
        start = record["initial_poses"][target][:3]
        end = record["final_poses"][target][:3]
    except (KeyError, TypeError) as e:
        raise ValueError(f"episode {record.get('episode_index')!r} has no target pose ({e!r}): the focus weight needs "
                         "SimDROID records with 'target', 'initial_poses' and 'final_poses'") from None
    return focus_mask(cartesian, start, end, grid, radius)
