"""WoW-World-Eval's IDM Turing test: are the world model's videos executable?  Inferred actions replayed in SimDROID.

Usage::

    python -m benchmarks.mirabench.idm_turing --quick                              # 2 episodes, a smoke run (< 3 min)
    python -m benchmarks.mirabench.idm_turing --episodes 48 --cache runs/mirabench/videos   # the reported run
    python -m benchmarks.mirabench.idm_turing --checkpoint runs/sf/model --idm benchmarks/common/assets/idm

Protocol (WoW-World-Eval §4.4 and Appendix 10.3, with SimDROID standing in for the real robot), all in the world
model's SimDROID scene (SimDROID-v0 classic, SimDROID-v1 legible; an IDM or split of another scene is refused):

1. An inverse dynamics model trained only on true SimDROID executions of the scene (:mod:`benchmarks.common.idm`,
   the shipped one in ``benchmarks/common/assets/idm`` for classic, ``idm_legible`` for legible, which
   ``python -m benchmarks.common.idm --scene legible`` trains; video only, gripper-centric) reads a video step by
   step and infers the tool-point move and gripper command of every step.
2. **Validation on true videos**: for each held-out episode (``--data``, the first ``--episodes``; by default
   ``data/simdroid_heldout`` classic, ``data/legible_heldout`` legible), the IDM reads the simulator's own video;
   the inferred moves are replayed in SimDROID from the episode's initial state (reset with its seed, each move
   turned into a DROID action by :func:`benchmarks.common.idm.controller_action` on the replaying robot).  Replay
   success rate = share of the truly successful episodes whose replay succeeds (GC-IDM reaches 90% on real
   videos).  ``oracle`` replays the true moves through the same controller: the ceiling of the controller.
3. **The Turing test**: the world model generates each episode's video from its first frame and recorded actions
   (:mod:`benchmarks.mirabench.world_model_videos`); the IDM reads it, and its moves are replayed in SimDROID the
   same way.
   WoW's best model reaches 40.74%, most ~0%.

Action error: the inferred moves of each video against the true moves of the episode (the actions that made both
videos), per step: tool-point move [mm], hand rotation [deg], position read [cm], gripper command accuracy.

Writes ``benchmarks/results/idm_turing.json`` (``--quick``: ``idm_turing_quick.json``); docs/BENCHMARKS.md has the
table.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..common import idm as D
from ..common.results_path import results_path
from ..common.stats import wilson_interval
from . import world_model_videos as W

log = logging.getLogger(__name__)

QUICK_EPISODES = 2
#: What the IDM reads: the simulator's video, the world model's, and (oracle) the true moves themselves.
SOURCES = ("oracle", "true_video", "generated")


@dataclass
class Config:
    """Options of ``python -m benchmarks.mirabench.idm_turing``."""

    checkpoint: str | None = None
    """World-model directory (None: the shipped model)."""
    idm: str = "default"
    """Inverse dynamics model directory, of the world model's scene; ``"default"``: the shipped IDM of that scene
    (:func:`benchmarks.common.idm.default_dir`: ``benchmarks/common/assets/idm`` classic, ``idm_legible``
    legible)."""
    data: str | None = None
    """Held-out SimDROID split of the world model's scene (never seen by the IDM or the world model); None: that
    scene's (:func:`benchmarks.common.heldout.default_split`)."""
    episodes: int = 32
    """The first N episodes of ``data``."""
    seed: int = 0
    """World-model noise: episode i uses seed + i (the same videos as benchmarks.mirabench)."""
    absolute_gain: float = D.ABSOLUTE_GAIN
    """Controller: share of the way to the pose read from the frame
    (:func:`benchmarks.common.idm.controller_action`)."""
    cache: str | None = None
    """Directory caching the generated videos (shared with mirabench); None: generate every time."""
    quick: bool = False
    threads: int = 1
    out: str | None = None
    progress: bool = True


def replay(env, record: dict, moves: list, absolute_gain: float) -> dict[str, Any]:
    """Reset SimDROID to the episode's initial state and execute ``moves``; success and tool-point path."""
    env.reset(seed=int(record["seed"]), options={"task": record["task"]})
    tcp, info = [env.unwrapped.tcp_position()], {}
    for m in moves:
        _, _, _, _, info = env.step(D.controller_action(env.unwrapped, m, absolute_gain))
        tcp.append(env.unwrapped.tcp_position())
    return {"success": bool(info.get("success", False)), "rubric_level": int(info.get("rubric_level", 0)),
            "tcp": np.stack(tcp)}


