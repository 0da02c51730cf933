"""Read episodes and fixed training clips from a SimDROID dataset or the real DROID sample.

Two layouts are recognised automatically (:func:`detect_layout`):

* ``"simdroid"`` -- what :mod:`neuralsim.data.writer` writes (``meta/info.json``,
  ``meta/episodes.jsonl``, ``data/*.parquet``, ``videos/<view>/*.mp4``); 15 Hz, one frame per
  control step.
* ``"droid_real"`` -- the Ctrl-World DROID subset in ``shared/data/droid_real``
  (``annotation/{train,val}/<id>.json`` + ``videos/<split>/<id>/{0,1,2}.mp4``).  Checked on the 11
  episodes: files ``0``/``1`` are the two exterior cameras and ``2`` the wrist camera (it moves with
  the hand; its mean frame-to-frame change is 2-10x the exterior ones'), so they map to
  ``exterior_image_1_left``, ``exterior_image_2_left``, ``wrist_image_left``.  Videos are 320x192
  and **5 Hz**: video frame ``i`` is 15 Hz step ``3 i`` exactly (``states[i]`` equals
  ``observation.state.cartesian_position[3 i]`` and ``gripper_position[3 i]`` to the bit).  The reader
  infers that stride per episode, takes ``states`` (cartesian + gripper) as the video-rate state,
  subsamples ``joint_position`` at the same steps, and uses as the action of frame ``i`` the **mean**
  of the 15 Hz actions ``3 i .. 3 i + 2`` (the command over the interval to the next frame).  Frames
  are resized to ``image_size`` x ``image_size`` with ffmpeg's area filter (the 5:3 aspect is not
  kept; the world model wants square views).  Episodes carry ``fps = 5``.  Ctrl-World also publishes a
  *video-rate* layout (``joints`` and ``states`` per video frame, no ``raw_length``, ``observation.state.*``
  or ``action.*``): it has no commands to take the actions from, so it is refused with a
  :class:`DatasetError` naming the missing keys (:data:`DROID_REAL_KEYS`).

:class:`ClipDataset` cuts every episode into fixed windows of ``clip_length`` frames (start ``0,
stride, 2 stride, ...`` plus one window ending at the last frame), so ``dataset[i]`` is the same clip
on every call -- the world-model trainer caches latents by index.  Episodes shorter than
``clip_length`` are **skipped** with a warning (padding would teach the model frozen frames).
Decoded episodes are kept in an LRU cache bounded by ``cache_bytes``.

Measured on the shared 2-core CPU (64x64, clip_length 16, other jobs running): the first pass over
a 20-episode SimDROID dataset (250 clips, every episode decoded once) ~23 items/s; random access
with the cache warm 300-3800 items/s (a copy of 0.6 MB per item); with no cache, where every item
decodes its whole episode (3 mp4s), ~4 items/s.  Real DROID sample (decoding 320x192 and resizing):
~8 items/s first pass, ~2 items/s uncached.  Keep ``cache_bytes`` above the dataset's decoded size
(about 37 KB per frame at 64x64, i.e. ~5.5 MB per 150-step episode) when training the autoencoder.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..episode import VIEW_NAMES, Episode
from .writer import CODEBASE_VERSION, DATA_PATH, EPISODES_PATH, INFO_PATH, STATE_COLUMNS, VIDEO_PATH

log = logging.getLogger(__name__)

LAYOUTS = ("simdroid", "droid_real")
#: Real DROID sample: video file name per view (checked, see the module docstring).
DROID_REAL_VIEW_FILES = {"exterior_image_1_left": "0", "exterior_image_2_left": "1", "wrist_image_left": "2"}
DROID_REAL_SPLITS = ("train", "val")
#: Keys a real DROID annotation file must hold: the video-rate ``states`` and the 15 Hz robot state and commands.
DROID_REAL_KEYS = ("video_length", "raw_length", "states", "videos", "observation.state.cartesian_position",
                   "observation.state.joint_position", "action.joint_velocity", "action.gripper_position")
DROID_CONTROL_HZ = 15.0


class DatasetError(ValueError):
    """A dataset directory is missing, empty, or not in a layout this reader knows."""


# ----------------------------------------------------------------------------- layout and index
def detect_layout(root: str | Path) -> str:
    """``"simdroid"`` (``meta/episodes.jsonl`` or ``meta/info.json``) or ``"droid_real"`` (``annotation/``)."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"dataset directory {str(root)!r} does not exist")
    if (root / EPISODES_PATH).is_file() or (root / INFO_PATH).is_file():
        return "simdroid"
    if (root / "annotation").is_dir():
        return "droid_real"
    raise DatasetError(f"{str(root)!r} is not a dataset: expected {EPISODES_PATH} (SimDROID, written by "
                       "`neuralsim data generate`) or annotation/ (real DROID sample)")


