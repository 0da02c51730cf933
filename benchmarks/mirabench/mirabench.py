"""MiraBench's three levels on the world model, each checked against SimDROID's ground truth.

Usage::

    python -m benchmarks.mirabench --quick                        # 1 episode, a smoke run (< 3 min)
    python -m benchmarks.mirabench --episodes 48 --cache runs/mirabench/videos    # the reported run
    python -m benchmarks.mirabench --checkpoint runs/sf/model --optimism runs/sf_optimism_bias.json

MiraBench (Level 1 physics adherence, Level 2 action-following fidelity, Level 3 optimism bias) judges generated
videos with VLMs calibrated on human labels.  Here every held-out episode also exists in the simulator, so each
indicator is read by a fixed, inspectable tracker and set against the truth:

* **Videos.**  Held-out SimDROID episodes of the world model's scene (``--data``, the first ``--episodes``; by
  default ``data/simdroid_heldout`` for a classic model, ``data/legible_heldout`` for a legible one; a split of
  another scene is refused); the world model replays each episode's recorded actions from its first frame
  (:mod:`benchmarks.mirabench.world_model_videos`, optionally cached).  The simulator of that scene (SimDROID-v0
  classic, SimDROID-v1 legible) replays the same actions from the same seed (:func:`truth_replay`), which reproduces
  the recorded episode and gives every cube's exact position in every frame.
* **Tracks.**  :func:`benchmarks.common.cube_tracks.track_video` reads each cube's position (the fidelity benchmark's
  object probe of the scene), visible area and colour drift in every frame of the generated video and of the true
  one.  The arm's tool point of a generated video is forward kinematics of the env's action adapter (what the world
  model was conditioned on); of the true video, of the simulator's joints.
* **Level 1** (reference-free, :mod:`benchmarks.mirabench.indicators`): per cube, existence, colour, size,
  occlusion, teleport, post-contact drift and fall, each reported separately as the share of (episode, cube) pairs
  that pass among those it applies to.  The check against truth: the same reader on the simulator's true video
  (``true_video``; an indicator the true video fails is the reader's limit, not a physics violation), on the true
  video through the world model's autoencoder (``round_trip``: what a perfect DiT on this autoencoder would show
  the reader), and for the motion indicators on the simulator's exact positions (``simulator``).  ``confirmed`` =
  share of the generated video's failures on cubes whose true video passes (or where the indicator does not apply
  to it: the true cube never disappeared, never hovered).
* **Level 2** (against the truth for the same actions): task completion (the target's end position, read by the
  probe, in the goal region; TCR = share of truly successful episodes the video shows succeeding, and the share of
  truly failed ones it shows succeeding), grounding (the cubes that moved in the video -- net displacement above
  5 cm -- are the ones that moved in the simulator) and motion quality (the target's track against its true track).
* **Level 3**: read from :mod:`benchmarks.optimism_bias`'s report (``--optimism``; its TCR and Bias Res.), which must
  be of the world model's scene (a report that records none is classic's): the shipped report of another scene is
  left out with a warning, a given one is refused.
* **Headline** (MiraBench Fig. 4a, "action following does not guarantee failure preservation"): on Level 3's own
  rollouts, failure preservation of the perturbed rollouts of episodes whose nominal video the judge shows
  succeeding against those it does not; reproduced when following the nominal actions does not come with more
  failures preserved.

Writes ``benchmarks/results/mirabench.json`` (``--quick``: ``mirabench_quick.json``); docs/BENCHMARKS.md has the
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

from ..common.results_path import results_path
from ..common.stats import wilson_interval
from . import indicators as I
from . import world_model_videos as W

log = logging.getLogger(__name__)

QUICK_EPISODES = 1
#: Level 1 indicators: appearance ones read area and colour, motion ones positions (and the tool point).
APPEARANCE = ("existence", "colour", "size", "occlusion")
MOTION = ("teleport", "post_contact_drift", "fall")
LEVEL1 = APPEARANCE + MOTION
#: What the tracker reads: the world model's video, the true video through the model's autoencoder (the best any
#: DiT on this autoencoder could show the reader) and the simulator's true video (the reader's own floor).
SOURCES = ("generated", "round_trip", "true_video")


@dataclass
class Config:
    """Options of ``python -m benchmarks.mirabench``."""

    checkpoint: str | None = None
    """World-model directory (None: the shipped model)."""
    data: str | None = None
    """Held-out SimDROID split of the world model's scene; None: that scene's
    (:func:`benchmarks.common.heldout.default_split`: ``data/simdroid_heldout`` classic, ``data/legible_heldout``
    legible)."""
    episodes: int = 32
    """The first N episodes of ``data``."""
    seed: int = 0
    """World-model noise: episode i uses seed + i."""
    probe: str = "default"
    """Object-probe directory (the cube tracker) of the world model's scene; ``"default"``: the shipped probe of
    that scene (``benchmarks/common/assets/fidelity_probe[_legible]``)."""
    optimism: str | None = "default"
    """Level 3: an optimism_bias JSON of the same world model (None: Level 3 left out); ``"default"``: the shipped
    report, ``benchmarks/results/optimism_bias.json``, when it is of the world model's scene."""
    cache: str | None = None
    """Directory caching the generated videos (shared with idm_turing); None: generate every time."""
    quick: bool = False
    threads: int = 1
    out: str | None = None
    progress: bool = True


