"""World-model replays of a SimDROID dataset, labelled by SimDROID: training data for the offline judge.

Usage:
    python -m judges.offline.wm_rollouts --checkpoint runs/sf/model --data data/simdroid --out data/wm_rollouts \\
        --episodes 240

Every chosen dataset episode is started in ``NeuralDROID-v0`` from its first frame (three views,
joint and gripper state, instruction: :meth:`~neuralsim.envs.episodes.EpisodeSpec.from_episode`)
and its recorded actions are replayed open loop; the world model renders what they do.  SimDROID is
deterministic given the seed and the actions, so the original episode *is* the SimDROID replay of
those actions: its final rubric level is the replay's ground truth.  A judge trained on these
learns what world-model artefacts look like while its labels stay physical truth (and a judge that
reads a physically failing replay as a success is measuring the world model's optimism, not its
own error -- keep that in mind when reading accuracy on this data).

The output is a dataset directory in the same layout as ``neuralsim data generate`` writes
(:mod:`neuralsim.data.writer`), readable by :mod:`judges.offline.dataset` and
``benchmarks/judges/accuracy.py``.  A replay keeps its source's ``episode_index`` (also stored as
``source_episode_index``, which keeps a scene and its replay on the same side of the training
split) and records ``source: "world_model"``, the checkpoint and the world-model noise seed; the
source's per-frame ``ground_truth.*`` columns (rubric level, success, target distance) are copied too
(frame t of the replay shows the same simulator state as frame t of the source).  The world model and the source
dataset must be of one SimDROID scene; a model of the legible scene records it as the output's ``generation.scene``,
so its replays are read, and judged, as legible episodes.
Re-running resumes: episodes already listed in ``meta/episodes.jsonl`` are skipped.

Episodes run ``batch_size`` at a time in one batched world model (:class:`NeuralDROIDVectorEnv`);
a row that finishes is reset to the next episode at once, so no step is wasted on padding until
the queue runs dry.
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

#: Value of the ``source`` field of every record written here.
SOURCE = "world_model"
#: Fields copied from the source episode's record (the ground truth and what groups it).
COPIED_FIELDS = ("task", "family", "seed", "success", "rubric_level", "failure", "noise", "target", "base", "colors",
                 "grasped_object", "final_target_distance", "initial_poses", "final_poses")


@dataclass
class ReplayConfig:
    """What to replay, with which world model, and where to write it.

    Attributes:
        checkpoint: world-model directory (``config.json`` + ``model.safetensors``).
        data: source SimDROID dataset (``neuralsim data generate`` layout).
        out: output dataset directory (created; resumed if it holds replays of the same source).
        episodes: replay N episodes of ``data`` by index, from ``first`` on (None = all the rest).
        first: skip the first ``first`` episodes (split one dataset across processes, each with its
            own ``out``; the judge's trainer pools several ``--data`` directories).
        batch_size: episodes generated at once by the batched world model.
        device: torch device of the world model.
        num_threads: torch CPU threads (None: torch's default).
        progress: show a progress bar.
    """

    checkpoint: str
    data: str
    out: str
    episodes: int | None = None
    first: int = 0
    batch_size: int = 8
    device: str = "cpu"
    num_threads: int | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        if self.episodes is not None and self.episodes < 1:
            raise ValueError(f"episodes must be >= 1 or None (all), got {self.episodes}")
        if self.first < 0:
            raise ValueError(f"first must be >= 0, got {self.first}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads must be >= 1 or None, got {self.num_threads}")


def _prepare_out(cfg: ReplayConfig, image_size: int, scene: str = "classic") -> set[int]:
    """Write ``meta/info.json`` for a new output, or check a resumed one; returns indices already done.

    ``scene`` (the world model's SimDROID scene) is recorded as ``generation.scene`` where it is not classic, so the
    replays read, and are judged, as episodes of that scene."""
    from neuralsim.data import writer as W

    params = {"source_data": str(Path(cfg.data).resolve()), "checkpoint": str(Path(cfg.checkpoint).resolve()),
              "replay": "open-loop recorded actions from the first frame"}
    if scene != "classic":
        params["scene"] = scene
    info = W.read_info(cfg.out)
    if info is None:
        info = W.new_info(image_size, generation=params)
        info["source"] = "NeuralDROID-v0"
        W.write_info(cfg.out, info)
        return set()
    old = info.get("generation") or {}
    diff = {k: (old.get(k), v) for k, v in params.items() if old.get(k) != v}
    if diff:
        raise ValueError(f"{cfg.out!r} holds replays made with other settings ({diff}); choose another --out")
    path = Path(cfg.out) / W.EPISODES_PATH
    if not path.is_file():
        return set()
    from neuralsim.data.reader import list_episodes

    records = list_episodes(cfg.out)
    W.write_records(cfg.out, records)  # drop a torn last line before appending again
    return {int(r["episode_index"]) for r in records}


def _record(ep, source: dict[str, Any], checkpoint: str, noise_seed: int) -> dict[str, Any]:
    from neuralsim.data import writer as W

    idx = int(source["episode_index"])
    fields = {k: source[k] for k in COPIED_FIELDS if k in source}
    return W.episode_record(ep, idx, **fields, source=SOURCE, source_episode_index=idx,
                            source_length=int(source["length"]), checkpoint=checkpoint, noise_seed=noise_seed)


def replay(cfg: ReplayConfig) -> dict[str, Any]:
    """Replay the chosen episodes through the world model into ``cfg.out``; returns a short summary."""
    import torch
    from tqdm import tqdm

    from judges.offline.dataset import read_ground_truth
    from neuralsim.data import writer as W
    from neuralsim.data.reader import list_episodes, load_episode
    from neuralsim.envs.episodes import EpisodeSet, EpisodeSpec
    from neuralsim.envs.neural_droid import NeuralDROIDVectorEnv, checkpoint_scene
    from neuralsim.world_model.batches import data_scene

    scene, source_scene = checkpoint_scene(cfg.checkpoint), data_scene(str(cfg.data)) or "classic"
    if source_scene != scene:
        raise ValueError(f"{cfg.data!r} holds episodes of SimDROID's {source_scene!r} scene but the world model "
                         f"{cfg.checkpoint!r} was trained on {scene!r}; replay a dataset of the model's scene")
    if cfg.num_threads is not None:
        torch.set_num_threads(cfg.num_threads)
    sources = sorted((r for r in list_episodes(cfg.data) if r.get("rubric_level") is not None),
                     key=lambda r: int(r["episode_index"]))
    sources = sources[cfg.first:] if cfg.episodes is None else sources[cfg.first: cfg.first + cfg.episodes]
    if not sources:
        raise ValueError(f"no labelled episodes in {cfg.data!r}")
    t0 = time.perf_counter()
    n_envs = min(cfg.batch_size, len(sources))
    first = load_episode(cfg.data, sources[0]).to_episode()
    env = NeuralDROIDVectorEnv(num_envs=n_envs, checkpoint=cfg.checkpoint, reward_fn=None, device=cfg.device,
                               max_episode_steps=None, episodes=EpisodeSet([EpisodeSpec.from_episode(first)]))
    size = env.world_model.config.autoencoder.image_size
    done = _prepare_out(cfg, size, scene)
    todo = [r for r in sources if int(r["episode_index"]) not in done]
    queue = iter(todo)
    bar = tqdm(total=len(todo), disable=not cfg.progress, desc="world-model replays", unit="ep")
    rows: list[dict[str, Any] | None] = [None] * n_envs  # per row: source record, actions, step, noise seed
    hold = np.zeros((n_envs, 8), np.float32)
    written, frames = 0, 0

    def start(free: list[int]) -> None:
        """Reset the ``free`` rows to the next queued episodes (rows stay idle when the queue is empty)."""
        assign = []
        for i in free:
            rec = next(queue, None)
            if rec is None:
                rows[i] = None
                continue
            src = load_episode(cfg.data, rec, image_size=size).to_episode()
            rows[i] = {"record": rec, "actions": np.asarray(src.actions, np.float32), "step": 0,
                       "spec": EpisodeSpec.from_episode(src, name=f"replay_{int(rec['episode_index']):06d}"),
                       "seed": int(rec.get("seed", rec["episode_index"])),
                       "truth": read_ground_truth(cfg.data, int(rec["episode_index"]))}
            assign.append(i)
        if not assign:
            return
        mask = np.zeros(n_envs, bool)
        mask[assign] = True
        specs = [rows[i]["spec"] if mask[i] else None for i in range(n_envs)]
        seeds = [rows[i]["seed"] if mask[i] else None for i in range(n_envs)]
        env.reset(seed=seeds, options={"episode": specs, "reset_mask": mask})
        for i in assign:
            if len(rows[i]["actions"]) == 0:  # a one-frame episode: nothing to replay
                finish(i)

    def finish(i: int) -> None:
        nonlocal written, frames
        ep = env.episode(i)
        row = rows[i]
        noise_seed = int(ep.metadata.get("noise_seed", -1))
        n = ep.num_frames  # a column that does not cover the replay is dropped rather than guessed
        extra = {k: v[:n] for k, v in row["truth"].items() if len(v) >= n} or None
        W.write_episode(cfg.out, ep, int(row["record"]["episode_index"]), extra_columns=extra)
        W.append_record(cfg.out, _record(ep, row["record"], str(cfg.checkpoint), noise_seed))
        written += 1
        frames += ep.num_frames
        rows[i] = None
        bar.update(1)

    try:
        start(list(range(n_envs)))
        while any(r is not None for r in rows):
            actions = hold.copy()
            for i, r in enumerate(rows):
                if r is not None:
                    actions[i] = r["actions"][r["step"]]
                    hold[i] = 0.0
                    hold[i, 7] = actions[i, 7]  # idle rows keep their gripper and stand still
            env.step(actions)
            ended = []
            for i, r in enumerate(rows):
                if r is not None:
                    r["step"] += 1
                    if r["step"] == len(r["actions"]):
                        finish(i)
                        ended.append(i)
            if ended:
                start(ended)
    finally:
        bar.close()
        env.close()
        records = list_episodes(cfg.out) if (Path(cfg.out) / W.EPISODES_PATH).is_file() else []
        W.write_records(cfg.out, records)
        W.update_totals(cfg.out, records)
    seconds = time.perf_counter() - t0
    summary = {"out": cfg.out, "written": written, "skipped": len(sources) - len(todo), "total": len(records),
               "frames": frames, "seconds": round(seconds, 1),
               "frames_per_second": round(frames / seconds, 2) if seconds > 0 else None}
    logger.info("%s", summary)
    return summary


def parse_args(argv: list[str] | None = None) -> ReplayConfig:
    p = argparse.ArgumentParser(prog="python -m judges.offline.wm_rollouts", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="world-model directory (config.json + model.safetensors)")
    p.add_argument("--data", required=True, help="source SimDROID dataset directory")
    p.add_argument("--out", required=True, help="output dataset directory")
    p.add_argument("--episodes", type=int, default=None, help="replay N episodes (default: all)")
    p.add_argument("--first", type=int, default=0, help="skip this many episodes first (by index)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    return ReplayConfig(checkpoint=a.checkpoint, data=a.data, out=a.out, episodes=a.episodes, first=a.first,
                        batch_size=a.batch_size, device=a.device, num_threads=a.threads, progress=not a.no_progress)


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    summary = replay(parse_args(argv))
    logger.info("wrote %d world-model replays to %s (%d skipped as done; %.1f frames/s)", summary["written"],
                summary["out"], summary["skipped"], summary["frames_per_second"] or 0.0)


if __name__ == "__main__":
    main()