def list_episodes(root: str | Path, split: str | None = None) -> list[dict[str, Any]]:
    """The episode records of a dataset, sorted by ``episode_index``.

    SimDROID: the lines of ``meta/episodes.jsonl`` (a torn last line from a crash is skipped with a
    warning).  Real DROID: one synthesised record per annotation file (``episode_index`` is the
    position in (split, id) order; ``id``, ``split``, ``instruction``, ``success``, ``length``,
    ``fps``).  ``split`` selects ``meta/info.json``'s ``splits`` range (SimDROID) or the annotation
    folder (real DROID); None means all episodes.
    """
    root = Path(root)
    if detect_layout(root) == "droid_real":
        return _droid_real_records(root, split)
    return _simdroid_records(root, split)


def _simdroid_records(root: Path, split: str | None) -> list[dict[str, Any]]:
    path = root / EPISODES_PATH
    info = _read_json(root / INFO_PATH) if (root / INFO_PATH).is_file() else {}
    version = info.get("codebase_version", CODEBASE_VERSION)
    if version != CODEBASE_VERSION:
        raise DatasetError(f"{str(root)!r} was written as {version!r}; this reader knows {CODEBASE_VERSION!r}")
    by_index: dict[int, dict] = {}
    lines = path.read_text().splitlines() if path.is_file() else []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            idx = int(rec["episode_index"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            if n == len(lines):
                log.warning("%s:%d: skipping a torn last line (%s)", path, n, e)
                continue
            raise DatasetError(f"{path}:{n}: not an episode record: {line[:120]!r}") from e
        by_index[idx] = rec
    records = [by_index[i] for i in sorted(by_index)]
    if split is not None:
        splits = info.get("splits") or {}
        if split not in splits:
            raise DatasetError(f"split {split!r} not in {str(root / INFO_PATH)!r}; valid: {sorted(splits)} or None")
        lo, hi = (int(x) for x in str(splits[split]).split(":"))
        records = records[lo:hi]
    return records


def dataset_scene(root: str | Path) -> str:
    """The SimDROID scene a dataset's episodes show: its ``meta/info.json`` ``generation.scene`` (``"classic"``,
    ``SimDROID-v0``, where none is recorded: every dataset written before scenes existed)."""
    path = Path(root) / INFO_PATH
    return _info_scene(_read_json(path) if path.is_file() else {})


def _info_scene(info: dict) -> str:
    return (info.get("generation") or {}).get("scene", "classic")


def _droid_real_records(root: Path, split: str | None) -> list[dict[str, Any]]:
    if split is not None and split not in DROID_REAL_SPLITS:
        raise DatasetError(f"split {split!r} is not one of the real DROID sample's {DROID_REAL_SPLITS} (or None)")
    records = []
    for s in DROID_REAL_SPLITS if split is None else (split,):
        files = sorted((root / "annotation" / s).glob("*.json"), key=lambda p: (len(p.stem), p.stem))
        for f in files:
            ann = _read_droid_annotation(f)
            texts = [t for t in ann.get("texts", []) if t]
            records.append({"episode_index": len(records), "id": f"{s}/{f.stem}", "split": s,
                            "instruction": texts[0] if texts else "", "success": bool(ann.get("success", 0)),
                            "length": int(ann["video_length"]), "raw_length": int(ann["raw_length"]),
                            "source": "droid_real"})
    return records


# ----------------------------------------------------------------------------- decoding
def decode_video(path: str | Path, size: int | tuple[int, int] | None = None) -> np.ndarray:
    """Decode an mp4 to uint8 (T, H, W, 3) with imageio's ffmpeg; ``size`` (side or (H, W)) resizes (area)."""
    import imageio_ffmpeg
    from imageio_ffmpeg._parsing import parse_ffmpeg_header

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"video {str(path)!r} does not exist")
    cmd = [imageio_ffmpeg.get_ffmpeg_exe(), "-nostdin", "-hide_banner", "-i", str(path)]
    if size is not None:
        h, w = (size, size) if isinstance(size, int) else size
        cmd += ["-vf", f"scale={w}:{h}:flags=area"]
    cmd += ["-f", "rawvideo", "-pix_fmt", "rgb24", "-"]
    proc = subprocess.run(cmd, capture_output=True, check=False)
    err = proc.stderr.decode(errors="replace")
    if proc.returncode != 0:
        raise DatasetError(f"ffmpeg could not decode {str(path)!r}: {err[-400:]}")
    if size is None:
        w, h = parse_ffmpeg_header(err)["size"]
    data = np.frombuffer(proc.stdout, dtype=np.uint8)
    if data.size == 0 or data.size % (w * h * 3):
        raise DatasetError(f"video {str(path)!r} decoded to {data.size} bytes, not whole {w}x{h} RGB frames")
    return data.reshape(-1, h, w, 3)


@dataclass
class LoadedEpisode:
    """A decoded episode, arrays aligned per frame (T rows each)."""

    frames: np.ndarray  # (T, V, H, W, 3) uint8, views in VIEW_NAMES order
    joint_position: np.ndarray  # (T, 7) float32
    gripper_position: np.ndarray  # (T, 1) float32
    cartesian_position: np.ndarray  # (T, 6) float32
    actions: np.ndarray  # (T, 8) float32: action after frame t (SimDROID: last row = hold)
    fps: float
    record: dict
    """The episode's record (:func:`list_episodes`); a SimDROID one carries its dataset's ``scene``
    (:func:`dataset_scene`) unless it names its own, so :meth:`to_episode`'s metadata says which scene it shows."""
    objects: "ObjectState | None" = None
    """The movable objects' recorded state (None for a dataset without ``ground_truth.object_pose``)."""

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.frames, self.joint_position, self.gripper_position,
                                      self.cartesian_position, self.actions))

    def __len__(self) -> int:
        return len(self.frames)

    def to_episode(self) -> Episode:
        rec = self.record
        return Episode(frames={v: self.frames[:, i] for i, v in enumerate(VIEW_NAMES)},
                       joint_position=self.joint_position, gripper_position=self.gripper_position,
                       cartesian_position=self.cartesian_position, actions=self.actions[:-1],
                       instruction=rec.get("instruction", ""), fps=self.fps, metadata=dict(rec))


