"""Open-loop fidelity of a world model against SimDROID: PSNR / SSIM per view and object position error.

Usage::

    python -m benchmarks.fidelity --checkpoint runs/sf/model --quick     # the held-out split of the model's scene
    python -m benchmarks.fidelity --checkpoint runs/sf/model --data data/simdroid_heldout --ood-data data/simdroid_ood
    python -m benchmarks.fidelity --compare runs/df/model runs/sf/model
    python -m benchmarks.fidelity --compare neuralsim/assets/world_model runs/ae/model --autoencoder-only
    python -m benchmarks.fidelity --paired benchmarks/results/fidelity.json runs/candidate_fidelity.json
    python -m benchmarks.common.object_probe                    # (re)train the object-position probe only

Protocol (``docs/FIDELITY.md`` has the reasoning and the results table):

* **Open loop, exactly what users get.**  Each held-out SimDROID episode becomes an
  :class:`~neuralsim.envs.episodes.EpisodeSpec` (its first three views, joint and gripper state,
  instruction) and ``NeuralDROIDVectorEnv(checkpoint=..., reward_fn=None)`` replays the episode's
  recorded actions from it: the env's action adapter integrates them and feeds the flange pose +
  gripper (forward kinematics) to the world model, as in any policy rollout.  Env row ``i`` is reset
  with seed ``--seed + episode_index``, so results do not depend on the batch size (up to float
  rounding of batched products).  ``--conditioning recorded`` drives the model with the recorded
  robot state instead (:func:`open_loop_recorded`, RoboWorld's open-loop protocol): the adapter
  knows no contacts, and its replay of a pushing episode leaves the simulator's arm far behind
  (``adapter_replay`` in every report says how far; ``end_frame`` how many rollouts lost the scene).
* **Frame metrics** on uint8 frames at the model's resolution (ground truth is resized with the
  same filter the env applies to an episode spec): PSNR (capped at :data:`PSNR_CAP_DB`, which
  identical frames reach) and SSIM (``pytorch_msssim.ssim``: Gaussian window 11, sigma 1.5, on
  [0, 1] frames, as the RoboWorld paper's BAIR protocol).  Frame 0 is given, not generated, and is
  excluded.  Windows: **in-horizon** = frames 1 .. clip_length (the training clip length), **beyond**
  = clip_length + 1 .. 2 clip_length.  Per view, every (episode, frame) of a window weighs the same;
  ``mean`` is the mean of the three views.
* **Object position** at the end of the episode: a small CNN probe (:mod:`benchmarks.common.object_probe`,
  trained on SimDROID renders of both distributions with ground-truth cube positions, seeds never
  used by the splits) finds the target cube (given its colour) in each exterior view; the two image
  points are triangulated through the known cameras.  Error = table-xy distance between the probe's
  answer on the generated last frame and the simulator's final position (``final_poses`` of the
  episode record); the probe's own error on the true last frames is reported beside it as the
  measurement floor.

* **Paired A/Bs.**  Every split's result keeps each episode's score (``per_episode``, by window and
  view, and ``episode_indices``).  Two models rolled out on the same episodes differ by less than the
  episodes differ among themselves, so ``--compare`` (every later model against the first) and
  ``--paired A.json B.json`` (two saved reports) print the mean per-episode difference B - A with a 95%
  interval and how many episodes B wins: a change of a few hundredths of a dB can be told from noise.

``--quick`` evaluates :data:`QUICK_EPISODES` held-out episodes (and :data:`QUICK_OOD_EPISODES` of
``--ood-data``) and never trains the probe (without a saved probe the position columns are empty).
JSON goes to ``benchmarks/results/fidelity.json`` (``--quick``: ``fidelity_quick.json``; ``--out``).

This module runs the evaluation (:func:`run`) and the command line (``python -m benchmarks.fidelity``); its parts
live beside it and every public name of theirs is importable from here: :mod:`benchmarks.fidelity.metrics` (frame,
position and arm scores), :mod:`benchmarks.fidelity.paired` (paired A/Bs) and :mod:`benchmarks.fidelity.report`
(the printed table), and the benchmarks' shared :mod:`benchmarks.common.heldout` (the held-out episodes and the
rollouts).
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..common.heldout import (
    EvalEpisode,
    autoencoder_round_trip,
    default_split,
    finished_records,
    last_frames_round_trip,
    load_split,
    open_loop,
    open_loop_recorded,
    recorded_conditioning,
    round_trip_frames,
)
from ..common.object_probe import default_dir as default_probe_dir
from ..common.results_path import out_help, results_path
from .metrics import (
    POSITION_TOLERANCE_M,
    PSNR_CAP_DB,
    Windows,
    adapter_replay_drift,
    end_frame_scores,
    frame_metrics,
    position_errors,
    probe_floors,
    psnr_frames,
    sharpness_frames,
    ssim_frames,
    target_rgb,
)
from .paired import (
    PAIRED_ROWS,
    difference_summary,
    format_paired,
    load_result,
    pair_results,
    paired_differences,
    paired_reports,
    t_quantile_975,
)
from .report import format_table

__all__ = [
    # the evaluation and its command line (this module)
    "CONDITIONINGS", "Config", "QUICK_EPISODES", "QUICK_OOD_EPISODES", "TARGETS", "autoencoder_ceiling",
    "build_parser", "check_targets", "checkpoint_label", "evaluate_autoencoder", "evaluate_split", "group_scores",
    "hold_first_frame", "main", "out_path", "run",
    # benchmarks.fidelity.metrics
    "POSITION_TOLERANCE_M", "PSNR_CAP_DB", "Windows", "adapter_replay_drift", "end_frame_scores", "frame_metrics",
    "position_errors", "probe_floors", "psnr_frames", "sharpness_frames", "ssim_frames", "target_rgb",
    # benchmarks.common.heldout
    "EvalEpisode", "autoencoder_round_trip", "finished_records", "last_frames_round_trip", "load_split", "open_loop",
    "open_loop_recorded", "recorded_conditioning", "round_trip_frames",
    # benchmarks.fidelity.paired
    "PAIRED_ROWS", "difference_summary", "format_paired", "load_result", "pair_results", "paired_differences",
    "paired_reports", "t_quantile_975",
    # benchmarks.fidelity.report
    "format_table",
]

log = logging.getLogger(__name__)

QUICK_EPISODES = 4
QUICK_OOD_EPISODES = 2
#: ``--conditioning``: how the world model is driven along a held-out episode (:class:`Config`).
CONDITIONINGS = ("replay", "recorded")
#: The targets on the held-out split (per-view mean, 64x64 views; docs/FIDELITY.md, "Targets"); the OOD split has none.
TARGETS = {"ssim_in_horizon": 0.85, "ssim_beyond": 0.80, "psnr_in_horizon": 25.0, "share_below_5cm": 0.80}


# ---------------------------------------------------------------------------------------------- evaluation
@dataclass
class Config:
    """Options of ``python -m benchmarks.fidelity``."""

    checkpoints: list[str] = field(default_factory=list)
    """World-model directories (``--checkpoint`` or ``--compare``)."""
    data: str | None = None
    """The held-out SimDROID split; None: the models' scene's (``data/simdroid_heldout`` for classic,
    ``data/legible_heldout`` for legible: :func:`~benchmarks.common.heldout.default_split`)."""
    ood_data: str | None = None
    quick: bool = False
    max_episodes: int | None = None
    """Episodes per split, the first ones (None: all; --quick: QUICK_EPISODES / QUICK_OOD_EPISODES)."""
    seed: int = 0
    batch_size: int = 8
    context_window: int | None = None
    denoising_steps: int | None = None
    probe: str | None = "default"
    """Object-probe directory; ``"default"``: the shipped probe of the models' scene; None skips positions."""
    """Probe directory (built there on first use unless --quick); None skips the position metric."""
    threads: int | None = None
    out: str | None = None
    """JSON report; None: ``benchmarks/results/fidelity.json``, or ``fidelity_quick.json`` with ``quick``."""
    progress: bool = True
    conditioning: str = "replay"
    """``replay``: the env replays each episode's recorded actions through its action adapter (what a policy's
    rollout gets); ``recorded``: the world model is conditioned on the recorded robot state itself
    (:func:`open_loop_recorded`, RoboWorld's open-loop protocol)."""
    autoencoder_only: bool = False
    """Only the autoencoder's ceiling and the probe's round-trip floor (no DiT, no targets): compares
    autoencoders before a DiT is trained on one."""