# ---------------------------------------------------------------------------------------------- truth
def truth_replay(episode, scene: str = "classic") -> dict[str, Any]:
    """Replay ``episode``'s recorded actions in SimDROID's ``scene`` (the one it was recorded in) from its seed:
    per-frame exact cube positions (T, C, 3), the tool point (T, 3), and the end's success (the recorded episode's,
    which the replay reproduces)."""
    from neuralsim.envs.sim_droid import SimDROIDEnv

    rec = episode.record
    # positions only: render small
    env = SimDROIDEnv(image_size=16, reward_fn=None, max_episode_steps=None, scene=scene)
    try:
        env.reset(seed=int(rec["seed"]), options={"task": rec["task"]})
        n_c = env.scene.num_cubes
        xyz, tcp = [np.stack([env.cube_position(i) for i in range(n_c)])], [env.tcp_position()]
        info: dict[str, Any] = {}
        for a in episode.actions[:len(episode) - 1]:
            _, _, _, _, info = env.step(a)
            xyz.append(np.stack([env.cube_position(i) for i in range(n_c)]))
            tcp.append(env.tcp_position())
    finally:
        env.close()
    return {"xyz": np.stack(xyz), "tcp": np.stack(tcp), "success": bool(info.get("success", rec["success"]))}


def goal_of(record: dict, scene: str = "classic") -> tuple[np.ndarray, float]:
    """The goal region of an episode of SimDROID's ``scene``: centre (table xy, from its initial poses) and half-size
    [m] (SimDROID's success test: the scene's bowl or pad half-size per axis, 0.6 cube sizes around the base
    cube)."""
    from neuralsim.envs.scene import get_scene

    sc = get_scene(scene)
    poses, task = record["initial_poses"], record["task"]
    if task == "put_in_bowl":
        return np.asarray(poses["bowl"][:2]), sc.bowl_half
    if task == "push_to_pad":
        return np.asarray(poses["pad"][:2]), sc.pad_half
    return np.asarray(poses[record["base"]][:2]), 0.6 * sc.cube_size


# ---------------------------------------------------------------------------------------------- per episode
def level1(tracks, simulator: dict | None = None) -> dict[str, list[dict]]:
    """Every Level 1 indicator on every cube of one video's tracks (and, for motion, on the simulator's exact
    positions)."""
    out: dict[str, list[dict]] = {k: [] for k in LEVEL1}
    for c in range(len(tracks.names)):
        area, drift, xyz = tracks.area[:, c], tracks.colour_drift[:, c], tracks.xyz[:, c]
        out["existence"].append(I.existence(area).as_dict())
        out["colour"].append(I.colour_consistency(area, drift).as_dict())
        out["size"].append(I.size_consistency(area).as_dict())
        out["occlusion"].append(I.occlusion_consistency(area, drift).as_dict())
        out["teleport"].append(I.teleport(xyz, area).as_dict())
        out["post_contact_drift"].append(I.post_contact_drift(xyz, tracks.tcp, area).as_dict())
        out["fall"].append(I.fall(xyz, tracks.tcp, area).as_dict())
    if simulator is not None:
        for c in range(len(tracks.names)):
            xyz = simulator["xyz"][:, c]
            for name, ind in (("teleport", I.teleport(xyz)), ("post_contact_drift",
                              I.post_contact_drift(xyz, simulator["tcp"])), ("fall", I.fall(xyz, simulator["tcp"]))):
                out.setdefault(f"{name}_simulator", []).append(ind.as_dict())
    return out