@dataclass
class ObjectState:
    """Per-frame state of an episode's K movable objects (SimDROID's cubes), from its ``ground_truth.*`` columns."""

    names: list[str]
    """The objects' names (``"<colour>_cube"``), the order of every K axis below."""
    pose: np.ndarray
    """(T, K, 7) float32: position [m] then orientation as a wxyz quaternion, world frame."""
    held: np.ndarray
    """(T,) int: index of the object held between both fingers, -1 for none."""
    touched: np.ndarray
    """(T,) int: index of the first object touching any part of the robot, -1 for none."""

    @property
    def position(self) -> np.ndarray:
        """(T, K, 3) [m]."""
        return self.pose[..., :3]

    def __getitem__(self, frames) -> "ObjectState":
        """The same objects over a slice of the frames."""
        return ObjectState(list(self.names), self.pose[frames], self.held[frames], self.touched[frames])

    def contact_phases(self) -> np.ndarray:
        """(T,) the contact phase of each frame (:data:`CONTACT_PHASES`): ``carry`` while a cube is held between
        both fingers, ``contact`` while one touches the robot otherwise (a push, a grasp closing), ``after`` once
        every contact has ended, ``before`` until the first one."""
        holding, touching = self.held >= 0, self.touched >= 0
        contact_so_far = np.logical_or.accumulate(holding | touching) if len(holding) else holding
        return np.select([holding, touching, contact_so_far], ["carry", "contact", "after"], "before")


