"""Reading labelled episodes from a SimDROID dataset directory (written by ``neuralsim data generate``).

Only two things are needed: ``meta/episodes.jsonl`` (one JSON object per episode with
``episode_index``, the instruction under ``task`` or ``instruction``, and the final rubric level
under ``rubric_level``) and one mp4 per view, ``videos/<view_name>/episode_XXXXXX.mp4``.
``meta/info.json`` supplies ``fps`` (default 15) and the SimDROID scene (``generation.scene``, default classic),
which every row carries as ``scene`` unless it names its own, so the default offline judge reads each episode
with its scene's weights.  When the per-step parquet file
``data/episode_XXXXXX.parquet`` has a ``ground_truth.rubric_level`` column (the level so far at
every frame, as ``neuralsim data generate`` writes it), that column is read too: training uses it
as extra per-frame supervision.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

VIEW_NAMES = ("exterior_image_1_left", "exterior_image_2_left", "wrist_image_left")
LEVEL_KEYS = ("rubric_level", "final_rubric_level", "level")
INSTRUCTION_KEYS = ("instruction", "task", "language_instruction")


@dataclass
class LabelledEpisode:
    """An episode as judges see it (``frames``, ``instruction``, ``fps``, ``metadata``) plus its label."""

    frames: dict[str, np.ndarray]
    instruction: str
    fps: float
    label: int
    metadata: dict[str, Any] = field(default_factory=dict)
    frame_levels: np.ndarray | None = None  # (T,) rubric level so far at each frame, when recorded
    frame_distances: np.ndarray | None = None  # (T,) metres from the gripper to the target object, when recorded


def read_episode_index(root: str | Path) -> list[dict[str, Any]]:
    """The rows of ``meta/episodes.jsonl`` that carry a rubric level, with normalised keys (and the dataset's
    ``scene``)."""
    from neuralsim.data.reader import dataset_scene

    root = Path(root)
    path = root / "meta" / "episodes.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{str(root)!r} is not a SimDROID dataset: {str(path)!r} is missing "
                                "(generate one with `neuralsim data generate`)")
    scene = dataset_scene(root)
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        level = next((row[k] for k in LEVEL_KEYS if row.get(k) is not None), None)
        if level is None:
            continue
        instr = next((row[k] for k in INSTRUCTION_KEYS if isinstance(row.get(k), str)), None)
        if instr is None and isinstance(row.get("tasks"), list) and row["tasks"]:
            instr = row["tasks"][0]
        if "episode_index" not in row or instr is None:
            raise ValueError(f"{path}:{n}: needs episode_index and an instruction ({INSTRUCTION_KEYS}), got keys "
                             f"{sorted(row)}")
        rows.append({"scene": scene, **row, "episode_index": int(row["episode_index"]), "instruction": instr,
                     "rubric_level": int(level)})
    return rows


def dataset_fps(root: str | Path) -> float:
    info = Path(root) / "meta" / "info.json"
    if info.is_file():
        return float(json.loads(info.read_text()).get("fps", 15.0))
    return 15.0


def video_path(root: str | Path, view: str, episode_index: int) -> Path:
    """``videos/<view>/episode_XXXXXX.mp4`` (falls back to a search under ``videos/`` for LeRobot chunking)."""
    root = Path(root)
    name = f"episode_{episode_index:06d}.mp4"
    p = root / "videos" / view / name
    if p.is_file():
        return p
    hits = [h for h in (root / "videos").glob(f"**/{name}") if view in str(h.parent)]
    if not hits:
        raise FileNotFoundError(f"no video for view {view!r} of episode {episode_index} under {str(root / 'videos')!r}")
    return hits[0]


def read_video(path: str | Path) -> np.ndarray:
    """Decode an mp4 to uint8 (T, H, W, 3) with the ffmpeg binary that imageio ships (imageio-ffmpeg).

    ffmpeg runs to completion in one ``subprocess.run`` (no lingering pipes); the frame size comes
    from ffmpeg's own stream header.
    """
    import subprocess

    import imageio_ffmpeg
    from imageio_ffmpeg._parsing import parse_ffmpeg_header

    cmd = [imageio_ffmpeg.get_ffmpeg_exe(), "-nostdin", "-i", str(path), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"]
    proc = subprocess.run(cmd, capture_output=True, check=False)
    log = proc.stderr.decode(errors="replace")
    if proc.returncode != 0:
        raise ValueError(f"ffmpeg could not decode {str(path)!r}: {log[-500:]}")
    w, h = parse_ffmpeg_header(log)["size"]
    data = np.frombuffer(proc.stdout, dtype=np.uint8)
    if data.size == 0 or data.size % (w * h * 3):
        raise ValueError(f"video {str(path)!r} decoded to {data.size} bytes, not whole {w}x{h} RGB frames")
    return data.reshape(-1, h, w, 3).copy()


#: Per-frame columns the judge trains on, as :func:`read_ground_truth` keys them (``ground_truth.<name>``).
FRAME_LEVEL_KEY, FRAME_DISTANCE_KEY = "rubric_level", "target_distance"


def read_ground_truth(root: str | Path, episode_index: int) -> dict[str, np.ndarray]:
    """Every per-frame ``ground_truth.<name>`` column of ``data/episode_XXXXXX.parquet``, keyed by ``<name>``.

    Empty when the file or the columns are missing.  SimDROID records ``rubric_level``, ``success`` and
    ``target_distance`` (metres from the gripper's tool centre point to the target object).
    """
    path = Path(root) / "data" / f"episode_{episode_index:06d}.parquet"
    if not path.is_file():
        return {}
    import pyarrow.parquet as pq

    names = [n for n in pq.read_schema(path).names if n.startswith("ground_truth.")]
    if not names:
        return {}
    table = pq.read_table(path, columns=names)
    return {n.split(".", 1)[1]: np.asarray(table.column(n).to_numpy(zero_copy_only=False)) for n in names}


def final_goal_offset(row: dict[str, Any]) -> np.ndarray | None:
    """Where the target object ended relative to its goal: (dx, dy) in metres, from an episode record.

    The goal is the bowl (``put_in_bowl``), the pad (``push_to_pad``) or the base cube (``stack``),
    all at their final poses (SimDROID records ``final_poses``, ``target``, ``base``).  None when the
    record lacks them (other datasets, real data).
    """
    poses, target, family = row.get("final_poses"), row.get("target"), row.get("family")
    goal = {"put_in_bowl": "bowl", "push_to_pad": "pad"}.get(family, row.get("base") if family == "stack" else None)
    if not isinstance(poses, dict) or target not in poses or goal not in poses:
        return None
    return (np.asarray(poses[target][:2], np.float64) - np.asarray(poses[goal][:2], np.float64)).astype(np.float32)


def load_episode(root: str | Path, row: dict[str, Any], fps: float | None = None) -> LabelledEpisode:
    """Decode one episode's three views (and its per-frame levels when recorded)."""
    frames = {v: read_video(video_path(root, v, row["episode_index"])) for v in VIEW_NAMES}
    n = min(len(f) for f in frames.values())  # codecs may disagree by a frame
    frames = {v: f[:n] for v, f in frames.items()}
    truth = read_ground_truth(root, row["episode_index"])

    def column(key: str, dtype) -> np.ndarray | None:  # one that does not cover the video is dropped, not guessed
        values = truth.get(key)
        return None if values is None or len(values) < n else np.asarray(values[:n], dtype)

    return LabelledEpisode(frames=frames, instruction=row["instruction"], fps=fps or dataset_fps(root),
                           label=int(row["rubric_level"]), metadata=dict(row),
                           frame_levels=column(FRAME_LEVEL_KEY, np.int64),
                           frame_distances=column(FRAME_DISTANCE_KEY, np.float32))


def iter_episodes(root: str | Path, rows: list[dict[str, Any]] | None = None) -> Iterator[LabelledEpisode]:
    fps = dataset_fps(root)
    for row in rows if rows is not None else read_episode_index(root):
        yield load_episode(root, row, fps)


def split_key(row: dict[str, Any]) -> int:
    """What the held-out split is drawn over: the episode a row shows.

    A replay of a dataset episode (e.g. a world-model rollout of its recorded actions, written with
    ``source_episode_index``) shares its source's key, so a scene and its replay always land on the
    same side of the split.
    """
    return int(row.get("source_episode_index", row["episode_index"]))


def heldout_keys(keys: Iterable[int], val_fraction: float, seed: int = 0) -> set[int]:
    """A seeded ``val_fraction`` of the distinct ``keys`` (at least one when there are two or more)."""
    if not 0 <= val_fraction < 1:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    keys = sorted(set(keys))
    order = np.random.default_rng(seed).permutation(len(keys))
    n_val = int(round(val_fraction * len(keys)))
    if val_fraction > 0 and len(keys) >= 2:
        n_val = max(1, n_val)
    return {keys[i] for i in order[:n_val]}


def split_rows(rows: list[dict[str, Any]], val_fraction: float, seed: int = 0,
               heldout: set[int] | None = None) -> tuple[list, list]:
    """Deterministic (train, held-out) split by episode: rows whose :func:`split_key` is in ``heldout``.

    ``heldout`` defaults to :func:`heldout_keys` of these rows; pass one set to split several
    directories consistently.
    """
    if heldout is None:
        heldout = heldout_keys((split_key(r) for r in rows), val_fraction, seed)
    val = sorted((r for r in rows if split_key(r) in heldout), key=lambda r: r["episode_index"])
    train = sorted((r for r in rows if split_key(r) not in heldout), key=lambda r: r["episode_index"])
    return train, val