def level2(tracks, true_xyz: np.ndarray, record: dict, true_success: bool, scene: str = "classic") -> dict[str, Any]:
    """Task completion, grounding and motion quality of one video's tracks against the simulator's positions."""
    target = tracks.names.index(record["target"])
    goal, half = goal_of(record, scene)
    end_xy = np.median(tracks.xyz[-3:, target, :2], axis=0)
    moved = np.array([I.net_displacement(tracks.xyz[:, c]) > I.MOVED_M for c in range(len(tracks.names))])
    true_moved = np.array([I.net_displacement(true_xyz[:, c]) > I.MOVED_M for c in range(len(tracks.names))])
    return {"completion": I.task_completion(end_xy, record["task"], goal, half, true_success),
            "grounding": I.grounding(moved, true_moved, target),
            "motion": I.motion_quality(tracks.xyz[:, target], true_xyz[:, target])}


def evaluate_episode(probe, episode, generated: np.ndarray, round_trip: np.ndarray | None = None,
                     scene: str = "classic") -> dict[str, Any]:
    """Level 1 and 2 of one held-out episode of SimDROID's ``scene`` on each of :data:`SOURCES`: the generated video,
    the true one through the world model's autoencoder (``round_trip``; skipped when None) and the true one."""
    from neuralsim.envs import adapter as A

    from ..common.cube_tracks import track_video

    rec = episode.record
    cubes = [f"{c}_cube" for c in rec["colors"]]
    truth = truth_replay(episode, scene)
    n = len(episode)
    q_model, _ = A.rollout(episode.joint_position[:1], episode.gripper_position[:1].reshape(1, 1),
                           episode.actions[None, :n - 1])  # the joints the world model was conditioned on
    tracks = {"generated": track_video(probe, generated, cubes, q_model[0], scene),
              "true_video": track_video(probe, episode.frames, cubes, episode.joint_position, scene)}
    if round_trip is not None:
        tracks["round_trip"] = track_video(probe, round_trip, cubes, episode.joint_position, scene)
    return {"index": episode.index, "task": rec["task"], "target": rec["target"], "failure": rec.get("failure"),
            "true_success": truth["success"], "frames": n,
            "level1": {k: level1(t, truth if k == "true_video" else None) for k, t in tracks.items()},
            "level2": {k: level2(t, truth["xyz"], rec, truth["success"], scene) for k, t in tracks.items()}}


# ---------------------------------------------------------------------------------------------- summaries
def _share(flags: list[bool]) -> dict[str, Any]:
    k, n = int(sum(flags)), len(flags)
    return {"rate": None if n == 0 else k / n, "n": n, "ci95": wilson_interval(k, n)}


def summarise_level1(rows: list[dict]) -> dict[str, Any]:
    """Per indicator: pass rate over the (episode, cube) pairs it applies to, on each of :data:`SOURCES` (motion:
    also on the simulator's positions), and the share of generated failures the true video confirms."""
    out = {}
    for name in LEVEL1:
        gen = [c["passed"] for r in rows for c in r["level1"]["generated"][name]]
        true = [c["passed"] for r in rows for c in r["level1"]["true_video"][name]]
        fails = [t for g, t in zip(gen, true) if g is False]  # the true video passing or N/A confirms a failure
        cell = {src: _share([c["passed"] for r in rows if src in r["level1"] for c in r["level1"][src][name]
                             if c["passed"] is not None]) for src in SOURCES}
        cell.update(not_applicable_generated=sum(g is None for g in gen),
                    confirmed=None if not fails else sum(t is not False for t in fails) / len(fails))
        if name in MOTION:
            sim = [c["passed"] for r in rows for c in r["level1"]["true_video"][f"{name}_simulator"]]
            cell["simulator"] = _share([s for s in sim if s is not None])
        out[name] = cell
    # MiraBench's two sub-levels: physical consistency (appearance) and physics-law compliance (motion), per video
    for label, names in (("physical_consistency", APPEARANCE), ("physics_law", MOTION)):
        for src in SOURCES:
            ok = [all(c["passed"] is not False for n in names for c in r["level1"][src][n]) for r in rows
                  if src in r["level1"]]
            out.setdefault(label, {})[src] = _share(ok)
    return out