#: The labels of :meth:`ObjectState.contact_phases`, in the order a pick goes through them.
CONTACT_PHASES = ("before", "contact", "carry", "after")


#: Parquet columns of :class:`ObjectState`.
OBJECT_STATE_COLUMNS = ("ground_truth.object_pose", "ground_truth.held_object", "ground_truth.touched_object")


def read_object_state(root: str | Path, record: dict[str, Any]) -> ObjectState | None:
    """The recorded object state of a SimDROID episode, or None when its dataset predates those columns (or is a real
    DROID one): absent, never zeros.  A dataset with the columns but a record without ``objects`` names is a
    DatasetError."""
    import pyarrow.parquet as pq

    root = Path(root)
    if detect_layout(root) == "droid_real":
        return None
    idx = int(record["episode_index"])
    data_path = root / DATA_PATH.format(episode_index=idx)
    names = set(pq.read_schema(data_path).names)
    if not all(c in names for c in OBJECT_STATE_COLUMNS):
        return None
    objects = record.get("objects")
    if not objects:
        raise DatasetError(f"episode {idx} of {str(root)!r} has object-state columns but no 'objects' names")
    table = pq.read_table(data_path, columns=list(OBJECT_STATE_COLUMNS))
    flat = table.column(OBJECT_STATE_COLUMNS[0]).combine_chunks().flatten().to_numpy(zero_copy_only=False)
    pose = np.asarray(flat, np.float32).reshape(table.num_rows, len(objects), 7)
    held, touched = (np.asarray(table.column(c).to_numpy(), np.int64) for c in OBJECT_STATE_COLUMNS[1:])
    return ObjectState(list(objects), pose, held, touched)


def load_episode(root: str | Path, record: dict[str, Any], image_size: int | None = None,
                 layout: str | None = None) -> LoadedEpisode:
    """Decode the episode described by ``record`` (an item of :func:`list_episodes`)."""
    root = Path(root)
    layout = layout or detect_layout(root)
    if layout == "droid_real":
        return _load_droid_real(root, record, image_size)
    return _load_simdroid(root, record, image_size)


def read_actions(root: str | Path, record: dict[str, Any], layout: str | None = None) -> np.ndarray:
    """The episode's actions (T, 8) float32, as :func:`load_episode` gives them, without decoding its videos
    (SimDROID: one parquet column; real DROID reads the whole annotation)."""
    return read_joints_and_actions(root, record, layout)[1]


def read_joints_and_actions(root: str | Path, record: dict[str, Any], layout: str | None = None
                            ) -> tuple[np.ndarray, np.ndarray]:
    """The episode's joint positions (T, 7) and actions (T, 8) float32, as :func:`load_episode` gives them, without
    decoding its videos (SimDROID: one parquet read; real DROID reads the whole annotation)."""
    root = Path(root)
    layout = layout or detect_layout(root)
    if layout == "droid_real":
        ep = _load_droid_real(root, record, 16)
        return ep.joint_position, ep.actions
    cols = read_simdroid_columns(root, record, {"observation.state.joint_position": 7, "action": 8})
    return cols["observation.state.joint_position"], cols["action"]


def read_simdroid_columns(root: str | Path, record: dict, widths: dict[str, int]) -> dict[str, np.ndarray]:
    """Columns ``widths`` (name -> values per row) of a SimDROID episode's parquet file, float32 (T, width), without
    decoding its videos, e.g. ``{"observation.state.cartesian_position": 6}``; a missing column is a DatasetError."""
    import pyarrow.parquet as pq

    idx = int(record["episode_index"])
    data_path = Path(root) / DATA_PATH.format(episode_index=idx)
    if not data_path.is_file():
        raise FileNotFoundError(f"episode {idx}: {str(data_path)!r} is missing")
    table = pq.read_table(data_path)
    out = {}
    for name, width in widths.items():
        if name not in table.column_names:
            raise DatasetError(f"{str(data_path)!r} has no column {name!r}")
        flat = table.column(name).combine_chunks().flatten().to_numpy(zero_copy_only=False)
        out[name] = np.asarray(flat, np.float32).reshape(-1, width)
    return out