def evaluate_episode(model, env, episode, generated: np.ndarray, absolute_gain: float) -> dict[str, Any]:
    """The three replays of one episode and the action errors of the two videos."""
    target = D.labels(episode.joint_position, episode.actions)
    true_tcp, _ = D.tool_poses(episode.joint_position)
    oracle = D.decode_outputs(target)
    for m, g in zip(oracle, target[:, 15]):
        m.gripper = float(g)
    raw = {"true_video": D.infer(model, episode.frames), "generated": D.infer(model, generated)}
    row: dict[str, Any] = {"index": episode.index, "task": episode.record["task"],
                           "true_success": bool(episode.record["success"]), "steps": int(len(target))}
    for src, moves in (("oracle", oracle), *((k, D.decode_outputs(v)) for k, v in raw.items())):
        r = replay(env, episode.record, moves, absolute_gain)
        row[src] = {"replay_success": r["success"], "replay_level": r["rubric_level"],
                    "replay_tcp_error_cm_mean": float(100 * np.linalg.norm(r["tcp"] - true_tcp, axis=1).mean())}
    for src, y in raw.items():
        row[src]["action_error"] = _errors(y, target)
    return row


def _errors(raw: np.ndarray, target: np.ndarray) -> dict[str, float]:
    moves = D.decode_outputs(raw)
    dp = np.stack([m.dp for m in moves])
    dr = np.stack([m.dr for m in moves])
    p = np.stack([m.p for m in moves])
    grip = np.array([m.gripper for m in moves])
    return {"move_error_mm": float(1000 * np.linalg.norm(dp - target[:, :3] * D.DP_SCALE, axis=1).mean()),
            "rotation_error_deg": float(np.degrees(np.linalg.norm(dr - target[:, 3:6] * D.DR_SCALE, axis=1).mean())),
            "position_error_cm": float(100 * np.linalg.norm(p - target[:, 6:9], axis=1).mean()),
            "gripper_accuracy": float(((grip > 0.5) == (target[:, 15] > 0.5)).mean())}


def _share(flags: list[bool]) -> dict[str, Any]:
    k, n = int(sum(flags)), len(flags)
    return {"rate": None if n == 0 else k / n, "n": n, "ci95": wilson_interval(k, n)}


def summarise(rows: list[dict]) -> dict[str, Any]:
    """Per source: replay success on truly successful episodes (the headline), on all, outcome agreement with the
    truth, replay path error, and (videos) the mean action errors."""
    out: dict[str, Any] = {}
    ok = [r for r in rows if r["true_success"]]
    for src in SOURCES:
        cell = {"replay_success_rate": _share([r[src]["replay_success"] for r in ok]),
                "replay_success_all": _share([r[src]["replay_success"] for r in rows]),
                "outcome_agreement": _share([r[src]["replay_success"] == r["true_success"] for r in rows]),
                "replay_tcp_error_cm_mean": float(np.mean([r[src]["replay_tcp_error_cm_mean"] for r in rows]))}
        if src != "oracle":
            cell["action_error"] = {k: float(np.mean([r[src]["action_error"][k] for r in rows]))
                                    for k in rows[0][src]["action_error"]}
        out[src] = cell
    out["per_task"] = {t: {src: _share([r[src]["replay_success"] for r in ok if r["task"] == t]) for src in SOURCES}
                       for t in sorted({r["task"] for r in rows})}
    return out


def load_idm(idm: str, scene: str):
    """The IDM at ``idm`` (``"default"``: the shipped one of ``scene``), refused unless it reads ``scene``'s videos;
    :class:`~benchmarks.common.idm.WeightsError` with the command that trains it when the scene's is missing."""
    directory = D.default_dir(scene) if idm == "default" else Path(idm)
    if idm == "default" and not (directory / "model.safetensors").is_file():
        raise D.WeightsError(f"no IDM of the {scene} scene at {directory}; train it with `{D.train_command(scene)}` "
                             f"(about 25 minutes on a 2-core CPU; it reads {D.TRAINING_DATA[scene]}), or pass --idm")
    model = D.load(directory)
    if model.config.scene != scene:
        raise ValueError(f"the IDM at {directory} reads the {model.config.scene} scene, the world model makes the "
                         f"{scene} one: pass --idm of that scene (`{D.train_command(scene)}` trains it)")
    return model


