"""The record of one episode, as handed to reward functions, judges and writers.

An :class:`Episode` is what ``reward_fn`` receives when an episode ends, in SimDROID-v0 and in
NeuralDROID-v0 alike.  Frames are kept per camera view in DROID's names, so a judge can pick the
views a rubric asks for (the RoboWorld progress rubric uses the fixed exterior views; the wrist view
only for world-model errors) or tile them into the 2x2 collage with :func:`collage`.

:class:`EpisodeRecorder` builds one step by step (NeuralDROID's record), keeping every frame or only those a
judge samples (``record_frames``).
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Camera views in DROID's names, in the order the world model stacks them.
VIEW_NAMES = ("exterior_image_1_left", "exterior_image_2_left", "wrist_image_left")

#: Values of ``record_frames``: which frames an :class:`EpisodeRecorder` keeps.
RECORD_FRAMES = ("all", "judge", "none")

#: The most steps an :class:`EpisodeRecorder` reserves room for at once (virtual memory, committed as written); a
#: longer episode, or one without a horizon, doubles its arrays as it grows.
MAX_RESERVED_STEPS = 2**16

#: Frames per second a judge samples from an episode, the last frame added: every single-episode rubric in
#: ``judges/rubrics/`` (``sampling.fps``) and the offline judge (``sample_fps``).  ``record_frames="judge"`` keeps
#: these frames.
JUDGE_SAMPLE_FPS = 1.0


@dataclass
class Episode:
    """One finished (or running) episode.

    Attributes:
        frames: view name -> uint8 array (T, H, W, 3); T = number of steps + 1 (the reset frame).
        joint_position: (T, 7) joint positions [rad].
        gripper_position: (T, 1) gripper position, 0 open ... 1 closed.
        cartesian_position: (T, 6) flange pose (xyz + extrinsic XYZ Euler), from forward kinematics.
        actions: (T - 1, 8) actions as applied (after clipping).
        instruction: the language instruction.
        fps: frames per second of the recording (DROID: 15).
        metadata: free-form extras (seed, task family, ground truth, perturbation, ...).
        recorded_frames: indices of the frames that hold images, when not all do (NeuralDROID's
            ``record_frames="judge"`` or ``"none"``: the others are black); None: every frame.
    """

    frames: dict[str, np.ndarray]
    joint_position: np.ndarray
    gripper_position: np.ndarray
    cartesian_position: np.ndarray
    actions: np.ndarray
    instruction: str
    fps: float = 15.0
    metadata: dict[str, Any] = field(default_factory=dict)
    recorded_frames: np.ndarray | None = None

    def __post_init__(self) -> None:
        missing = [v for v in VIEW_NAMES if v not in self.frames]
        if missing:
            raise KeyError(f"Episode.frames is missing views {missing}; expected keys {list(VIEW_NAMES)}")
        lengths = {v: len(self.frames[v]) for v in VIEW_NAMES}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"all views must have the same number of frames, got {lengths}")

    @property
    def num_frames(self) -> int:
        return len(self.frames[VIEW_NAMES[0]])

    def collage_frames(self) -> np.ndarray:
        """The 2x2 collage of every frame, uint8 (T, 2H, 2W, 3)."""
        return collage(*(self.frames[v] for v in VIEW_NAMES))


def check_record_frames(record_frames: str) -> str:
    """``record_frames`` if it is one of :data:`RECORD_FRAMES`, else a ValueError quoting it."""
    if not isinstance(record_frames, str) or record_frames not in RECORD_FRAMES:
        raise ValueError(f"record_frames must be one of {RECORD_FRAMES}, got {record_frames!r}")
    return record_frames


def lazy_zeros(shape: tuple[int, ...], dtype: Any = np.uint8) -> np.ndarray:
    """A zero-filled array in an anonymous memory map of its own, outside the ``malloc`` heap.

    The OS commits its pages as they are written (huge pages declined where it can, so writing one frame commits
    that frame's pages only) and takes them all back when the last array on the map is gone.  A frame record
    grows into such arrays: they hold just the frames written, and never pin holes in the heap where torch's
    per-step temporaries live (frames kept as torch's own outputs cost 50 KB a step more than their 37 KB that way).
    """
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    buf = mmap.mmap(-1, max(1, count * dtype.itemsize))
    if hasattr(mmap, "MADV_NOHUGEPAGE"):  # Linux
        buf.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(buf, dtype, count=count).reshape(shape)


class EpisodeRecorder:
    """One running episode's record: frames of the views, states and actions, appended a step at a time.

    ``record_frames`` says which frames it keeps:

    * ``"all"`` (every frame): :meth:`episode` returns read-only views of the record, no copy.
    * ``"judge"``: one frame per second (:data:`JUDGE_SAMPLE_FPS`; at 15 fps frames 0, 15, 30, ...) and the
      latest -- every frame a single-episode judge samples (``judges.sampling.sample_indices``: 1 fps, the last frame
      included), so it scores the episode as it would with ``"all"``.  MiraBench's pairwise vote, which looks at
      81-97 % of the episode, needs ``"all"``.
    * ``"none"``: frame 0 and the latest.

    Frames not kept are black in :meth:`episode`'s arrays and left out of :attr:`Episode.recorded_frames`.
    States and actions are always kept whole (88 bytes a step).  Frames live in :func:`lazy_zeros` arrays sized
    for ``horizon`` steps (at most :data:`MAX_RESERVED_STEPS`; doubled when the episode runs past them), so the
    record's memory is the frames it keeps.

    Args:
        views: frame 0, uint8 (V, H, W, 3), one image per view of :data:`VIEW_NAMES`.
        joint_position, gripper_position, cartesian_position: the state at frame 0, (7,), (1,), (6,).
        record_frames: one of :data:`RECORD_FRAMES`.
        fps: frames per second of the recording.
        horizon: the steps the episode is expected to run (None: unknown).
    """

    def __init__(self, views: np.ndarray, joint_position: np.ndarray, gripper_position: np.ndarray,
                 cartesian_position: np.ndarray, *, record_frames: str = "all", fps: float = 15.0,
                 horizon: int | None = None):
        self.record_frames = check_record_frames(record_frames)
        self.fps = float(fps)
        self._stride = max(1, round(self.fps / JUDGE_SAMPLE_FPS))  # 15 fps -> frames 0, 15, 30, ...
        views = np.asarray(views)
        steps = 255 if horizon is None else min(int(horizon), MAX_RESERVED_STEPS)
        slots = {"all": steps + 1, "judge": steps // self._stride + 2, "none": 2}[self.record_frames]
        self._frames = lazy_zeros((slots, *views.shape), np.uint8)  # (slots, V, H, W, 3)
        self._index = np.zeros(slots, np.int64)  # the frame index held in each slot
        self._slots = 0
        self._states = np.zeros((steps + 1, 7 + 1 + 6 + 8), np.float32)  # joints, gripper, pose, action (row t-1)
        self._length = 0
        self._add(views, np.zeros(8, np.float32), joint_position, gripper_position, cartesian_position)

    @property
    def num_frames(self) -> int:
        """T: frames so far, the first included (steps + 1)."""
        return self._length

    @property
    def frames_held(self) -> int:
        """How many frames the record holds (``num_frames`` with ``"all"``)."""
        return self._slots

    def append(self, views: np.ndarray, action: np.ndarray, joint_position: np.ndarray,
               gripper_position: np.ndarray, cartesian_position: np.ndarray) -> None:
        """Record one step: the frame it generated, the action applied (8,) and the state it reached."""
        self._add(views, action, joint_position, gripper_position, cartesian_position)

    def _keeps(self, index: int) -> bool:
        return self.record_frames == "all" or index == 0 or (self.record_frames == "judge"
                                                             and index % self._stride == 0)

    def _add(self, views, action, joint_position, gripper_position, cartesian_position) -> None:
        n = self._length
        if self._slots and not self._keeps(int(self._index[self._slots - 1])):
            self._slots -= 1  # the latest frame so far is not kept: this one takes its slot
        if self._slots == len(self._frames):
            grown = lazy_zeros((2 * self._slots, *self._frames.shape[1:]), np.uint8)
            grown[:self._slots] = self._frames
            self._frames, self._index = grown, np.concatenate([self._index, np.zeros_like(self._index)])
        self._frames[self._slots], self._index[self._slots] = views, n
        self._slots += 1
        if n == len(self._states):
            self._states = np.concatenate([self._states, np.zeros_like(self._states)])
        row = self._states[n]
        row[:7], row[7:8], row[8:14] = joint_position, gripper_position, cartesian_position
        if n:
            self._states[n - 1, 14:] = action
        self._length = n + 1

    def episode(self, instruction: str, metadata: dict[str, Any] | None = None) -> Episode:
        """The episode so far; its frames are read-only (with ``"all"``, views of the record itself)."""
        t, s = self._length, self._states
        if self.record_frames == "all":
            frames, recorded = self._frames[:t], None
        else:
            frames, recorded = lazy_zeros((t, *self._frames.shape[1:]), np.uint8), self._index[:self._slots].copy()
            frames[recorded] = self._frames[:self._slots]
        frames = frames.view()
        frames.flags.writeable = False
        return Episode(frames={v: frames[:, i] for i, v in enumerate(VIEW_NAMES)},
                       joint_position=s[:t, :7].copy(), gripper_position=s[:t, 7:8].copy(),
                       cartesian_position=s[:t, 8:14].copy(), actions=s[:t - 1, 14:].copy(), instruction=instruction,
                       fps=self.fps, metadata=dict(metadata or {}), recorded_frames=recorded)


def collage(ext1: np.ndarray, ext2: np.ndarray, wrist: np.ndarray) -> np.ndarray:
    """Tile three views into DROID's 2x2 collage: exterior 1 | exterior 2 on top, wrist bottom-left.

    Works on single frames (H, W, 3) or stacks (..., H, W, 3); the bottom-right tile is black.
    """
    if not (ext1.shape == ext2.shape == wrist.shape):
        raise ValueError(f"views must share a shape, got {ext1.shape}, {ext2.shape}, {wrist.shape}")
    top = np.concatenate([ext1, ext2], axis=-2)
    bottom = np.concatenate([wrist, np.zeros_like(wrist)], axis=-2)
    return np.concatenate([top, bottom], axis=-3)


def write_video(path: str, frames: np.ndarray, fps: float = 15.0) -> str:
    """Write uint8 frames (T, H, W, 3) to an mp4 with imageio; returns the path."""
    import imageio.v2 as imageio

    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ValueError(f"frames must be uint8 (T, H, W, 3), got {frames.dtype} {frames.shape}")
    with imageio.get_writer(path, fps=fps, codec="libx264", macro_block_size=1, quality=8) as w:
        for f in frames:
            w.append_data(f)
    return path