def _load_simdroid(root: Path, record: dict, image_size: int | None) -> LoadedEpisode:
    idx = int(record["episode_index"])
    cols = read_simdroid_columns(root, record, {**dict(zip(STATE_COLUMNS, (7, 1, 6), strict=True)), "action": 8})
    states = {attr: cols[c] for c, attr in STATE_COLUMNS.items()}
    actions = cols["action"]
    frames = list(_decoded_views(root, idx, image_size).transpose(1, 0, 2, 3, 4))
    n = min(len(actions), *(len(f) for f in frames))
    if n != len(actions) or any(len(f) != n for f in frames):
        log.warning("episode %d: %d parquet rows but video frames %s; using the first %d", idx, len(actions),
                    [len(f) for f in frames], n)
    info = _read_json(root / INFO_PATH) if (root / INFO_PATH).is_file() else {}
    objects = read_object_state(root, record)
    return LoadedEpisode(frames=np.stack([f[:n] for f in frames], axis=1), actions=actions[:n],
                         fps=float(info.get("fps", DROID_CONTROL_HZ)),
                         record={"scene": _info_scene(info), **record},
                         objects=None if objects is None else objects[:n], **{k: v[:n] for k, v in states.items()})


#: Decoded frames of SimDROID episodes are kept here (inside the dataset root) as one .npy per episode.
FRAME_CACHE_DIR = ".frame_cache"


def _decoded_views(root: Path, idx: int, image_size: int | None) -> np.ndarray:
    """The three views of episode ``idx`` as uint8 (T, V, H, W, 3), decoded once and then read from disk.

    Decoding three mp4s costs ~0.2-0.7 s per episode on this CPU (an ffmpeg process per view), which
    dominated training steps; the decoded arrays (~37 KB per frame at 64x64) are written to
    ``root/.frame_cache/<size>/episode_XXXXXX.npy`` and reused while they are newer than the videos.
    """
    videos = [root / VIDEO_PATH.format(video_key=v, episode_index=idx) for v in VIEW_NAMES]
    raw = [v.with_suffix(".npy") for v in videos]
    if not any(v.is_file() for v in videos) and all(r.is_file() for r in raw):  # written with frames_format="npy"
        frames = [np.load(r, allow_pickle=False) for r in raw]
        side = frames[0].shape[1]
        if image_size is not None and any(f.shape[1:3] != (image_size, image_size) for f in frames):
            raise DatasetError(f"episode {idx}: raw frames are {frames[0].shape[1:3]}, "
                               f"asked for {image_size}x{image_size} "
                               f"(a dataset stored as .npy is read at the size it was written, here {side})")
        n = min(len(f) for f in frames)
        return np.stack([f[:n] for f in frames], axis=1)
    cache = root / FRAME_CACHE_DIR / str(image_size or "native") / f"episode_{idx:06d}.npy"
    try:
        if cache.is_file() and cache.stat().st_mtime >= max(v.stat().st_mtime for v in videos):
            return np.load(cache, allow_pickle=False)
    except (OSError, ValueError) as e:  # unreadable or torn cache file: decode again
        log.debug("frame cache %s unusable (%s); decoding", cache, e)
    frames = [decode_video(v, image_size) for v in videos]
    n = min(len(f) for f in frames)
    views = np.stack([f[:n] for f in frames], axis=1)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp.npy")
        np.save(tmp, views, allow_pickle=False)
        os.replace(tmp, cache)
    except OSError as e:  # read-only dataset: still works, just slower
        log.debug("cannot write frame cache %s: %s", cache, e)
    return views