def run(cfg: Config) -> dict[str, Any]:
    import torch
    from tqdm import tqdm

    from neuralsim.envs.neural_droid import load_world_model
    from neuralsim.envs.sim_droid import SimDROIDEnv

    from ..common.heldout import load_split
    from .world_model_videos import generate

    torch.set_num_threads(int(cfg.threads))
    t0 = time.perf_counter()
    n = QUICK_EPISODES if cfg.quick else cfg.episodes
    if n < 1:
        raise ValueError(f"episodes must be >= 1, got {n}")
    if not 0.0 <= cfg.absolute_gain <= 1.0:
        raise ValueError(f"absolute_gain must be in [0, 1], got {cfg.absolute_gain}")
    # every input must be of the world model's scene, checked by name before any work
    scene, data = W.scene_and_split(cfg.checkpoint, cfg.data)
    model = load_idm(cfg.idm, scene)
    cfg = replace(cfg, data=data, idm=str(cfg.idm if cfg.idm != "default" else D.default_dir(scene)))
    wm = load_world_model(cfg.checkpoint)
    size = wm.config.autoencoder.image_size
    if size != model.config.image_size:
        raise ValueError(f"the IDM reads {model.config.image_size}x{model.config.image_size} views, the world model "
                         f"makes {size}x{size}")
    episodes = load_split(cfg.data, size, n)
    videos = generate(wm, episodes, seed=cfg.seed, cache=cfg.cache, checkpoint=cfg.checkpoint, progress=cfg.progress)
    env = SimDROIDEnv(image_size=16, reward_fn=None, max_episode_steps=None, scene=scene)  # nobody reads its frames
    try:
        rows = [evaluate_episode(model, env, e, v, cfg.absolute_gain)
                for e, v in tqdm(list(zip(episodes, videos)), desc="replays", unit="episode",
                                 disable=not cfg.progress)]
    finally:
        env.close()
    here = str(Path.cwd()) + "/"  # the committed report names no machine
    config = {k: v[len(here):] if isinstance(v, str) and v.startswith(here) else v for k, v in asdict(cfg).items()}
    report = {"benchmark": "idm_turing", "scene": scene, "config": config, "idm_config": asdict(model.config),
              "episodes": len(rows), "truly_successful": sum(r["true_success"] for r in rows),
              "summary": summarise(rows), "reference": {"gc_idm_on_real_videos": 0.90, "wow_best_generated": 0.4074},
              "seconds": round(time.perf_counter() - t0, 1), "per_episode": rows}
    out = results_path("idm_turing", cfg.quick, cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    return report


def format_report(rep: dict[str, Any]) -> str:
    s = rep["summary"]

    def pct(c):
        return "-" if c["rate"] is None else f"{100 * c['rate']:.0f}% ({round(c['rate'] * c['n'])}/{c['n']})"

    lines = [f"IDM Turing test on {rep['episodes']} held-out episodes ({rep['truly_successful']} truly successful), "
             f"{rep['config']['checkpoint'] or 'the shipped world model'} ({rep.get('scene', 'classic')} scene)",
             f"  {'IDM reads':12s} {'replay success':>16s} {'agrees w/ truth':>16s} {'path err':>9s} {'move err':>9s} "
             f"{'pos err':>8s} {'gripper':>8s}"]
    for src in SOURCES:
        c = s[src]
        ae = c.get("action_error")
        errs = ("-", "-", "-") if ae is None else (f"{ae['move_error_mm']:.1f} mm", f"{ae['position_error_cm']:.1f} cm",
                                                    f"{100 * ae['gripper_accuracy']:.0f}%")
        lines.append(f"  {src:12s} {pct(c['replay_success_rate']):>16s} {pct(c['outcome_agreement']):>16s} "
                     f"{c['replay_tcp_error_cm_mean']:>6.1f} cm {errs[0]:>9s} {errs[1]:>8s} {errs[2]:>8s}")
    lines.append("  replay success over truly successful episodes; references: GC-IDM on real videos 90%, WoW's best "
                 f"generated videos 40.74%.  {rep['seconds']:.0f} s")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    d = Config()
    p = argparse.ArgumentParser(prog="python -m benchmarks.mirabench.idm_turing", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="protocol and results: docs/BENCHMARKS.md")
    W.add_arguments(p, d, quick_episodes=QUICK_EPISODES, name="idm_turing", shares_cache_with="mirabench")
    p.add_argument("--idm", default=d.idm, help="inverse dynamics model directory (default: the shipped one of the "
                   "world model's scene, benchmarks/common/assets/idm[_legible])")
    p.add_argument("--absolute-gain", dest="absolute_gain", type=float, default=d.absolute_gain,
                   help="controller: share of the way to the pose read from the frame (default %(default)s)")
    return p


def main(argv: list[str] | None = None) -> int:
    return W.cli(build_parser(), argv, Config, run, format_report, "idm_turing", errors=(D.WeightsError,))


if __name__ == "__main__":
    sys.exit(main())
