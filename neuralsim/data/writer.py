"""Write episodes to disk in a LeRobot-style layout (one parquet + one mp4 per view per episode).

Layout of a dataset root (paths are templates recorded in ``meta/info.json``)::

    meta/info.json                          fps, image size, features, totals, generation parameters
    meta/episodes.jsonl                     one JSON line per *finished* episode (see ``episode_record``)
    data/episode_000000.parquet             per-frame states and actions (columns below)
    videos/<view>/episode_000000.mp4        one H.264 video per camera view, DROID's view names

It is LeRobot's v2 layout without the ``chunk-XXX`` level and with DROID's view names as video
keys, which is what ``judges/offline/dataset.py`` reads.

Parquet columns (one row per frame, T rows; fixed-size lists of float32 unless said otherwise):

=====================================  =====  ====================================================
``observation.state.joint_position``   7      joint positions [rad]
``observation.state.gripper_position`` 1      0 open ... 1 closed
``observation.state.cartesian_position`` 6    flange xyz [m] + extrinsic XYZ Euler [rad]
``action``                             8      DROID action applied *after* this frame (7 normalised
                                              joint velocities, gripper position); the last row has
                                              no applied action and holds: zero velocities and the
                                              previous gripper command (``next.done`` marks it)
``action.joint_velocity``              7      ``action[:7]``
``action.gripper_position``            1      ``action[7:]``
``timestamp``                          float32  ``frame_index / fps`` [s]
``frame_index``, ``episode_index``     int64
``next.done``                          bool   True on the last row
``ground_truth.*``                     any    optional per-frame extras; ``neuralsim data generate`` writes:
``ground_truth.rubric_level``           int8   the 0-5 rubric level so far
``ground_truth.success``                bool   the task's goal holds at this frame
``ground_truth.target_distance``        float32  tool point to target cube [m]
``ground_truth.object_pose``           7 K    the K cubes, scene order (the record's ``objects`` names them):
                                              xyz [m] + wxyz quaternion each, world frame
``ground_truth.held_object``            int8   index of the cube held between both fingers, -1 none
``ground_truth.touched_object``         int8   index of the first cube touching the robot, -1 none
=====================================  =====  ====================================================

Datasets written before the object-state columns still read; ``neuralsim.data.reader.read_object_state`` (and
``LoadedEpisode.objects``) is then None, not zeros.

Video encoding: libx264, ``yuv444p``, CRF 10 (``DEFAULT_CRF``).  H.264 is lossy.  Measured decode
round-trip PSNR against the simulator's frames (64x64, 8 expert episodes of 76-150 frames):
exterior views 44.9 / 45.1 dB (min 44.4), wrist view 41.6 dB (min 40.4); ~1.6 KB per frame for
all three views (~0.2 MB per 150-step episode).  The common ``yuv420p`` caps PSNR at ~30-32 dB
whatever the CRF (measured 30-32 dB from CRF 0 to 20), because halving the chroma resolution of a
64x64 image smears the cubes' colours; so 4:4:4 is used even though some browsers will not play it
(ffmpeg, imageio and the readers here all do).  CRF 0 would give ~53 dB at ~2x the size.

Crash safety: every file is written to a ``.tmp`` sibling and renamed; the ``episodes.jsonl`` line
is appended last (by the caller, :func:`append_record`), so an interrupted episode has no record and
is simply written again on resume.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..episode import VIEW_NAMES, Episode

log = logging.getLogger(__name__)

#: Layout version written to ``meta/info.json``; readers check it.
CODEBASE_VERSION = "neuralsim/v1"
DATA_PATH = "data/episode_{episode_index:06d}.parquet"
VIDEO_PATH = "videos/{video_key}/episode_{episode_index:06d}.mp4"
#: How a dataset may store its frames: H.264 videos, or raw uint8 arrays beside where the videos would be.
FRAMES_FORMATS = ("mp4", "npy")
INFO_PATH = "meta/info.json"
EPISODES_PATH = "meta/episodes.jsonl"
#: x264 constant rate factor (0 lossless ... 51 worst) and pixel format; see the module docstring.
DEFAULT_CRF = 10
DEFAULT_PIX_FMT = "yuv444p"

JOINT_NAMES = [f"panda_joint{i}" for i in range(1, 8)]
CARTESIAN_NAMES = ["x", "y", "z", "roll", "pitch", "yaw"]
STATE_COLUMNS = {  # parquet column -> Episode attribute
    "observation.state.joint_position": "joint_position",
    "observation.state.gripper_position": "gripper_position",
    "observation.state.cartesian_position": "cartesian_position",
}


def feature_spec(image_size: int, fps: float = 15.0, crf: int = DEFAULT_CRF, pix_fmt: str = DEFAULT_PIX_FMT) -> dict:
    """LeRobot-style ``features`` of ``meta/info.json``: dtype, shape and names of every column/video."""
    f32 = "float32"
    feats: dict[str, dict] = {
        "observation.state.joint_position": {"dtype": f32, "shape": [7], "names": JOINT_NAMES},
        "observation.state.gripper_position": {"dtype": f32, "shape": [1], "names": ["gripper"]},
        "observation.state.cartesian_position": {"dtype": f32, "shape": [6], "names": CARTESIAN_NAMES},
        "action": {"dtype": f32, "shape": [8], "names": [f"{j}.velocity" for j in JOINT_NAMES] + ["gripper"]},
        "action.joint_velocity": {"dtype": f32, "shape": [7], "names": JOINT_NAMES},
        "action.gripper_position": {"dtype": f32, "shape": [1], "names": ["gripper"]},
        "timestamp": {"dtype": f32, "shape": [1], "names": None},
        "frame_index": {"dtype": "int64", "shape": [1], "names": None},
        "episode_index": {"dtype": "int64", "shape": [1], "names": None},
        "next.done": {"dtype": "bool", "shape": [1], "names": None},
    }
    for view in VIEW_NAMES:
        feats[view] = {"dtype": "video", "shape": [image_size, image_size, 3], "names": ["height", "width", "channels"],
                       "info": {"video.fps": fps, "video.codec": "h264", "video.pix_fmt": pix_fmt, "video.crf": crf,
                                "video.height": image_size, "video.width": image_size, "video.channels": 3}}
    return feats


def new_info(image_size: int, fps: float = 15.0, generation: Mapping[str, Any] | None = None,
             crf: int = DEFAULT_CRF, pix_fmt: str = DEFAULT_PIX_FMT, source: str = "SimDROID-v0") -> dict:
    """A fresh ``meta/info.json`` dict (totals 0); ``source`` names the env that made the episodes."""
    return {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": "franka_panda",
        "source": source,
        "fps": float(fps),
        "image_size": int(image_size),
        "action_mode": "joint_velocity",
        "total_episodes": 0,
        "total_frames": 0,
        "splits": {},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH,
        "video_keys": list(VIEW_NAMES),
        "features": feature_spec(image_size, fps, crf, pix_fmt),
        "generation": dict(generation) if generation is not None else None,
    }


def read_info(root: str | Path) -> dict | None:
    """``meta/info.json`` as a dict, or None when the file does not exist."""
    path = Path(root) / INFO_PATH
    return json.loads(path.read_text()) if path.is_file() else None


def write_info(root: str | Path, info: Mapping[str, Any]) -> None:
    _atomic_write_text(Path(root) / INFO_PATH, json.dumps(to_jsonable(info), indent=2) + "\n")


def update_totals(root: str | Path, records: list[Mapping[str, Any]]) -> dict:
    """Set ``total_episodes``, ``total_frames`` and the ``train`` split of ``meta/info.json`` from records."""
    info = read_info(root)
    if info is None:
        raise FileNotFoundError(f"{str(Path(root) / INFO_PATH)!r} does not exist; write it with write_info first")
    info["total_episodes"] = len(records)
    info["total_frames"] = int(sum(int(r["length"]) for r in records))
    info["splits"] = {"train": f"0:{len(records)}"} if records else {}
    write_info(root, info)
    return info


# ----------------------------------------------------------------------------- episode files
def episode_paths(root: str | Path, episode_index: int) -> dict[str, Path]:
    """Paths of one episode's files: ``"data"`` and one per view name."""
    root = Path(root)
    out = {"data": root / DATA_PATH.format(episode_index=episode_index)}
    for view in VIEW_NAMES:
        out[view] = root / VIDEO_PATH.format(video_key=view, episode_index=episode_index)
    return out