def model_scene(models: list, cfg: Config) -> str:
    """The one SimDROID scene of the models and the evaluation splits; a mismatch is refused by name."""
    from neuralsim.world_model.batches import data_scene

    scenes = {ckpt: wm.config.scene for ckpt, wm in zip(cfg.checkpoints, models)}
    if len(set(scenes.values())) > 1:
        raise ValueError(f"the models are trained on different SimDROID scenes ({scenes}); compare models of one")
    scene = next(iter(scenes.values()))
    for root in (cfg.data, cfg.ood_data):
        if root is not None and data_scene(root) != scene:
            raise ValueError(f"{root} holds {data_scene(root)}-scene episodes, the world model is trained on the "
                             f"{scene} scene: evaluate it on a split of its own scene")
    return scene


def checkpoint_label(path: str) -> str:
    """``runs/sf/model`` -> ``sf``; other paths keep their last component."""
    p = Path(path)
    return p.parent.name if p.name == "model" and p.parent.name else p.name


def evaluate_split(wm, episodes: list[EvalEpisode], cfg: Config, probe) -> dict[str, Any]:
    if cfg.autoencoder_only:
        return evaluate_autoencoder(wm, episodes, probe)
    t0 = time.perf_counter()
    roll = open_loop_recorded if cfg.conditioning == "recorded" else open_loop
    generated = roll(wm, episodes, seed=cfg.seed, batch_size=cfg.batch_size, context_window=cfg.context_window,
                     denoising_steps=cfg.denoising_steps, progress=cfg.progress)
    t_gen = time.perf_counter() - t0
    windows = Windows(wm.config.clip_length)
    res: dict[str, Any] = {"episodes": len(episodes), "episode_indices": [e.index for e in episodes],
                           "frames_generated": int(sum(len(g) - 1 for g in generated)),
                           "generation_seconds": round(t_gen, 2)}
    res.update(frame_metrics(generated, [e.frames for e in episodes], windows))
    res["autoencoder_ceiling"] = autoencoder_ceiling(wm, episodes, windows)
    res["hold_first_frame"] = hold_first_frame(episodes, windows)
    res["end_frame"] = end_frame_scores(generated, episodes)
    res["adapter_replay"] = adapter_replay_drift(episodes)
    res["position"] = None if probe is None else position_errors(
        probe, episodes, generated, decoded_last=last_frames_round_trip(wm, episodes))
    res["by_group"] = group_scores(res, episodes)
    return res