def warm_frame_cache(root: str | Path, image_size: int | None = 64, workers: int = 1, progress: bool = True) -> int:
    """Decode every episode of a SimDROID dataset into its frame cache (see :func:`_decoded_views`).

    Returns the number of episodes.  Training calls it first so that every stage reads frames from disk.
    """
    root = Path(root)
    if detect_layout(root) != "simdroid":
        return 0
    indices = [int(r["episode_index"]) for r in list_episodes(root)]
    jobs = [(str(root), i, image_size) for i in indices]
    if progress:
        from tqdm.auto import tqdm
    else:
        def tqdm(it, **_):
            return it
    if workers <= 1:
        for job in tqdm(jobs, desc="decoding videos", unit="ep"):
            _warm_one(job)
    else:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(workers) as pool:
            list(tqdm(pool.map(_warm_one, jobs, chunksize=4), total=len(jobs), desc="decoding videos", unit="ep"))
    return len(jobs)


def _warm_one(job: tuple[str, int, int | None]) -> None:
    root, idx, size = job
    _decoded_views(Path(root), idx, size)


def _load_droid_real(root: Path, record: dict, image_size: int | None) -> LoadedEpisode:
    split, ep_id = record["id"].split("/")
    ann = _read_droid_annotation(root / "annotation" / split / f"{ep_id}.json")
    states = np.asarray(ann["states"], np.float32)  # (L, 7): cartesian (6) + gripper at video frame times
    raw_cart = np.asarray(ann["observation.state.cartesian_position"], np.float32)
    raw_len, length = len(raw_cart), len(states)
    stride = _droid_real_stride(raw_cart, states)
    steps = stride * np.arange(length)  # 15 Hz step of each video frame
    joints = np.asarray(ann["observation.state.joint_position"], np.float32).reshape(raw_len, 7)[steps]
    raw_act = np.concatenate([np.asarray(ann["action.joint_velocity"], np.float32).reshape(raw_len, 7),
                              np.asarray(ann["action.gripper_position"], np.float32).reshape(raw_len, 1)], axis=1)
    actions = np.stack([raw_act[s:min(s + stride, raw_len)].mean(0) for s in steps])  # (L, 8)
    paths = {Path(v["video_path"]).stem: root / v["video_path"] for v in ann["videos"]}
    frames = []
    for view in VIEW_NAMES:
        key = DROID_REAL_VIEW_FILES[view]
        if key not in paths:
            raise DatasetError(f"{record['id']}: no video {key}.mp4 for {view} among {sorted(paths)}")
        frames.append(decode_video(paths[key], image_size))
    n = min(length, *(len(f) for f in frames))
    if n != length:
        log.warning("%s: %d states but video frames %s; using the first %d", record["id"], length,
                    [len(f) for f in frames], n)
    return LoadedEpisode(frames=np.stack([f[:n] for f in frames], axis=1), joint_position=joints[:n],
                         gripper_position=states[:n, 6:7].copy(), cartesian_position=states[:n, :6].copy(),
                         actions=actions[:n], fps=DROID_CONTROL_HZ / stride,
                         record={**record, "fps": DROID_CONTROL_HZ / stride, "raw_stride": stride})


def _read_droid_annotation(path: Path) -> dict:
    """A real DROID annotation file, refused with a :class:`DatasetError` naming what it lacks of
    :data:`DROID_REAL_KEYS`."""
    ann = _read_json(path)
    missing = [k for k in DROID_REAL_KEYS if k not in ann]
    if missing:
        why = ""
        if "joints" in ann and "states" in ann:
            why = (" It is Ctrl-World's video-rate layout (`joints` and `states` per video frame): "
                   "the reader needs the "
                   "15 Hz robot state and commands, since each frame's action is the mean of the 15 Hz "
                   "`action.joint_velocity` / `action.gripper_position` until the next frame, "
                   "and this layout has none.")
        raise DatasetError(f"{str(path)!r} lacks {missing} (has {sorted(ann)}).{why}")
    return ann


