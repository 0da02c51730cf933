"""Where the robot is in each view: points of the hand projected through the cameras, as per-token features.

The DiT's per-frame condition (flange pose + gripper) says where the robot is in the world; every token would have
to learn the camera projection to turn that into "the gripper is in my patch".  With known cameras the projection is
done here instead: for each frame, a few points of the hand (:data:`POINT_NAMES`: the tool point, the two
fingertips, the tool point's foot on the table) are projected into each of the three views, and each token gets,
for each point, its position relative to the token's own centre.  The DiT adds an embedding of these features to
its token embeddings (:class:`~neuralsim.world_model.dit.GroundingEmbedding`).  A DiT with object state also gets
the same features of each object's position (:meth:`ViewProjector.object_features`).

Conventions (those of :func:`neuralsim.envs.scene.project_exterior`): image points are (column, row) in [-1, 1],
-1 the left / top edge; views in :data:`neuralsim.episode.VIEW_NAMES` order (two fixed exterior cameras, then the
wrist camera, which moves with the hand).  Everything a projection needs -- cameras and the points in the flange
frame -- is a JSON-able dict (:func:`scene_geometry`) stored in the DiT's config, so a checkpoint carries its
cameras.  Batched over any leading dims, pure torch, no host syncs.

Per token and point, :data:`FEATURES_PER_POINT` numbers: the offset (du, dv) from the token's centre to the point in
token widths, a Gaussian bump ``exp(-|d|^2 / 2)`` (1 on the point's token, ~0 two tokens away), whether the point
is in front of the camera, whether it is inside the view, and its depth along the optical axis [m].  A point behind
the camera has zero offsets, bump and depth.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from neuralsim import kinematics as K

#: The projected points, in the order of the features.
POINT_NAMES = ("tool", "left_fingertip", "right_fingertip", "tool_on_table")

#: Numbers per token and point: du, dv, bump, in front, inside the view, depth.
FEATURES_PER_POINT = 6

#: SimDROID's fingertip in the hand frame with the fingers closed: the middle of the last pad capsule, on the left
#: finger (the right one mirrors y).  A finger body sits 0.0584 m along the hand's z and slides along +-y by the
#: opening (:func:`neuralsim.envs.scene._finger`); ``tests/world_model/test_grounding.py`` checks it against MuJoCo.
FINGERTIP_IN_HAND = (0.0, 0.009, 0.0584 + 0.0875)

#: Nearest depth [m] at which a point counts as in front of a camera (and the divisor's floor).
MIN_DEPTH = 0.01

#: Projected coordinates are clamped to this many half-widths of the image, so a point far outside the view (or
#: nearly in the camera's plane) gives bounded offsets.
MAX_COORD = 2.0


def scene_geometry(scene: str) -> dict:
    """The cameras and hand points of a SimDROID scene, as the JSON-able dict the DiT's config stores.

    Keys: ``scene`` (where it came from), ``exterior_position`` (2, 3), ``exterior_basis`` (2, 3, 3) rows = right,
    up, forward; ``exterior_tan_half_fovy`` (2,); the wrist camera in the flange frame: ``wrist_position`` (3,),
    ``wrist_rotation`` (3, 3) columns = right, up, backward (MuJoCo's), ``wrist_tan_half_fovy``; the points in the
    flange frame: ``points_closed`` (P, 3) with the gripper closed and ``points_opening`` (P, 3) their displacement
    from closed to fully open (a point moves by ``(1 - gripper) * opening``); ``table_height`` [m] (the last point
    is the tool point's foot at that height).
    """
    from neuralsim.envs.scene import FINGER_OPEN, TABLE_HEIGHT, exterior_camera_frames, get_scene

    pos, basis, tans = exterior_camera_frames(get_scene(scene))
    wrist_pos, wrist_rot = K._wrist_camera_in_flange()
    c, s = math.cos(K.HAND_YAW), math.sin(K.HAND_YAW)

    def hand(x: float, y: float, z: float) -> list[float]:  # a hand-frame point in the flange frame
        return [c * x - s * y, s * x + c * y, z]

    fx, fy, fz = FINGERTIP_IN_HAND
    closed = [[0.0, 0.0, K.TCP_OFFSET], hand(fx, fy, fz), hand(fx, -fy, fz), [0.0, 0.0, K.TCP_OFFSET]]
    opening = [[0.0, 0.0, 0.0], hand(0.0, FINGER_OPEN, 0.0), hand(0.0, -FINGER_OPEN, 0.0), [0.0, 0.0, 0.0]]
    wrist_tan = math.tan(math.radians(K.WRIST_CAMERA_FOVY) / 2)
    return {"scene": get_scene(scene).name, "exterior_position": pos.tolist(), "exterior_basis": basis.tolist(),
            "exterior_tan_half_fovy": tans.tolist(), "wrist_position": wrist_pos.tolist(),
            "wrist_rotation": wrist_rot.tolist(), "wrist_tan_half_fovy": wrist_tan,
            "points_closed": closed, "points_opening": opening, "table_height": float(TABLE_HEIGHT)}


GEOMETRY_KEYS = ("scene", "exterior_position", "exterior_basis", "exterior_tan_half_fovy", "wrist_position",
                 "wrist_rotation", "wrist_tan_half_fovy", "points_closed", "points_opening", "table_height")


def check_geometry(geometry: dict) -> None:
    """Raise a ValueError naming what is missing or mis-shaped in a :func:`scene_geometry` dict."""
    missing = [k for k in GEOMETRY_KEYS if k not in geometry]
    if missing:
        raise ValueError(f"grounding geometry lacks {missing}; expected the keys of scene_geometry(): {GEOMETRY_KEYS}")
    shapes = {"exterior_position": (2, 3), "exterior_basis": (2, 3, 3), "exterior_tan_half_fovy": (2,),
              "wrist_position": (3,), "wrist_rotation": (3, 3), "wrist_tan_half_fovy": (),
              "points_closed": (len(POINT_NAMES), 3), "points_opening": (len(POINT_NAMES), 3), "table_height": ()}
    for key, shape in shapes.items():
        got = np.shape(geometry[key])
        if got != shape:
            raise ValueError(f"grounding geometry {key!r} must have shape {shape}, got {got}")


# ----------------------------------------------------------------------------- projection
def hand_points(cond: torch.Tensor, closed: torch.Tensor, opening: torch.Tensor,
                table_height: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """World points (..., P, 3) of the hand for conditions ``cond`` (..., 7), the hand's points in the flange frame
    (..., P, 3) and the flange rotation (..., 3, 3).  The last world point is the tool point dropped onto the table
    plane (its flange-frame entry is the tool point's)."""
    rot = K.euler_xyz_to_matrix(cond[..., 3:6])  # (..., 3, 3) flange -> world
    local = closed + (1.0 - cond[..., 6:7, None].clamp(0.0, 1.0)) * opening  # (..., P, 3)
    world = cond[..., None, :3] + local @ rot.transpose(-1, -2)
    foot = torch.cat([world[..., -1:, :2], table_height.expand(world.shape[:-2] + (1, 1))], dim=-1)
    return torch.cat([world[..., :-1, :], foot], dim=-2), local, rot


def _image_points(cam: torch.Tensor, tan: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Camera-frame points (..., 3) as (right, up, forward) -> image points (..., 2), in front (...,), depth (...,)."""
    depth = cam[..., 2]
    ahead = depth > MIN_DEPTH
    scale = 1.0 / (depth.clamp_min(MIN_DEPTH) * tan)
    uv = torch.stack([cam[..., 0] * scale, -cam[..., 1] * scale], dim=-1).clamp(-MAX_COORD, MAX_COORD)
    return uv, ahead, depth


class ViewProjector(nn.Module):
    """Projects the hand points of conditions into the three views and makes the per-token features.

    The geometry (a :func:`scene_geometry` dict) becomes non-persistent float32 buffers: they move with the module
    and are rebuilt from the config, never read from the weights file.
    """

    def __init__(self, geometry: dict, grid: int):
        super().__init__()
        check_geometry(geometry)
        self.grid = grid

        def buf(name: str, key: str) -> None:
            self.register_buffer(name, torch.tensor(geometry[key], dtype=torch.float32), persistent=False)

        buf("ext_pos", "exterior_position")
        buf("ext_basis", "exterior_basis")
        buf("ext_tan", "exterior_tan_half_fovy")
        buf("wrist_pos", "wrist_position")
        buf("wrist_rot", "wrist_rotation")
        buf("wrist_tan", "wrist_tan_half_fovy")
        buf("closed", "points_closed")
        buf("opening", "points_opening")
        buf("table_height", "table_height")
        centres = (2.0 * torch.arange(grid, dtype=torch.float32) + 1.0) / grid - 1.0  # token centres in [-1, 1]
        rows, cols = torch.meshgrid(centres, centres, indexing="ij")
        self.register_buffer("centres", torch.stack([cols, rows], -1).reshape(grid * grid, 2), persistent=False)

    @property
    def num_features(self) -> int:
        return len(POINT_NAMES) * FEATURES_PER_POINT

    def project(self, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """cond (..., 7) -> image points (..., 3 views, P, 2) as (column, row) in [-1, 1] (clamped to
        +-:data:`MAX_COORD`), in front of the camera (..., 3, P) bool, depth along the optical axis (..., 3, P) [m]."""
        with torch.autocast(cond.device.type, enabled=False):  # geometry at full precision under bf16 training
            return self._project(cond.float())

    def _project(self, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        world, local, rot = hand_points(cond, self.closed, self.opening, self.table_height)
        # wrist camera: fixed in the flange frame, so a hand point's view depends only on its flange-frame position;
        # the table point is not on the hand and goes through the camera's world pose
        foot = (world[..., -1:, :] - cond[..., None, :3]) @ rot  # (..., 1, 3) in the flange frame
        return self._views(world, torch.cat([local[..., :-1, :], foot], dim=-2))

    def _views(self, world: torch.Tensor, flange_pts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Points (..., P, 3) in the world and in the flange frame -> :meth:`project`'s (uv, in front, depth)."""
        # exterior cameras: fixed; (..., 2, P, 3) as (right, up, forward)
        ext = (world[..., None, :, :] - self.ext_pos[:, None, :]) @ self.ext_basis.transpose(-1, -2)
        ext_uv, ext_ahead, ext_depth = _image_points(ext, self.ext_tan[:, None])
        wr = (flange_pts - self.wrist_pos) @ self.wrist_rot  # (right, up, backward)
        wr = torch.cat([wr[..., :2], -wr[..., 2:]], dim=-1)  # (right, up, forward)
        wr_uv, wr_ahead, wr_depth = _image_points(wr, self.wrist_tan)
        return (torch.cat([ext_uv, wr_uv[..., None, :, :]], dim=-3),
                torch.cat([ext_ahead, wr_ahead[..., None, :]], dim=-2),
                torch.cat([ext_depth, wr_depth[..., None, :]], dim=-2))

    def project_world(self, cond: torch.Tensor, world: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """World points (..., P, 3) (e.g. objects' centres) seen with the hand at ``cond`` (..., 7) -> as
        :meth:`project`: (..., 3, P, 2), (..., 3, P), (..., 3, P)."""
        with torch.autocast(cond.device.type, enabled=False):
            cond, world = cond.float(), world.float()
            rot = K.euler_xyz_to_matrix(cond[..., 3:6])
            return self._views(world, (world - cond[..., None, :3]) @ rot)

    def object_features(self, cond: torch.Tensor, xyz: torch.Tensor) -> torch.Tensor:
        """cond (..., 7), object centres (..., K, 3) [m, world] -> per-token features (..., 3 * grid**2,
        K * FEATURES_PER_POINT), as :meth:`forward`'s for the hand."""
        return self._features(*self.project_world(cond, xyz))

    def forward(self, cond: torch.Tensor) -> torch.Tensor:
        """cond (..., 7) -> per-token features (..., 3 * grid**2, P * FEATURES_PER_POINT), tokens in the DiT's
        order (view, row, column)."""
        return self._features(*self.project(cond))

    def _features(self, uv: torch.Tensor, ahead: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
        """Projected points (..., V, P, 2), (..., V, P), (..., V, P) -> per-token features (..., V*g*g, P*F)."""
        front = ahead.float()
        inside = front * (uv.abs() <= 1.0).all(dim=-1).float()
        d = (uv[..., None, :, :] - self.centres[:, None, :]) * (self.grid / 2.0)  # (..., V, g*g, P, 2) token widths
        d = d * front[..., None, :, None]
        bump = torch.exp(-0.5 * (d * d).sum(-1)) * front[..., None, :]  # (..., V, g*g, P)
        per_point = torch.cat([d, bump[..., None], front[..., None, :, None].expand_as(bump[..., None]),
                               inside[..., None, :, None].expand_as(bump[..., None]),
                               (depth * front)[..., None, :, None].expand_as(bump[..., None])], dim=-1)
        lead = per_point.shape[:-4]
        return per_point.reshape(*lead, -1, uv.shape[-2] * FEATURES_PER_POINT)  # (..., V*g*g, P*F)