def group_scores(split: dict[str, Any], episodes: Sequence[EvalEpisode]) -> dict[str, dict[str, Any]]:
    """Per task family and per outcome (the simulator's success or failure): the mean over the group's
    episodes of each episode's window means (every episode weighs the same here, unlike the headline,
    where every frame does) and the share of its cubes within 5 cm.  Tells where the model is trustworthy."""
    groups: dict[str, list[int]] = {}
    for k, e in enumerate(episodes):
        family = e.record.get("family") or e.record.get("task")
        if family:
            groups.setdefault(f"task {family}", []).append(k)
        if e.record.get("success") is not None:
            groups.setdefault("succeeded" if e.record["success"] else "failed", []).append(k)
    errors = (split.get("position") or {}).get("per_episode_error_m")
    out = {}
    for name, members in sorted(groups.items(), key=lambda kv: (not kv[0].startswith("task "), kv[0])):
        row: dict[str, Any] = {"episodes": len(members)}
        for metric, window in PAIRED_ROWS:
            vals = [split[metric]["per_episode"][window]["mean"][k] for k in members]
            vals = [v for v in vals if v is not None]
            row[f"{metric}_{window}"] = float(np.mean(vals)) if vals else None
        if errors is not None:
            row["share_below_5cm"] = float(np.mean([errors[k] < POSITION_TOLERANCE_M for k in members]))
        out[name] = row
    return out