def _droid_real_stride(raw_cart: np.ndarray, states: np.ndarray) -> int:
    """The k with ``states[i, :6] == raw_cart[k i]`` (3 on the sample); falls back to the length ratio."""
    length = len(states)
    for k in range(1, 11):
        if k * (length - 1) < len(raw_cart) and np.allclose(raw_cart[k * np.arange(length)], states[:, :6], atol=1e-6):
            return k
    k = max(1, int(round(len(raw_cart) / max(length, 1))))
    log.warning("real DROID states do not match any integer subsampling of the 15 Hz states; assuming stride %d", k)
    return k


def read_episode(root: str | Path, index: int, image_size: int | None = None) -> Episode:
    """Episode ``index`` (its ``episode_index``) as an :class:`Episode`; ``image_size`` resizes the views."""
    records = {int(r["episode_index"]): r for r in list_episodes(root)}
    if index not in records:
        raise IndexError(f"no episode {index} in {str(root)!r}; it has {len(records)} episodes "
                         f"(indices {min(records, default=None)}..{max(records, default=None)})")
    return load_episode(root, records[index], image_size).to_episode()


# ----------------------------------------------------------------------------- clips
class _ByteLRU:
    """Least-recently-used cache of decoded episodes, bounded by their total bytes (the newest always stays)."""

    def __init__(self, budget: int):
        self.budget, self.used = int(budget), 0
        self.items: OrderedDict[int, LoadedEpisode] = OrderedDict()

    def get(self, key: int) -> LoadedEpisode | None:
        ep = self.items.get(key)
        if ep is not None:
            self.items.move_to_end(key)
        return ep

    def put(self, key: int, ep: LoadedEpisode) -> None:
        self.items[key] = ep
        self.used += ep.nbytes
        while self.used > self.budget and len(self.items) > 1:
            _, old = self.items.popitem(last=False)
            self.used -= old.nbytes


