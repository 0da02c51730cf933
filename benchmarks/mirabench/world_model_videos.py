"""A world model's videos of held-out SimDROID episodes, generated once and cached on disk.

Shared by :mod:`benchmarks.mirabench` and :mod:`benchmarks.mirabench.idm_turing`, which read the same rollouts: each
held-out episode's recorded actions replayed open loop in ``NeuralDROIDVectorEnv`` from the episode's first
frame (:func:`benchmarks.common.heldout.open_loop`), :data:`CHUNK` episodes per call.  A chunk's world-model
noise depends on ``seed``, its episodes' indices and the chunk length only, so a cached chunk is exactly what a
fresh call would produce.

Cache layout: ``DIR/<checkpoint hash>/s<seed>_<first>-<last>.npz`` with one ``ep<index>`` uint8 array
(T, V, S, S, 3) per episode; the hash covers the checkpoint's weights file (a retrained model never reads a
stale video).
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Sequence

import numpy as np

from ..common.heldout import EvalEpisode, open_loop

log = logging.getLogger(__name__)

#: Episodes generated per call (one batched world model).
CHUNK = 8


def checkpoint_hash(checkpoint: str | Path | None) -> str:
    """First 12 hex digits of the sha256 of the checkpoint's ``model.safetensors`` (None: the shipped model)."""
    from neuralsim.envs.neural_droid import resolve_checkpoint

    path = Path(resolve_checkpoint(checkpoint)) / "model.safetensors"
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:12]


def generate(wm, episodes: Sequence[EvalEpisode], *, seed: int = 0, cache: str | Path | None = None,
             checkpoint: str | Path | None = None, progress: bool = False) -> list[np.ndarray]:
    """One uint8 (T, V, S, S, 3) video per episode (frame 0 given), in :data:`CHUNK` s, read from ``cache`` when
    there (``checkpoint`` names ``wm``'s directory for the cache key; None: the shipped model)."""
    root = None if cache is None else Path(cache) / checkpoint_hash(checkpoint)
    out: list[np.ndarray] = []
    for start in range(0, len(episodes), CHUNK):
        chunk = list(episodes[start:start + CHUNK])
        path = None if root is None else root / f"s{seed}_{chunk[0].index}-{chunk[-1].index}.npz"
        if path is not None and path.is_file():
            with np.load(path) as z:
                if all(f"ep{e.index}" in z.files for e in chunk):
                    out += [z[f"ep{e.index}"] for e in chunk]
                    continue
        videos = open_loop(wm, chunk, seed=seed, batch_size=CHUNK, progress=progress)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.savez_compressed(path, **{f"ep{e.index}": v for e, v in zip(chunk, videos)})
            log.info("cached %s", path)
        out += videos
    return out


def scene_and_split(checkpoint: str | Path | None, data: str | Path | None) -> tuple[str, str]:
    """The world model's SimDROID scene and the held-out split to read: ``data``, or the scene's own split when None
    (:func:`benchmarks.common.heldout.default_split`).  A split with no episodes (FileNotFoundError) or of another
    scene (ValueError) is refused by name, before any world model is loaded."""
    from neuralsim.envs.neural_droid import checkpoint_scene
    from neuralsim.world_model.batches import data_scene

    from ..common.heldout import default_split, finished_records

    scene = checkpoint_scene(checkpoint)
    data = default_split(scene) if data is None else str(data)
    finished_records(data)
    if data_scene(data) != scene:
        raise ValueError(f"{data} holds {data_scene(data)}-scene episodes, the world model is trained on the {scene} "
                         f"scene: pass --data {default_split(scene)} (or another split of that scene)")
    return scene, data


def add_arguments(p, defaults, *, quick_episodes: int, name: str, shares_cache_with: str) -> None:
    """The options every benchmark over these videos takes (``defaults``: its Config; ``name``: its report)."""
    from ..common.results_path import out_help

    p.add_argument("--checkpoint", default=None, help="world-model directory (default: the shipped model)")
    p.add_argument("--data", default=defaults.data, help="held-out SimDROID split (default: the world model's scene's, "
                   "data/simdroid_heldout for classic, data/legible_heldout for legible)")
    p.add_argument("--episodes", type=int, default=defaults.episodes,
                   help="first N held-out episodes (default %(default)s)")
    p.add_argument("--seed", type=int, default=defaults.seed, help="world-model noise: episode i uses seed + i")
    p.add_argument("--cache", default=None,
                   help=f"directory caching generated videos (shared with {shares_cache_with})")
    p.add_argument("--quick", action="store_true", help=f"{quick_episodes} episode(s): a smoke run (< 3 min)")
    p.add_argument("--threads", type=int, default=defaults.threads, help="torch threads (default %(default)s)")
    p.add_argument("--out", default=None, help=out_help(name))
    p.add_argument("--no-progress", dest="progress", action="store_false")


def cli(parser, argv, config_cls, run, format_report, name: str, errors: tuple = ()) -> int:
    """Parse ``argv`` into ``config_cls``, ``run`` it, print the report and where its JSON went.  Bad input (an
    unreadable checkpoint, a missing split, a bad value, or one of ``errors``) exits 2 with the message."""
    import logging

    from neuralsim.envs.neural_droid import checkpoint_scene
    from neuralsim.world_model.model import CheckpointError

    from ..common.heldout import default_split
    from ..common.results_path import results_path

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    cfg = config_cls(**{k: getattr(args, k) for k in config_cls.__dataclass_fields__})
    try:
        scene = checkpoint_scene(cfg.checkpoint)
    except CheckpointError as e:
        parser.error(str(e))
    data = default_split(scene) if cfg.data is None else cfg.data
    if not (Path(data) / "meta").is_dir():
        flag = "" if scene == "classic" else f" --scene {scene}"
        parser.error(f"no held-out split at {data}; make it with: neuralsim data generate {data} "
                     f"--episodes 60 --seed 1000000{flag} (about 80 s)")
    try:
        rep = run(cfg)
    except (CheckpointError, FileNotFoundError, ValueError, *errors) as e:
        parser.error(str(e))
    print(format_report(rep))
    print(f"JSON: {results_path(name, cfg.quick, cfg.out)}")
    return 0