def summarise_level2(rows: list[dict]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for src in SOURCES:
        l2 = [r["level2"][src] for r in rows if src in r["level2"]]
        if not l2:
            continue
        ok = [x["completion"] for x in l2 if x["completion"]["true_success"]]
        bad = [x["completion"] for x in l2 if not x["completion"]["true_success"]]
        ratios = [x["motion"]["path_length_ratio"] for x in l2 if x["motion"]["path_length_ratio"] is not None]
        out[src] = {
            "task_completion": _share([c["shown_success"] for c in ok]),
            "false_success": _share([c["shown_success"] for c in bad]),
            "outcome_agreement": _share([c["agrees"] for c in (ok + bad)]),
            "grounding": _share([x["grounding"]["passed"] for x in l2]),
            "target_moved_when_truly_moved": _share([x["grounding"]["target_moved"] for x in l2
                                                     if x["grounding"]["target_truly_moved"]]),
            "distractor_moved": _share([x["grounding"]["distractor_moves"] > 0 for x in l2]),
            "track_error_m_mean": float(np.mean([x["motion"]["track_error_m"] for x in l2])),
            "on_path_share_mean": float(np.mean([x["motion"]["on_path_share"] for x in l2])),
            "path_length_ratio_median": float(np.median(ratios)) if ratios else None,
        }
    return out


def level3_source(optimism: str | None, scene: str) -> tuple[str | None, str | None]:
    """The optimism_bias report Level 3 reads for a world model of ``scene``, and why there is none when there is
    not: ``"default"`` is the shipped report, left out (with a warning) when it is of another scene; a given report of
    another scene is refused (ValueError).  A report that records no scene is classic's."""
    if optimism is None:
        return None, "--no-level3"
    path = results_path("optimism_bias") if optimism == "default" else Path(optimism)
    if not path.is_file():
        return None, f"no optimism_bias report at {_relative(str(path))}"
    try:
        of = json.loads(path.read_text()).get("scene", "classic")
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot read the optimism_bias report {path}: {e}") from None
    if of == scene:
        return str(path), None
    why = (f"the optimism_bias report {_relative(str(path))} is of the {of} scene, the world model of the {scene} one")
    if optimism != "default":
        raise ValueError(f"{why}: pass --optimism of a run on this world model, or --no-level3")
    log.warning("%s: Level 3 left out; make a report of this model with `python -m benchmarks.optimism_bias "
                "--episodes 12` (and --checkpoint DIR for a model other than the shipped one)", why)
    return None, why


def level3(path: str | None) -> dict[str, Any] | None:
    """Level 3 from an optimism_bias report: TCR and Bias Res. (judge and probe), and the headline check."""
    if not path or not Path(path).is_file():
        return None
    res = json.loads(Path(path).read_text())
    nom, overall = res["nominal"], res["overall"]
    return {"source": _relative(str(Path(path).resolve())), "episodes": res["config"]["episodes"],
            "severity": res["config"]["severity"],
            "tcr_judge": nom["success_preservation"], "bias_res_judge": overall["failure_preservation"],
            "tcr_probe": nom["probe_success_preservation"], "bias_res_probe": overall["probe_failure_preservation"],
            "per_family_bias_res_judge": {f: c["failure_preservation"] for f, c in res["per_family"].items()},
            "decoupling": decoupling(res["rollouts"])}


def decoupling(rollouts: list[dict]) -> dict[str, Any]:
    """Does following the nominal actions go with preserving failures?  Over the optimism_bias rollouts: Bias Res.
    (judge level < 5 on truly failing perturbed rollouts) of episodes whose nominal video the judge shows succeeding
    vs not, per task family and overall.  MiraBench's finding holds here when the two do not move together."""
    nominal = {(r["seed"], r["task"]): r["predicted_level"] is not None and r["predicted_level"] >= 5
               for r in rollouts if r["family"] == "nominal"}
    pert = [r for r in rollouts if r["family"] != "nominal" and not r["true_success"]
            and r["predicted_level"] is not None]

    def split(rows):
        return {key: _share([r["predicted_level"] < 5 for r in rows if nominal.get((r["seed"], r["task"])) is want])
                for key, want in (("nominal_shown_success", True), ("nominal_shown_failure", False))}

    tasks = sorted({r["task"] for r in rollouts})
    per_task = {t: {"tcr": _share([v for (s, tk), v in nominal.items() if tk == t]),
                    "bias_res": _share([r["predicted_level"] < 5 for r in pert if r["task"] == t])} for t in tasks}
    return {"overall": split(pert), "per_task": per_task}


def headline(l3: dict | None) -> dict[str, Any] | None:
    """MiraBench's finding (Fig. 4a: action following does not guarantee failure preservation) asked of our rollouts:
    do the episodes whose nominal actions the world model follows preserve failures more often than the others?
    ``reproduced`` when they do not (their Bias Res. is not higher); task families ranked both ways beside it."""
    if l3 is None:
        return None
    d = l3["decoupling"]["overall"]
    a, b = d["nominal_shown_success"]["rate"], d["nominal_shown_failure"]["rate"]
    per_task = l3["decoupling"]["per_task"]
    return {"bias_res_when_nominal_followed": a, "bias_res_when_nominal_not_followed": b,
            "task_order_by_tcr": sorted(per_task, key=lambda t: per_task[t]["tcr"]["rate"] or 0.0),
            "task_order_by_bias_res": sorted(per_task, key=lambda t: per_task[t]["bias_res"]["rate"] or 0.0),
            "reproduced": None if a is None or b is None else bool(a <= b)}


# ---------------------------------------------------------------------------------------------- run
def run(cfg: Config) -> dict[str, Any]:
    import torch
    from tqdm import tqdm

    from neuralsim.envs.neural_droid import load_world_model

    from ..common import object_probe
    from ..common.heldout import load_split, round_trip_frames
    from .world_model_videos import generate

    torch.set_num_threads(int(cfg.threads))
    t0 = time.perf_counter()
    n = QUICK_EPISODES if cfg.quick else cfg.episodes
    if n < 1:
        raise ValueError(f"episodes must be >= 1, got {n}")
    # every input must be of the world model's scene, checked by name before any work
    scene, data = W.scene_and_split(cfg.checkpoint, cfg.data)
    probe_dir = object_probe.default_dir(scene) if cfg.probe == "default" else Path(cfg.probe)
    probe = object_probe.load(probe_dir)
    if probe.config.scene != scene:
        raise ValueError(f"the object probe at {probe_dir} reads the {probe.config.scene} scene, the world model "
                         f"the {scene} one: pass --probe of that scene")
    optimism, level3_skipped = level3_source(cfg.optimism, scene)
    cfg = replace(cfg, data=data, probe=str(probe_dir), optimism=optimism)
    wm = load_world_model(cfg.checkpoint)
    episodes = load_split(cfg.data, wm.config.autoencoder.image_size, n)
    videos = generate(wm, episodes, seed=cfg.seed, cache=cfg.cache, checkpoint=cfg.checkpoint, progress=cfg.progress)
    rows = [evaluate_episode(probe, e, v, round_trip_frames(wm, e.frames, reference=e.frames[0]), scene)
            for e, v in tqdm(list(zip(episodes, videos)), desc="tracking", unit="episode", disable=not cfg.progress)]
    l1, l2, l3 = summarise_level1(rows), summarise_level2(rows), level3(cfg.optimism)
    report = {"benchmark": "mirabench", "scene": scene, "config": {k: _relative(v) for k, v in asdict(cfg).items()},
              "episodes": len(rows),
              "frames": int(sum(r["frames"] for r in rows)),
              "thresholds": {k: getattr(I, k) for k in dir(I) if k.isupper()},
              "level1": l1, "level2": l2, "level3": l3, "level3_skipped": None if l3 else level3_skipped,
              "headline": headline(l3),
              "seconds": round(time.perf_counter() - t0, 1), "per_episode": rows}
    out = results_path("mirabench", cfg.quick, cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(dump_report(report))
    return report


def dump_report(report: dict[str, Any]) -> str:
    """The report as JSON: indented, except one line per episode in ``per_episode``."""
    head = json.dumps({k: v for k, v in report.items() if k != "per_episode"}, indent=1, default=_json_default)
    rows = ",\n  ".join(json.dumps(r, default=_json_default) for r in report.get("per_episode", []))
    return head[:-2] + f',\n "per_episode": [\n  {rows}\n ]\n}}\n'



def _relative(value):
    """A path under the working directory as a relative one (the committed report names no machine)."""
    if isinstance(value, str) and value.startswith(str(Path.cwd()) + "/"):
        return value[len(str(Path.cwd())) + 1:]
    return value


def _json_default(x):
    if isinstance(x, (np.floating, np.integer, np.bool_)):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def _pct(cell: dict | None) -> str:
    if not cell or cell.get("rate") is None:
        return "-"
    return f"{100 * cell['rate']:.0f}% (n={cell['n']})"


def format_report(rep: dict[str, Any]) -> str:
    """The three levels side by side, as printed."""
    lines = [f"MiraBench on {rep['episodes']} held-out episodes ({rep['frames']} frames), "
             f"{rep['config']['checkpoint'] or 'the shipped world model'} ({rep.get('scene', 'classic')} scene)",
             "", "Level 1  physics adherence (pass rate over (episode, cube) pairs it applies to)",
             f"  {'indicator':28s} {'generated':>13s} {'round trip':>13s} {'true video':>13s} {'simulator':>13s} "
             f"{'confirmed':>9s}"]
    for name in LEVEL1 + ("physical_consistency", "physics_law"):
        c = rep["level1"][name]
        conf = "-" if c.get("confirmed") is None else f"{100 * c['confirmed']:.0f}%"
        label = name if name in LEVEL1 else f"{name} (videos)"
        lines.append(f"  {label:28s} {_pct(c.get('generated')):>13s} {_pct(c.get('round_trip')):>13s} "
                     f"{_pct(c.get('true_video')):>13s} {_pct(c.get('simulator')):>13s} {conf:>9s}")
    lines += ["", "Level 2  action following (against SimDROID for the same actions)",
              f"  {'measure':30s} {'generated':>13s} {'round trip':>13s} {'true video':>13s}"]
    l2 = [rep["level2"].get(src) for src in SOURCES]
    for key in ("task_completion", "false_success", "outcome_agreement", "grounding", "target_moved_when_truly_moved",
                "distractor_moved"):
        lines.append(f"  {key:30s} " + " ".join(f"{_pct(x[key] if x else None):>13s}" for x in l2))
    cm = lambda x, k: "-" if x is None else f"{100 * x[k]:.1f} cm"  # noqa: E731
    pc = lambda x, k: "-" if x is None else f"{100 * x[k]:.0f}%"  # noqa: E731
    lines.append(f"  {'target track error (mean)':30s} " + " ".join(f"{cm(x, 'track_error_m_mean'):>13s}" for x in l2))
    lines.append(f"  {'target on path (< 5 cm)':30s} " + " ".join(f"{pc(x, 'on_path_share_mean'):>13s}" for x in l2))
    l3 = rep["level3"]
    if l3:
        lines += ["", f"Level 3  optimism bias ({l3['source']}: {l3['episodes']} episodes, severity {l3['severity']})",
                  f"  judge: TCR {100 * l3['tcr_judge']:.0f}%  Bias Res. {100 * l3['bias_res_judge']:.0f}%   "
                  f"probe: TCR {100 * l3['tcr_probe']:.0f}%  Bias Res. {100 * l3['bias_res_probe']:.0f}%"]
        h = rep["headline"]
        lines.append(f"  Bias Res. of episodes whose nominal video is followed "
                     f"{_pct(l3['decoupling']['overall']['nominal_shown_success'])} vs not "
                     f"{_pct(l3['decoupling']['overall']['nominal_shown_failure'])}; task families by TCR "
                     f"{h['task_order_by_tcr']}, by Bias Res. {h['task_order_by_bias_res']}")
        lines.append("  MiraBench's 'action following does not guarantee failure preservation': "
                     f"{'reproduced' if h['reproduced'] else 'not reproduced'}")
    elif rep.get("level3_skipped"):
        lines += ["", f"Level 3  left out: {rep['level3_skipped']}"]
    lines.append(f"\n{rep['seconds']:.0f} s")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    d = Config()
    p = argparse.ArgumentParser(prog="python -m benchmarks.mirabench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="protocol and results: docs/BENCHMARKS.md")
    W.add_arguments(p, d, quick_episodes=QUICK_EPISODES, name="mirabench", shares_cache_with="idm_turing")
    p.add_argument("--probe", default=d.probe, help="object-probe directory (default: the shipped probe of the world "
                   "model's scene)")
    p.add_argument("--optimism", default=d.optimism,
                   help="optimism_bias JSON of the same model for Level 3 (default: the shipped report, "
                        "benchmarks/results/optimism_bias.json, when it is of the world model's scene)")
    p.add_argument("--no-level3", dest="optimism", action="store_const", const=None, help="leave Level 3 out")
    return p


def main(argv: list[str] | None = None) -> int:
    return W.cli(build_parser(), argv, Config, run, format_report, "mirabench")


if __name__ == "__main__":
    sys.exit(main())