def evaluate_autoencoder(wm, episodes: list[EvalEpisode], probe) -> dict[str, Any]:
    """``--autoencoder-only``: the ceiling frame metrics and the probe floors of ``wm``'s autoencoder."""
    return {"episodes": len(episodes),
            "autoencoder_ceiling": autoencoder_ceiling(wm, episodes, Windows(wm.config.clip_length)),
            "position": None if probe is None else {
                "episodes": len(episodes), **probe_floors(probe, episodes, last_frames_round_trip(wm, episodes))}}


def autoencoder_ceiling(wm, episodes: Sequence[EvalEpisode], windows: Windows) -> dict[str, Any]:
    """PSNR and SSIM per window of the true frames 0..2H through ``wm``'s autoencoder (the benchmark's ceiling), and
    their sharpness: the detail the autoencoder alone keeps, the reference for a generated frame's."""
    ceiling = frame_metrics(autoencoder_round_trip(wm, episodes, 2 * windows.clip_length), [e.frames for e in episodes],
                            windows)
    return {m: {w: ceiling[m][w] for w, _ in windows.items()} for m in ("psnr", "ssim", "sharpness")}


def hold_first_frame(episodes: Sequence[EvalEpisode], windows: Windows) -> dict[str, Any]:
    """PSNR and SSIM per window of frame 0 held still: the no-skill floor of a model that sees frame 0 (through
    a reference head, a decoder does).  A model that copies the still background but not the motion scores
    near it."""
    held = [np.broadcast_to(e.frames[:1], e.frames.shape) for e in episodes]
    floor = frame_metrics(held, [e.frames for e in episodes], windows)
    return {m: {w: floor[m][w] for w, _ in windows.items()} for m in ("psnr", "ssim")}



def check_targets(split: dict[str, Any]) -> dict[str, bool | None]:
    def get(metric, window):
        w = split.get(metric, {}).get(window)
        return None if w is None else w["mean"]

    ssim_in, ssim_out, psnr_in = get("ssim", "in_horizon"), get("ssim", "beyond"), get("psnr", "in_horizon")
    share = (split.get("position") or {}).get("share_below_5cm")
    ok = lambda v, t: None if v is None else bool(v >= t)  # noqa: E731
    return {"ssim_in_horizon": ok(ssim_in, TARGETS["ssim_in_horizon"]),
            "ssim_beyond": ok(ssim_out, TARGETS["ssim_beyond"]),
            "psnr_in_horizon": ok(psnr_in, TARGETS["psnr_in_horizon"]),
            "share_below_5cm": ok(share, TARGETS["share_below_5cm"])}


def out_path(cfg: Config) -> Path:
    """Where :func:`run` writes its report (:func:`benchmarks.common.results_path.results_path`)."""
    return results_path("fidelity", cfg.quick, cfg.out)


