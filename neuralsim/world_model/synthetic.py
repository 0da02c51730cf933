"""A small synthetic clip source with the same item layout as ``neuralsim.data.reader.ClipDataset``.

Each clip is a smooth random flange trajectory; the two "exterior" views show a coloured square
whose position follows the flange x/y (size follows z), the "wrist" view shows a colour field that
follows the yaw and the gripper.  Frames are a deterministic function of the conditioning vector, so a
world model can learn them; items are deterministic per index.  With ``num_objects`` K > 0 the exterior views also
show K small squares (one colour per object) that drift slowly over the table, and each item records their poses
(``object_pose`` (T, K, 7): xyz, then a yaw as a wxyz quaternion), as a SimDROID dataset's ``ground_truth.object_pose``
does.  For tests and smoke runs only.
"""

from __future__ import annotations

import numpy as np
import torch

from ..episode import VIEW_NAMES

#: The synthetic objects' colours, one per object slot.
OBJECT_COLORS = ((60, 220, 60), (60, 60, 240), (240, 240, 240))


class SyntheticClipDataset(torch.utils.data.Dataset):
    """``num_clips`` clips of ``clip_length`` frames, views uint8 (T, 3, S, S, 3)."""

    def __init__(self, num_clips: int = 64, clip_length: int = 16, image_size: int = 64, seed: int = 0,
                 num_objects: int = 0):
        if num_clips < 1 or clip_length < 2 or image_size < 8 or not 0 <= num_objects <= len(OBJECT_COLORS):
            raise ValueError(f"need num_clips >= 1, clip_length >= 2, image_size >= 8, 0 <= num_objects <= "
                             f"{len(OBJECT_COLORS)}; got {num_clips}, {clip_length}, {image_size}, {num_objects}")
        self.num_clips, self.clip_length, self.image_size, self.seed = num_clips, clip_length, image_size, seed
        self.num_objects = num_objects

    def __len__(self) -> int:
        return self.num_clips

    def render(self, cart: np.ndarray, grip: np.ndarray, objects: np.ndarray | None = None) -> np.ndarray:
        """(T, 6), (T, 1) [, object poses (T, K, 7)] -> uint8 (T, 3, S, S, 3)."""
        t_len, s = len(cart), self.image_size
        out = np.zeros((t_len, len(VIEW_NAMES), s, s, 3), dtype=np.uint8)
        yy, xx = np.mgrid[0:s, 0:s] / (s - 1)
        for i in range(t_len):
            x, y, z = cart[i, :3]
            half = 0.08 + 0.1 * np.clip(z, 0, 1)
            for v, (cx, cy) in enumerate(((x, y), (y, x))):
                img = np.full((s, s, 3), (40, 60 + 40 * v, 80), dtype=np.float64)
                box = (np.abs(xx - (0.5 + 0.35 * cx)) < half) & (np.abs(yy - (0.5 + 0.35 * cy)) < half)
                img[box] = (230, 120 + 100 * grip[i, 0], 40)
                for k in range(0 if objects is None else objects.shape[1]):  # drawn over the arm's square
                    ox, oy = objects[i, k, :2] if v == 0 else objects[i, k, 1::-1]
                    img[(np.abs(xx - (0.5 + 0.35 * ox)) < 0.1) & (np.abs(yy - (0.5 + 0.35 * oy)) < 0.1)] = \
                        OBJECT_COLORS[k]
                out[i, v] = img.astype(np.uint8)
            yaw = cart[i, 5]
            wrist = np.stack([127 + 100 * np.sin(yaw + 6 * xx), 127 + 100 * np.cos(yaw + 6 * yy),
                              np.full_like(xx, 255 * grip[i, 0])], axis=-1)
            out[i, 2] = wrist.clip(0, 255).astype(np.uint8)
        return out

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if not 0 <= index < self.num_clips:
            raise IndexError(f"clip index {index} out of range [0, {self.num_clips})")
        rng = np.random.default_rng([self.seed, index])
        t_len = self.clip_length
        start = rng.uniform(-0.8, 0.8, size=3)
        vel = rng.normal(0, 0.06, size=(t_len, 3)).cumsum(0) * 0.3
        xyz = np.clip(start + vel.cumsum(0) * 0.2, -1, 1)
        euler = np.stack([np.full(t_len, np.pi), np.zeros(t_len),
                          rng.uniform(-np.pi, np.pi) + rng.normal(0, 0.1, t_len).cumsum()], axis=-1)
        euler = (euler + np.pi) % (2 * np.pi) - np.pi
        grip = (np.arange(t_len) >= rng.integers(1, t_len + 4)).astype(np.float64)[:, None]
        cart = np.concatenate([xyz, euler], axis=-1)
        joints = rng.normal(0, 0.1, size=(t_len, 7))
        actions = np.concatenate([rng.uniform(-1, 1, size=(t_len, 7)), grip], axis=-1)
        objects = self._objects(rng, t_len) if self.num_objects else None  # drawn last: K = 0 items are unchanged
        item = {
            "frames": torch.from_numpy(self.render(cart, grip, objects)),
            "cartesian_position": torch.from_numpy(cart.astype(np.float32)),
            "gripper_position": torch.from_numpy(grip.astype(np.float32)),
            "joint_position": torch.from_numpy(joints.astype(np.float32)),
            "actions": torch.from_numpy(actions.astype(np.float32)),
        }
        if objects is not None:
            item["object_pose"] = torch.from_numpy(objects)
        return item

    def _objects(self, rng: np.random.Generator, t_len: int) -> np.ndarray:
        """K objects' poses (T, K, 7) float32: a start in [-0.7, 0.7]^2 on the table (z = 0) drifting at a constant
        velocity, and a constant yaw as a wxyz quaternion."""
        k = self.num_objects
        start = rng.uniform(-0.7, 0.7, size=(k, 2))
        vel = rng.normal(0, 0.03, size=(k, 2))
        yaw = rng.uniform(-np.pi / 2, np.pi / 2, size=k)
        xy = np.clip(start + np.arange(t_len)[:, None, None] * vel, -0.9, 0.9)  # (T, K, 2)
        quat = np.stack([np.cos(yaw / 2), np.zeros(k), np.zeros(k), np.sin(yaw / 2)], axis=-1)  # (K, 4), w > 0
        return np.concatenate([xy, np.zeros((t_len, k, 1)), np.broadcast_to(quat, (t_len, k, 4))],
                              axis=-1).astype(np.float32)