def write_episode(root: str | Path, episode: Episode, episode_index: int, *,
                  extra_columns: Mapping[str, np.ndarray] | None = None,
                  crf: int = DEFAULT_CRF, pix_fmt: str = DEFAULT_PIX_FMT, frames_format: str = "mp4") -> int:
    """Write one episode's videos and parquet file (not its ``episodes.jsonl`` line); returns its length.

    Args:
        root: dataset root (created if missing).
        episode: the episode; ``actions`` must have ``num_frames - 1`` rows.
        episode_index: index used in the file names and the ``episode_index`` column.
        extra_columns: optional per-frame arrays (length T, 1-D or 2-D) stored as ``ground_truth.<name>``
            columns unless the name already contains a dot.
        frames_format: ``"mp4"`` (H.264, the default) or ``"npy"``: each view's frames stored raw as
            ``videos/<view>/episode_XXXXXX.npy`` (lossless, ~12 KB per 64x64 frame, ~15x the mp4), for a
            machine with no ffmpeg (a lent GPU box); the reader takes either.
    """
    if frames_format not in FRAMES_FORMATS:
        raise ValueError(f"frames_format must be one of {FRAMES_FORMATS}, got {frames_format!r}")
    t_len = episode.num_frames
    acts = np.asarray(episode.actions, np.float32).reshape(-1, 8)
    if len(acts) != t_len - 1:
        raise ValueError(f"episode has {t_len} frames but {len(acts)} actions; expected {t_len - 1}")
    paths = episode_paths(root, episode_index)
    for view in VIEW_NAMES:
        if frames_format == "npy":
            _write_npy(paths[view].with_suffix(".npy"), episode.frames[view])
        else:
            _write_mp4(paths[view], episode.frames[view], episode.fps, crf, pix_fmt)
    _write_parquet(paths["data"], _episode_table(episode, episode_index, acts, extra_columns))
    return t_len