class ClipDataset:
    """Fixed windows of ``clip_length`` frames over every episode of a dataset (map-style).

    ``dataset[i]`` is a dict of torch tensors, the layout of
    :class:`neuralsim.world_model.synthetic.SyntheticClipDataset`:

    * ``frames`` uint8 (T, 3, S, S, 3), views ``exterior_image_1_left, exterior_image_2_left,
      wrist_image_left``;
    * ``cartesian_position`` float32 (T, 6), ``gripper_position`` (T, 1), ``joint_position`` (T, 7),
      ``actions`` (T, 8) (the action taken after each frame);
    * ``episode_index`` int64 () and ``frame_index`` int64 (T,) say where the clip came from.

    Args:
        root: a SimDROID dataset or the real DROID sample (layout detected).
        clip_length: frames per clip.
        stride: frames between window starts; default ``clip_length // 2``.  A last window ending on
            the episode's final frame is always added, so every frame is covered.
        image_size: side of the square frames (resized while decoding when the files differ).
        split: see :func:`list_episodes`.
        cache_episodes: keep decoded episodes in memory (LRU, ``cache_bytes`` in total).
        cache_bytes: byte budget of that cache, default 4 GiB (a 64x64 SimDROID episode of 150 steps
            is ~5.5 MB decoded, so ~700 such episodes).

    It does not subclass ``torch.utils.data.Dataset`` so that reading episodes never imports torch;
    a ``DataLoader`` accepts it as it is.
    """

    def __init__(self, root: str | Path, clip_length: int = 16, stride: int | None = None, image_size: int = 64,
                 split: str | None = None, cache_episodes: bool = True, cache_bytes: int = 4 << 30):
        if clip_length < 1:
            raise ValueError(f"clip_length must be >= 1, got {clip_length}")
        stride = max(1, clip_length // 2) if stride is None else stride
        if stride < 1:
            raise ValueError(f"stride must be >= 1, got {stride}")
        if image_size < 8:
            raise ValueError(f"image_size must be >= 8, got {image_size}")
        self.root, self.clip_length, self.stride, self.image_size = Path(root), clip_length, stride, image_size
        self.layout = detect_layout(self.root)
        self.records = list_episodes(self.root, split)
        if not self.records:
            raise DatasetError(f"dataset {str(self.root)!r} (split {split!r}) has no episodes")
        self.windows: list[tuple[int, int]] = []  # (position in self.records, start frame)
        skipped = []
        for pos, rec in enumerate(self.records):
            length = int(rec["length"])
            if length < clip_length:
                skipped.append((rec["episode_index"], length))
                continue
            starts = list(range(0, length - clip_length + 1, stride))
            if starts[-1] != length - clip_length:
                starts.append(length - clip_length)
            self.windows += [(pos, s) for s in starts]
        if skipped:
            log.warning("%s: skipped %d episodes shorter than clip_length=%d: %s", self.root, len(skipped),
                        clip_length, skipped[:10])
        if not self.windows:
            raise DatasetError(f"no episode of {str(self.root)!r} has clip_length={clip_length} frames "
                               f"(longest: {max(int(r['length']) for r in self.records)})")
        self._cache = _ByteLRU(cache_bytes if cache_episodes else 0)

    def __len__(self) -> int:
        return len(self.windows)

    def episode(self, pos: int) -> LoadedEpisode:
        """The decoded episode at position ``pos`` of ``self.records`` (cached)."""
        ep = self._cache.get(pos)
        if ep is None:
            ep = load_episode(self.root, self.records[pos], self.image_size, self.layout)
            self._cache.put(pos, ep)
        return ep

    def __getitem__(self, index: int) -> dict:
        import torch

        if not -len(self) <= index < len(self):
            raise IndexError(f"clip index {index} out of range [0, {len(self)})")
        pos, start = self.windows[index]
        ep = self.episode(pos)
        end = start + self.clip_length
        if end > len(ep):
            raise DatasetError(f"episode {self.records[pos]['episode_index']} decoded to {len(ep)} frames, "
                               f"fewer than its record's length {self.records[pos]['length']}")
        sl = slice(start, end)

        def t(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.array(a[sl]))  # a copy: callers may write into it

        return {
            "frames": t(ep.frames),
            "cartesian_position": t(ep.cartesian_position),
            "gripper_position": t(ep.gripper_position),
            "joint_position": t(ep.joint_position),
            "actions": t(ep.actions),
            "episode_index": torch.tensor(int(self.records[pos]["episode_index"])),
            "frame_index": torch.arange(start, end),
        }


class ConcatClipDataset:
    """Several :class:`ClipDataset` as one: clip ``i`` runs through the parts in order.

    What ``neuralsim train --data a,b`` trains on, e.g. expert episodes mixed with no-skill ones
    (``neuralsim data generate --actor idle``).  Each part keeps its own records, windows and latent
    cache; a uniformly drawn clip index picks each part in proportion to its number of clips.

    Args:
        parts: datasets sharing ``clip_length`` and ``image_size``.
    """

    def __init__(self, parts):
        self.parts = list(parts)
        if not self.parts:
            raise ValueError("ConcatClipDataset needs at least one dataset")
        shapes = {(p.clip_length, p.image_size) for p in self.parts}
        if len(shapes) != 1:
            raise ValueError(f"the datasets disagree on (clip_length, image_size): {sorted(shapes)}")
        self.clip_length, self.image_size = self.parts[0].clip_length, self.parts[0].image_size
        sizes = np.array([len(p) for p in self.parts], dtype=np.int64)
        #: first global clip index of each part
        self.offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        self._len = int(sizes.sum())

    def __len__(self) -> int:
        return self._len

    def locate(self, index: int) -> tuple[int, int]:
        """(part, clip index within that part) of global clip ``index``."""
        if not -self._len <= index < self._len:
            raise IndexError(f"clip index {index} out of range [0, {self._len})")
        index %= self._len
        part = int(np.searchsorted(self.offsets, index, side="right")) - 1
        return part, index - int(self.offsets[part])

    def __getitem__(self, index: int) -> dict:
        part, local = self.locate(int(index))
        return self.parts[part][local]


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise DatasetError(f"{str(path)!r} is not valid JSON: {e}") from e