def run(cfg: Config) -> dict[str, Any]:
    """Evaluate every checkpoint on the held-out (and OOD) split; write and return the JSON report."""
    import torch

    from neuralsim.envs.neural_droid import load_world_model

    if not cfg.checkpoints:
        raise ValueError("give a world model: --checkpoint DIR or --compare DIR DIR ...")
    if cfg.conditioning not in CONDITIONINGS:
        raise ValueError(f"conditioning must be one of {CONDITIONINGS}, got {cfg.conditioning!r}")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if cfg.data is None:
        from neuralsim.envs.neural_droid import checkpoint_scene

        cfg = replace(cfg, data=default_split(checkpoint_scene(cfg.checkpoints[0])))
    # every input is checked before any work (the probe alone can take 25 minutes to build): a missing
    # split or an unreadable checkpoint fails now, by name, not after the first model's rollouts
    for root in (cfg.data, cfg.ood_data):
        if root is not None:
            finished_records(root)
    models = [load_world_model(ckpt) for ckpt in cfg.checkpoints]
    scene = model_scene(models, cfg)
    t_start = time.perf_counter()
    n_held = cfg.max_episodes if cfg.max_episodes is not None else (QUICK_EPISODES if cfg.quick else None)
    n_ood = cfg.max_episodes if cfg.max_episodes is not None else (QUICK_OOD_EPISODES if cfg.quick else None)
    probe = None
    if cfg.probe == "default":
        cfg = replace(cfg, probe=str(default_probe_dir(scene)))
    if cfg.probe:
        from ..common import object_probe

        if (Path(cfg.probe) / "probe.json").is_file():
            probe = object_probe.load(cfg.probe)
        elif cfg.quick:
            log.warning("no object probe at %s: --quick skips the position metric (build it with "
                        "`python -m benchmarks.common.object_probe --out %s`)", cfg.probe, cfg.probe)
        else:
            log.info("building the object probe at %s (once; ~25 minutes on a busy 2-core CPU)", cfg.probe)
            probe, _ = object_probe.build(cfg.probe, progress=cfg.progress, scene=scene)
        if probe is not None and probe.config.scene != scene:
            raise ValueError(f"the object probe at {cfg.probe} reads the {probe.config.scene} scene, the world "
                             f"model{'s' if len(models) > 1 else ''} the {scene} one: pass --probe of that scene")
    splits_data: dict[str, dict[int, list[EvalEpisode]]] = {}
    results = []
    for ckpt, wm in zip(cfg.checkpoints, models):
        size = wm.config.autoencoder.image_size
        entry: dict[str, Any] = {"checkpoint": str(ckpt), "label": checkpoint_label(ckpt),
                                 "recipe": wm.config.recipe, "image_size": size,
                                 "clip_length": wm.config.clip_length,
                                 "window": cfg.context_window or wm.config.window, "splits": {}}
        for split, root, n in (("heldout", cfg.data, n_held), ("ood", cfg.ood_data, n_ood)):
            if root is None:
                continue
            cache = splits_data.setdefault(split, {})
            if size not in cache:
                cache[size] = load_split(root, size, n)
            log.info("%s: %s split, %d episodes", ckpt, split, len(cache[size]))
            res = evaluate_split(wm, cache[size], cfg, probe)
            if split == "heldout" and not cfg.autoencoder_only:
                res["targets_met"] = check_targets(res)
            entry["splits"][split] = res
        results.append(entry)
    # --compare: every later model against the first, episode by episode
    paired = [] if cfg.autoencoder_only else [p for entry in results[1:] for p in pair_results(results[0], entry)]
    report = {
        "benchmark": "fidelity",
        "protocol": {
            "windows": "in_horizon = frames 1..H, beyond = H+1..2H (H = the model's clip_length); frame 0 is given",
            "psnr_cap_db": PSNR_CAP_DB, "ssim": "pytorch_msssim.ssim, gaussian window 11, sigma 1.5, [0, 1] frames",
            "autoencoder_ceiling": "the same metrics on the true frames encoded and decoded by the model's autoencoder",
            "position": "ObjectProbe xy of the target cube in the last frame vs the simulator's final pose",
            "position_tolerance_m": POSITION_TOLERANCE_M, "targets": TARGETS,
            "data": cfg.data, "ood_data": cfg.ood_data, "seed": cfg.seed, "quick": cfg.quick,
            "autoencoder_only": cfg.autoencoder_only, "conditioning": cfg.conditioning,
            "context_window": cfg.context_window, "denoising_steps": cfg.denoising_steps,
            "batch_size": cfg.batch_size,
            "probe": cfg.probe if probe is not None else None,
            "probe_report": getattr(probe, "report", None),
        },
        "results": results,
        "paired": paired,
        "seconds": round(time.perf_counter() - t_start, 1),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "torch": torch.__version__, "threads": torch.get_num_threads()},
    }
    out = out_path(cfg)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, allow_nan=False, default=_json_default) + "\n")
    return report