def _episode_table(episode: Episode, episode_index: int, acts: np.ndarray,
                   extra_columns: Mapping[str, np.ndarray] | None):
    import pyarrow as pa

    t_len = episode.num_frames
    hold = np.zeros((1, 8), np.float32)
    if len(acts):
        hold[0, 7] = acts[-1, 7]
    action = np.concatenate([acts, hold])  # (T, 8): the last frame holds still
    cols: dict[str, Any] = {}
    for col, attr in STATE_COLUMNS.items():
        cols[col] = _fixed_list(np.asarray(getattr(episode, attr), np.float32).reshape(t_len, -1))
    cols["action"] = _fixed_list(action)
    cols["action.joint_velocity"] = _fixed_list(action[:, :7])
    cols["action.gripper_position"] = _fixed_list(action[:, 7:])
    frame_index = np.arange(t_len, dtype=np.int64)
    cols["timestamp"] = pa.array((frame_index / float(episode.fps)).astype(np.float32))
    cols["frame_index"] = pa.array(frame_index)
    cols["episode_index"] = pa.array(np.full(t_len, episode_index, np.int64))
    cols["next.done"] = pa.array(frame_index == t_len - 1)
    for name, values in (extra_columns or {}).items():
        arr = np.asarray(values)
        if len(arr) != t_len:
            raise ValueError(f"extra column {name!r} has {len(arr)} rows, the episode {t_len} frames")
        key = name if "." in name else f"ground_truth.{name}"
        cols[key] = _fixed_list(arr.reshape(t_len, -1)) if arr.ndim > 1 else pa.array(arr)
    return pa.table(cols)


def _fixed_list(arr: np.ndarray):
    import pyarrow as pa

    arr = np.ascontiguousarray(arr)
    return pa.FixedSizeListArray.from_arrays(pa.array(arr.reshape(-1)), arr.shape[1])


def _write_parquet(path: Path, table) -> None:
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp" + path.suffix)
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


def _write_mp4(path: Path, frames: np.ndarray, fps: float, crf: int, pix_fmt: str) -> None:
    import imageio.v2 as imageio

    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ValueError(f"frames must be uint8 (T, H, W, 3), got {frames.dtype} {frames.shape}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp" + path.suffix)  # keep .mp4 so ffmpeg picks the container
    with imageio.get_writer(tmp, fps=fps, codec="libx264", quality=None, macro_block_size=1, pixelformat=pix_fmt,
                            ffmpeg_log_level="error", ffmpeg_params=["-crf", str(int(crf)), "-preset", "medium"]) as w:
        for f in frames:
            w.append_data(f)
    os.replace(tmp, path)


def _write_npy(path: Path, frames: np.ndarray) -> None:
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ValueError(f"frames must be uint8 (T, H, W, 3), got {frames.dtype} {frames.shape}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.npy")
    np.save(tmp, np.ascontiguousarray(frames), allow_pickle=False)
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- episodes.jsonl
def episode_record(episode: Episode, episode_index: int, **fields: Any) -> dict:
    """The ``episodes.jsonl`` line of an episode: index, length, instruction, then ``fields`` (JSON-safe)."""
    rec = {"episode_index": int(episode_index), "length": episode.num_frames, "instruction": episode.instruction}
    rec.update(fields)
    return to_jsonable(rec)


def append_record(root: str | Path, record: Mapping[str, Any]) -> None:
    """Append one line to ``meta/episodes.jsonl`` (flushed and fsynced: it marks the episode finished)."""
    path = Path(root) / EPISODES_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(to_jsonable(record), separators=(",", ":"))
    with path.open("a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def write_records(root: str | Path, records: list[Mapping[str, Any]]) -> None:
    """Replace ``meta/episodes.jsonl`` atomically with ``records`` sorted by episode index."""
    lines = [json.dumps(to_jsonable(r), separators=(",", ":"))
             for r in sorted(records, key=lambda r: int(r["episode_index"]))]
    _atomic_write_text(Path(root) / EPISODES_PATH, "".join(ln + "\n" for ln in lines))


def save_episode(root: str | Path, episode: Episode, episode_index: int, **fields: Any) -> dict:
    """Write one episode's files and then its ``episodes.jsonl`` line; returns the record.

    For datasets written outside ``neuralsim data generate`` (e.g. policy rollouts); create
    ``meta/info.json`` first with ``write_info(root, new_info(image_size))`` and call
    :func:`update_totals` at the end.
    """
    write_episode(root, episode, episode_index)
    rec = episode_record(episode, episode_index, **fields)
    append_record(root, rec)
    return rec


# ----------------------------------------------------------------------------- helpers
def to_jsonable(x: Any) -> Any:
    """numpy scalars/arrays, tuples and paths -> plain JSON types (recursively)."""
    if isinstance(x, Mapping):
        return {str(k): to_jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, Path):
        return str(x)
    return x


def _atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