def _json_default(x):
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def build_parser() -> argparse.ArgumentParser:
    d = Config()
    p = argparse.ArgumentParser(prog="python -m benchmarks.fidelity", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="protocol and results: docs/FIDELITY.md")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--checkpoint", help="world-model directory (config.json + model.safetensors)")
    who.add_argument("--compare", nargs="+", metavar="DIR", help="several world models into one table, with each "
                     "later one's per-episode differences from the first")
    who.add_argument("--paired", nargs=2, metavar=("A", "B"), help="no evaluation: B - A, episode by episode, from two "
                     "JSON reports of the same split (REPORT.json, or REPORT.json:LABEL when it holds several models)")
    p.add_argument("--data", default=d.data, help="held-out SimDROID split (default: the model's scene's, "
                                                  "data/simdroid_heldout or data/legible_heldout)")
    p.add_argument("--ood-data", dest="ood_data", default=None, help="out-of-distribution split, reported separately")
    p.add_argument("--quick", action="store_true",
                   help=f"{QUICK_EPISODES} held-out / {QUICK_OOD_EPISODES} OOD episodes, never trains the probe (< 60 "
                        "s)")
    p.add_argument("--max-episodes", dest="max_episodes", type=int, default=None, help="episodes per split")
    p.add_argument("--seed", type=int, default=d.seed, help="world-model noise: episode i uses seed + i")
    p.add_argument("--batch-size", dest="batch_size", type=int, default=d.batch_size, help="episodes generated at once")
    p.add_argument("--window", dest="context_window", type=int, default=None, help="KV window (default: the model's)")
    p.add_argument("--denoising-steps", dest="denoising_steps", type=int, default=None,
                   help="denoising passes per frame (default: the model's S)")
    p.add_argument("--conditioning", choices=CONDITIONINGS, default=d.conditioning,
                   help="replay: the env replays the recorded actions through its action adapter (default); "
                        "recorded: condition on the recorded robot state (RoboWorld's open-loop protocol)")
    p.add_argument("--probe", default=d.probe, help="object-probe directory (default: the shipped probe of the model's "
                                                    "scene, benchmarks/common/assets/fidelity_probe[_legible])")
    p.add_argument("--no-probe", dest="probe", action="store_const", const=None, help="skip the position metric")
    p.add_argument("--autoencoder-only", dest="autoencoder_only", action="store_true",
                   help="only the autoencoder's ceiling and the probe's round-trip floor (no DiT rollouts, no targets)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--out", default=None, help=out_help("fidelity"))
    p.add_argument("--no-progress", dest="progress", action="store_false")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    if args.paired:
        try:
            diffs = paired_reports(*args.paired)
        except (OSError, ValueError) as e:
            parser.error(str(e))
        print("\n\n".join(format_paired(d) for d in diffs))
        return 0
    checkpoints = args.compare or ([args.checkpoint] if args.checkpoint else [])
    if not checkpoints:
        parser.error("give --checkpoint DIR, --compare DIR DIR ... or --paired A.json B.json")
    fields = {k: getattr(args, k) for k in Config.__dataclass_fields__ if k != "checkpoints"}
    from neuralsim.world_model.model import CheckpointError

    cfg = Config(checkpoints=checkpoints, **fields)
    try:
        report = run(cfg)
    except (CheckpointError, FileNotFoundError) as e:  # raised before any work (run checks its inputs first)
        parser.error(str(e))
    print(format_table(report))
    print(f"\n{report['seconds']:.1f} s; JSON: {out_path(cfg)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
