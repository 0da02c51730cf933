"""Open-loop fidelity of a world model against SimDROID: PSNR / SSIM per view and object position error.

Usage::

    python -m benchmarks.fidelity --checkpoint runs/sf/model --data data/simdroid_heldout --quick
    python -m benchmarks.fidelity --checkpoint runs/sf/model --data data/simdroid_heldout --ood-data data/simdroid_ood
    python -m benchmarks.fidelity --compare runs/df/model runs/sf/model --data data/simdroid_heldout
    python -m benchmarks.fidelity --compare neuralsim/assets/world_model runs/ae/model --autoencoder-only
    python -m benchmarks.fidelity --paired benchmarks/results/fidelity.json runs/candidate_fidelity.json
    python -m benchmarks.object_probe                    # (re)train the object-position probe only

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
* **Object position** at the end of the episode: a small CNN probe (:mod:`benchmarks.object_probe`,
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
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from neuralsim.episode import VIEW_NAMES

from .object_probe import DEFAULT_DIR as DEFAULT_PROBE_DIR
from .results_path import out_help, results_path
from .stats import mcnemar_exact, wilson_interval

log = logging.getLogger(__name__)

#: PSNR of identical frames (MSE 0) and the most any frame can score [dB].
PSNR_CAP_DB = 100.0
#: Position error counted as "right": the cube's edge length [m].
POSITION_TOLERANCE_M = 0.05
QUICK_EPISODES = 4
QUICK_OOD_EPISODES = 2
#: ``--conditioning``: how the world model is driven along a held-out episode (:class:`Config`).
CONDITIONINGS = ("replay", "recorded")
#: The targets on the held-out split (per-view mean, 64x64 views; docs/FIDELITY.md, "Targets"); the OOD split has none.
TARGETS = {"ssim_in_horizon": 0.85, "ssim_beyond": 0.80, "psnr_in_horizon": 25.0, "share_below_5cm": 0.80}
#: (metric, window) rows of the paired differences and of the per-group scores.
PAIRED_ROWS = (("psnr", "in_horizon"), ("psnr", "beyond"), ("ssim", "in_horizon"), ("ssim", "beyond"))


# ---------------------------------------------------------------------------------------------- metrics
def psnr_frames(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """PSNR [dB] of uint8 images (..., H, W, 3) on [0, 1], one value per image, capped at PSNR_CAP_DB."""
    x = a.astype(np.float64) / 255.0
    y = b.astype(np.float64) / 255.0
    mse = ((x - y) ** 2).mean(axis=(-3, -2, -1))
    floor = 10.0 ** (-PSNR_CAP_DB / 10.0)
    return np.minimum(10.0 * np.log10(1.0 / np.maximum(mse, floor)), PSNR_CAP_DB)


def ssim_frames(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """SSIM of uint8 images (..., H, W, 3) on [0, 1] (``pytorch_msssim.ssim`` defaults), one per image."""
    try:
        from pytorch_msssim import ssim
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("the fidelity benchmark needs pytorch-msssim: pip install 'neuralsim[metrics]'") from e
    import torch

    lead = a.shape[:-3]
    h, w = a.shape[-3:-1]

    def prep(x):
        return torch.from_numpy(np.ascontiguousarray(x.reshape(-1, h, w, 3))).permute(0, 3, 1, 2).double() / 255.0

    with torch.no_grad():
        out = ssim(prep(a), prep(b), data_range=1.0, size_average=False)
    return out.numpy().reshape(lead)


def sharpness_frames(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Detail kept in uint8 images ``a`` (generated) against ``b`` (true), (..., H, W, 3), one value per image:
    the mean absolute difference between neighbouring pixels (both directions, all channels) of ``a`` over that
    of ``b``.  1 = as much fine structure as the truth; below 1 blurrier (a model that hedges between outcomes
    draws their average, which PSNR rewards); above 1 noisier."""
    def detail(x: np.ndarray) -> np.ndarray:
        x = x.astype(np.float64)
        return (np.abs(np.diff(x, axis=-2)).mean(axis=(-3, -2, -1))
                + np.abs(np.diff(x, axis=-3)).mean(axis=(-3, -2, -1)))

    return detail(a) / np.maximum(detail(b), 1e-6)


@dataclass
class Windows:
    """Frame windows of the protocol, from the training clip length H."""

    clip_length: int

    @property
    def in_horizon(self) -> range:
        return range(1, self.clip_length + 1)

    @property
    def beyond(self) -> range:
        return range(self.clip_length + 1, 2 * self.clip_length + 1)

    def items(self):
        return (("in_horizon", self.in_horizon), ("beyond", self.beyond))


def frame_metrics(generated: list[np.ndarray], truth: list[np.ndarray], windows: Windows) -> dict[str, Any]:
    """PSNR / SSIM / MSE / sharpness (:func:`sharpness_frames`) per window and view, plus per-frame curves, over
    episodes of (T, V, S, S, 3) frames."""
    last = 2 * windows.clip_length
    per = {"psnr": [], "ssim": [], "mse": [], "sharpness": []}  # each: list over episodes of (T', V)
    for g, y in zip(generated, truth, strict=True):
        n = min(len(g), len(y), last + 1)
        g, y = g[1:n], y[1:n]
        per["psnr"].append(psnr_frames(g, y))
        per["ssim"].append(ssim_frames(g, y))
        diff = (g.astype(np.float64) - y.astype(np.float64)) / 255.0
        per["mse"].append((diff**2).mean(axis=(-3, -2, -1)))
        per["sharpness"].append(sharpness_frames(g, y))
    out: dict[str, Any] = {}
    for name, values in per.items():
        out[name] = {}
        # per episode (for paired A/Bs): each episode's mean over the window's frames, per view and over views;
        # None where the episode has no frame in the window
        per_episode: dict[str, dict[str, list[float | None]]] = {}
        for wname, frames in windows.items():
            all_rows = [v[[t - 1 for t in frames if t - 1 < len(v)]] for v in values]
            cols = {view: [round(float(r[:, i].mean()), 5) if len(r) else None for r in all_rows]
                    for i, view in enumerate(VIEW_NAMES)}
            cols["mean"] = [round(float(r.mean()), 5) if len(r) else None for r in all_rows]
            per_episode[wname] = cols
            rows = [r for r in all_rows if len(r)]
            if not rows:
                out[name][wname] = None
                continue
            stacked = np.concatenate(rows)  # (frames over episodes, V)
            by_view = {view: float(stacked[:, i].mean()) for i, view in enumerate(VIEW_NAMES)}
            by_view["mean"] = float(np.mean(list(by_view.values())))
            by_view["frames"] = int(len(stacked))
            out[name][wname] = by_view
        out[name]["per_episode"] = per_episode
        # per-frame curve (mean over episodes and views), frames 1 .. 2H
        curve = []
        for t in range(1, last + 1):
            vals = [v[t - 1].mean() for v in values if t - 1 < len(v)]
            curve.append(float(np.mean(vals)) if vals else None)
        out[name]["per_frame"] = curve
    return out


# ---------------------------------------------------------------------------------------------- data
@dataclass
class EvalEpisode:
    """One held-out episode at the model's resolution."""

    index: int
    record: dict
    frames: np.ndarray  # (T, V, S, S, 3) uint8, VIEW_NAMES order
    actions: np.ndarray  # (T, 8): action after frame t (last row: hold)
    spec: Any  # neuralsim.envs.episodes.EpisodeSpec of frame 0
    joint_position: np.ndarray | None = None  # (T, 7) the simulator's joint state at each frame
    gripper_position: np.ndarray | None = None  # (T, 1) the measured gripper at each frame

    def __len__(self) -> int:
        return len(self.frames)

    @property
    def target_rgb(self) -> np.ndarray:
        from .object_probe import colour_rgb

        return colour_rgb(self.record["target"])

    @property
    def target_final_xy(self) -> np.ndarray:
        return np.asarray(self.record["final_poses"][self.record["target"]][:2], np.float64)

    @property
    def target_start_xy(self) -> np.ndarray | None:
        """Where the target cube stood at frame 0 (None for records written before ``initial_poses``)."""
        poses = self.record.get("initial_poses")
        return None if poses is None else np.asarray(poses[self.record["target"]][:2], np.float64)


def finished_records(root: str | Path) -> list[dict]:
    """The records of a dataset's finished episodes; FileNotFoundError, by name, when it has none."""
    from neuralsim.data.reader import list_episodes

    records = list_episodes(root)
    if not records:
        raise FileNotFoundError(f"{str(root)!r} holds no finished episodes; generate it first (docs/FIDELITY.md)")
    return records


def load_split(root: str | Path, image_size: int, max_episodes: int | None = None) -> list[EvalEpisode]:
    """Decode the first ``max_episodes`` episodes of a SimDROID dataset, resized to ``image_size``."""
    from neuralsim.data.reader import load_episode
    from neuralsim.envs.episodes import EpisodeSpec, resize_image

    records = finished_records(root)
    missing = [k for k in ("target", "final_poses", "seed") if k not in records[0]]
    if missing:
        raise ValueError(f"{str(root)!r} records lack {missing}: not written by `neuralsim data generate`")
    out = []
    for rec in records[:max_episodes]:
        ep = load_episode(root, rec)
        frames = ep.frames
        if frames.shape[2] != image_size:
            frames = np.stack([[resize_image(f, image_size) for f in step] for step in frames])
        name = f"{rec.get('task', 'episode')}_{rec['seed']}"
        spec = EpisodeSpec(name=name, views={v: frames[0, i] for i, v in enumerate(VIEW_NAMES)},
                           joint_position=ep.joint_position[0], gripper_position=ep.gripper_position[0],
                           instruction=rec.get("instruction", ""),
                           metadata={"source": str(root), "episode_index": int(rec["episode_index"]),
                                     "seed": int(rec["seed"])})
        out.append(EvalEpisode(int(rec["episode_index"]), rec, frames, ep.actions, spec,
                               np.asarray(ep.joint_position, np.float64), np.asarray(ep.gripper_position, np.float64)))
    return out


# ---------------------------------------------------------------------------------------------- generation
def open_loop(wm, episodes: Sequence[EvalEpisode], *, seed: int = 0, batch_size: int = 8,
              context_window: int | None = None, denoising_steps: int | None = None,
              progress: bool = False) -> list[np.ndarray]:
    """Replay each episode's recorded actions in ``NeuralDROIDVectorEnv`` from its first frame.

    Returns one uint8 (T, V, S, S, 3) array per episode, frame 0 being the given first frame.
    Rows whose episode is shorter than the batch's longest keep stepping with the hold action; their
    extra frames are dropped.  Every env gets the whole list as its episode set, so an episode's
    world-model noise depends on ``seed + index`` and the list's length, not on the batching.
    """
    from tqdm import tqdm

    from neuralsim.envs.neural_droid import NeuralDROIDVectorEnv

    out: list[np.ndarray] = []
    specs = [e.spec for e in episodes]
    total = sum(len(e) - 1 for e in episodes)
    bar = tqdm(total=total, disable=not progress, desc="generating", unit="frame")
    for start in range(0, len(episodes), batch_size):
        chunk = list(episodes[start:start + batch_size])
        env = NeuralDROIDVectorEnv(num_envs=len(chunk), checkpoint=wm, reward_fn=None, max_episode_steps=None,
                                   context_window=context_window, denoising_steps=denoising_steps, episodes=specs)
        obs, _ = env.reset(seed=[seed + e.index for e in chunk], options={"episode": [e.spec.name for e in chunk]})
        length = max(len(e) for e in chunk)
        frames = np.zeros((len(chunk), length, len(VIEW_NAMES), *obs[VIEW_NAMES[0]].shape[1:]), np.uint8)
        frames[:, 0] = np.stack([obs[v] for v in VIEW_NAMES], axis=1)
        for t in range(length - 1):
            actions = np.stack([e.actions[min(t, len(e) - 1)] for e in chunk])
            obs, *_ = env.step(actions)
            frames[:, t + 1] = np.stack([obs[v] for v in VIEW_NAMES], axis=1)
            bar.update(sum(t < len(e) - 1 for e in chunk))
        env.close()
        out += [frames[i, :len(e)] for i, e in enumerate(chunk)]
    bar.close()
    return out


def recorded_conditioning(wm, episode: EvalEpisode) -> np.ndarray:
    """(T, 7) float32: the world model's conditioning at each frame of ``episode`` from the *recorded* robot
    state -- forward kinematics of the simulator's joints (whatever ``WorldModelConfig.arm_conditioning`` the model
    was trained on: this is the ground-truth pose), and the gripper signal the model was trained on
    (``WorldModelConfig.gripper_conditioning``: the measured position, or the command through the adapter's lag)."""
    from neuralsim import kinematics as K
    from neuralsim.world_model.latents import env_cond

    if episode.joint_position is None or episode.gripper_position is None:
        raise ValueError(f"episode {episode.index} has no recorded joint and gripper state (load it with load_split)")
    cond = np.concatenate([K.forward_kinematics(episode.joint_position), episode.gripper_position.reshape(-1, 1)],
                          axis=1).astype(np.float32)
    return env_cond(cond, episode.joint_position, episode.actions,
                    gripper=getattr(wm.config, "gripper_conditioning", "measured"), arm="measured")


def open_loop_recorded(wm, episodes: Sequence[EvalEpisode], *, seed: int = 0, batch_size: int = 8,
                       context_window: int | None = None, denoising_steps: int | None = None,
                       progress: bool = False) -> list[np.ndarray]:
    """:func:`open_loop` with the conditioning of the recorded robot state (:func:`recorded_conditioning`) in place
    of the env's replay of the recorded actions: RoboWorld's open-loop protocol (the ground-truth conditioning
    sequence), which leaves out what the env's contact-free action adapter adds (``adapter_replay`` in the report).

    Everything else is NeuralDROID's: the noise of env row ``seed + index`` of :func:`open_loop` (one standard
    normal latent frame per step), window, denoising schedule, decoding against the first frame.
    """
    import torch
    from gymnasium.utils import seeding
    from tqdm import tqdm

    from neuralsim.envs.neural_droid import draw_episode_and_noise_seed, inference_schedule

    window = wm.config.window if context_window is None else int(context_window)
    schedule = inference_schedule(wm.config, denoising_steps)
    d = wm.config.dit
    out: list[np.ndarray] = []
    bar = tqdm(total=sum(len(e) - 1 for e in episodes), disable=not progress, desc="generating", unit="frame")
    for start in range(0, len(episodes), batch_size):
        chunk = list(episodes[start:start + batch_size])
        conds = [recorded_conditioning(wm, e) for e in chunk]
        b, length = len(chunk), max(len(e) for e in chunk)
        state = wm.new_state(b, window=window, num_sink=0, device=wm.device)
        # open_loop resets env row i with seed + index over the whole episode list: the same noise seed
        gens = [torch.Generator().manual_seed(draw_episode_and_noise_seed(seeding.np_random(seed + e.index)[0],
                                                                          len(episodes))[1]) for e in chunk]
        views = np.stack([e.frames[0] for e in chunk])
        frames = np.zeros((b, length, *views.shape[1:]), np.uint8)
        frames[:, 0] = views
        cond_at = lambda t: torch.from_numpy(np.stack([c[min(t, len(c) - 1)] for c in conds]))  # noqa: E731
        with torch.inference_mode():
            wm.reset(state, torch.arange(b), torch.from_numpy(views), cond_at(0))
            for t in range(1, length):
                noise = torch.cat([torch.randn((1, d.num_views, d.latent_channels, d.latent_size, d.latent_size),
                                               generator=g) for g in gens]).to(wm.device)
                latents = wm.generate(state, noise, cond_at(t).to(wm.device), schedule=schedule)
                frames[:, t] = wm.decode(latents, state.reference()).cpu().numpy()
                bar.update(sum(t < len(e) for e in chunk))
        out += [frames[i, :len(e)] for i, e in enumerate(chunk)]
    bar.close()
    return out


def adapter_replay_drift(episodes: Sequence[EvalEpisode]) -> dict[str, Any] | None:
    """How far the env's action adapter, replaying each episode's recorded actions from its first state, ends from
    the simulator's flange (xyz distance at the last frame).  The adapter knows no contacts: where the simulator's
    arm is held back (pressed on the table, pushing a cube) the replay runs on, so the ``replay`` conditioning
    already puts the arm -- and what it pushes -- elsewhere than the true frames, whatever the world model does.
    None without recorded joint states."""
    from neuralsim import kinematics as K
    from neuralsim.envs import adapter as A

    if any(e.joint_position is None for e in episodes):
        return None
    err, by_family = [], {}
    for e in episodes:
        q, _ = A.rollout(e.joint_position[:1], e.gripper_position[:1].reshape(1, 1), e.actions[None, :len(e) - 1])
        d = float(np.linalg.norm(K.forward_kinematics(q[0, -1])[:3] - K.forward_kinematics(e.joint_position[-1])[:3]))
        err.append(d)
        by_family.setdefault(str(e.record.get("family") or e.record.get("task") or "episode"), []).append(d)
    err_a = np.asarray(err)
    return {"end_flange_error_m_mean": float(err_a.mean()), "end_flange_error_m_median": float(np.median(err_a)),
            "share_below_5cm": float((err_a < POSITION_TOLERANCE_M).mean()),
            "by_task_m_mean": {k: float(np.mean(v)) for k, v in sorted(by_family.items())},
            "per_episode_m": [round(x, 4) for x in err]}


def end_frame_scores(generated: Sequence[np.ndarray], episodes: Sequence[EvalEpisode]) -> dict[str, Any]:
    """The last frame of each episode (however far past the windows it lies): its PSNR (mean over views) against
    the true last frame, against that of frame 0 held still, and the share of episodes where the generated frame
    scores *below* the held frame 0 -- rollouts that have lost the scene (e.g. dissolved into texture noise)."""
    gen = np.array([psnr_frames(g[-1:], e.frames[-1:]).mean() for g, e in zip(generated, episodes)])
    held = np.array([psnr_frames(e.frames[:1], e.frames[-1:]).mean() for e in episodes])
    lost = gen < held
    return {"psnr_mean": float(gen.mean()), "hold_first_frame_psnr_mean": float(held.mean()),
            "share_lost": float(lost.mean()), "lost_episode_indices": [e.index for e, x in zip(episodes, lost) if x],
            "per_episode_psnr": [round(float(x), 3) for x in gen]}


def autoencoder_round_trip(wm, episodes: Sequence[EvalEpisode], last_frame: int,
                           batch_frames: int = 64) -> list[np.ndarray]:
    """The true frames 0..``last_frame`` of each episode, encoded and decoded by the model's autoencoder.

    A world model's frames pass through the same decoder, so these frames score the best any DiT could
    reach with this autoencoder: the benchmark's ceiling.
    """
    return [round_trip_frames(wm, e.frames[:last_frame + 1], batch_frames, reference=e.frames[0]) for e in episodes]


def round_trip_frames(wm, frames: np.ndarray, batch_frames: int = 64,
                      reference: np.ndarray | None = None) -> np.ndarray:
    """uint8 frames (T, V, S, S, 3) encoded and decoded by the model's autoencoder, ``batch_frames`` at a time.

    ``reference``: the episode's first frame (V, S, S, 3), which a model with a reference head decodes
    against, as the env does (one per frame: ``(T, V, S, S, 3)``).  None: the decoder alone.
    """
    import torch

    frames = torch.from_numpy(np.ascontiguousarray(frames))
    ref = None
    if reference is not None:
        views = torch.from_numpy(np.ascontiguousarray(reference))
        one = views.ndim == 4  # one reference for every frame: encode it once
        views = views[None] if one else views
        latents = wm.encode(views)
        ref = (views.expand(len(frames), *views.shape[1:]), latents.expand(len(frames), *latents.shape[1:])) if one \
            else (views, latents)
    with torch.no_grad():
        parts = [wm.decode(wm.encode(frames[i:i + batch_frames]),
                           None if ref is None else (ref[0][i:i + batch_frames],
                                                     ref[1][i:i + batch_frames])).cpu().numpy()
                 for i in range(0, len(frames), batch_frames)]
    return np.concatenate(parts).astype(np.uint8)


# ---------------------------------------------------------------------------------------------- position
def probe_floors(probe, episodes: Sequence[EvalEpisode], decoded_last: np.ndarray | None = None) -> dict[str, Any]:
    """The probe's table-xy error on each episode's true last frame (``probe_on_true_frames_*``) and, given
    ``decoded_last`` (those frames through a model's autoencoder, (N, V, S, S, 3)), on the round trip
    (``probe_on_round_trip_*``): the best a DiT could score with this autoencoder and this probe."""
    from .object_probe import EXTERIOR_VIEWS, locate

    ext = [VIEW_NAMES.index(v) for v in EXTERIOR_VIEWS]
    truth_xy = np.stack([e.target_final_xy for e in episodes])
    rgb = np.stack([e.target_rgb for e in episodes])
    out = {}
    sources = (("probe_on_true_frames", np.stack([e.frames[-1] for e in episodes])),
               ("probe_on_round_trip", decoded_last))
    for name, frames in sources:
        if frames is not None:
            err = np.linalg.norm(locate(probe, frames[:, ext], rgb)[:, :2] - truth_xy, axis=1)
            out[f"{name}_error_m_mean"] = float(err.mean())
            out[f"{name}_share_below_5cm"] = float((err < POSITION_TOLERANCE_M).mean())
    return out


def position_errors(probe, episodes: Sequence[EvalEpisode], generated: Sequence[np.ndarray],
                    track_every: int = 16, decoded_last: np.ndarray | None = None) -> dict[str, Any]:
    """End-of-episode table-xy error of the target cube in generated and in true last frames, vs the simulator.

    Two references make the error readable: a world model that never moves the cube scores the distance
    the simulator moved it (``cube_left_at_start_*``), and ``generated_end_from_start_m_mean``, set against
    that distance, says how far the generated video carried the cube at all.  ``track`` says when the
    generated cube parts from the true one: every ``track_every`` frames, the probe's answer on the
    generated frame against its answer on the true frame of the same index (episodes that long only).
    ``decoded_last`` (the true last frames through the model's autoencoder, (N, V, S, S, 3)) gives the
    floor a perfect DiT would reach with this autoencoder and probe (``probe_on_round_trip_*``).
    """
    from .object_probe import EXTERIOR_VIEWS, locate

    ext = [VIEW_NAMES.index(v) for v in EXTERIOR_VIEWS]
    truth_xy = np.stack([e.target_final_xy for e in episodes])
    rgb = np.stack([e.target_rgb for e in episodes])
    gen_xy = locate(probe, np.stack([g[-1][ext] for g in generated]), rgb)[:, :2]
    err = np.linalg.norm(gen_xy - truth_xy, axis=1)
    out = {
        "episodes": len(episodes),
        "end_error_m_mean": float(err.mean()),
        "end_error_m_median": float(np.median(err)),
        "share_below_5cm": float((err < POSITION_TOLERANCE_M).mean()),
        "share_below_5cm_ci95": wilson_interval(int((err < POSITION_TOLERANCE_M).sum()), len(err)),
        **probe_floors(probe, episodes, decoded_last),
        "per_episode_error_m": [round(float(x), 4) for x in err],
    }
    track = []
    for t in range(track_every, max(len(e) for e in episodes), track_every):
        alive = [i for i, e in enumerate(episodes) if len(e) > t]
        at = [locate(probe, np.stack([src[i][t][ext] for i in alive]), rgb[alive])[:, :2]
              for src in (generated, [e.frames for e in episodes])]
        d = np.linalg.norm(at[0] - at[1], axis=1)
        track.append({"frame": t, "episodes": len(alive), "error_m_mean": float(d.mean()),
                      "share_below_5cm": float((d < POSITION_TOLERANCE_M).mean())})
    out["track"] = track
    starts = [e.target_start_xy for e in episodes]
    if all(s is not None for s in starts):
        start_xy = np.stack(starts)
        still = np.linalg.norm(start_xy - truth_xy, axis=1)
        out.update({
            "cube_left_at_start_error_m_mean": float(still.mean()),
            "cube_left_at_start_share_below_5cm": float((still < POSITION_TOLERANCE_M).mean()),
            "generated_end_from_start_m_mean": float(np.linalg.norm(gen_xy - start_xy, axis=1).mean()),
        })
    return out


# ---------------------------------------------------------------------------------------------- evaluation
@dataclass
class Config:
    """Options of ``python -m benchmarks.fidelity``."""

    checkpoints: list[str] = field(default_factory=list)
    """World-model directories (``--checkpoint`` or ``--compare``)."""
    data: str = "data/simdroid_heldout"
    ood_data: str | None = None
    quick: bool = False
    max_episodes: int | None = None
    """Episodes per split, the first ones (None: all; --quick: QUICK_EPISODES / QUICK_OOD_EPISODES)."""
    seed: int = 0
    batch_size: int = 8
    context_window: int | None = None
    denoising_steps: int | None = None
    probe: str | None = str(DEFAULT_PROBE_DIR)
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


# ---------------------------------------------------------------------------------------------- paired A/B
def paired_differences(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """B minus A, episode by episode, for two evaluations of one split (``results[i]["splits"][split]``).

    Every episode is scored by both models, so the spread *between* episodes (some are hard for any model)
    cancels and a difference of a few hundredths of a dB can be told from noise.  For each (metric, window)
    and view: the mean of the per-episode differences, its standard error, a 95% interval
    (:func:`difference_summary`) and how many episodes B scores higher.  Episodes are
    matched by their index in the split; those only one side scored are left out (``episodes`` says how
    many pair up).  The cube row is the end-of-episode position error (lower is better), with the
    episodes that cross the 5 cm line each way.
    """
    for name, r in (("A", a), ("B", b)):
        if "episode_indices" not in r or "per_episode" not in (r.get("psnr") or {}):
            raise ValueError(f"report {name} has no per-episode scores: it was written by an older version or is an "
                             "--autoencoder-only report; evaluate it again")
    ia = {idx: k for k, idx in enumerate(a["episode_indices"])}
    pairs = [(ia[idx], k) for k, idx in enumerate(b["episode_indices"]) if idx in ia]
    if not pairs:
        raise ValueError("the two reports share no episode: were they run on the same split?")
    out: dict[str, Any] = {"episodes": len(pairs), "frames": {}}
    # older reports have no sharpness: paired only where both reports have it
    sharp = [("sharpness", w) for w in ("in_horizon", "beyond")] if "sharpness" in a and "sharpness" in b else []
    for metric, window in (*PAIRED_ROWS, *sharp):
        pa, pb = a[metric]["per_episode"][window], b[metric]["per_episode"][window]
        row = {}
        for view in (*VIEW_NAMES, "mean"):
            d = np.array([pb[view][j] - pa[view][i] for i, j in pairs
                          if pa[view][i] is not None and pb[view][j] is not None], np.float64)
            row[view] = difference_summary(d)
        out["frames"][f"{metric}_{window}"] = row
    ea = (a.get("position") or {}).get("per_episode_error_m")
    eb = (b.get("position") or {}).get("per_episode_error_m")
    if ea is not None and eb is not None:
        xa = np.array([ea[i] for i, _ in pairs], np.float64)
        xb = np.array([eb[j] for _, j in pairs], np.float64)
        cube = difference_summary(xb - xa)
        cube["b_better"] = int((xb < xa).sum())  # lower error is better here
        near_a, near_b = xa < POSITION_TOLERANCE_M, xb < POSITION_TOLERANCE_M
        cube["into_5cm"] = int((near_b & ~near_a).sum())
        cube["out_of_5cm"] = int((near_a & ~near_b).sum())
        # does the share below 5 cm differ? the episodes that cross the line are the discordant pairs
        cube["share_below_5cm"] = {"a": float(near_a.mean()), "b": float(near_b.mean()),
                                   "mcnemar_p": mcnemar_exact(cube["out_of_5cm"], cube["into_5cm"])}
        out["cube_end_error_m"] = cube
    return out


def t_quantile_975(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom: the factor on the standard error of a
    95% interval from ``df + 1`` paired differences (12.71 for 2 of them, 3.18 for 4, 2.00 for 60).

    Inverts (by bisection) the exact two-sided probability for an integer ``df``, a finite series in
    theta = atan(t / sqrt(df)) (Abramowitz and Stegun 26.7.3-4); above 1,000 degrees of freedom, the normal 1.96.
    """
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    if df > 1000:
        return 1.959964

    def two_sided(t: float) -> float:  # P(|T| <= t)
        theta = math.atan(t / math.sqrt(df))
        c2, term, total = math.cos(theta) ** 2, 1.0, 1.0
        if df % 2:  # odd: (2/pi) (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...))
            for k in range(1, (df - 1) // 2):
                term *= c2 * (2 * k) / (2 * k + 1)
                total += term
            return 2 / math.pi * (theta + (math.sin(theta) * math.cos(theta) * total if df > 1 else 0.0))
        for k in range(1, df // 2):  # even: sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...)
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        return math.sin(theta) * total

    lo, hi = 0.0, 1000.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if two_sided(mid) < 0.95 else (lo, mid)
    return (lo + hi) / 2


def difference_summary(d: np.ndarray) -> dict[str, Any]:
    """Mean of paired differences ``d``, its standard error, a 95% interval (Student's t with n - 1 degrees of
    freedom, so a handful of episodes gets the wide interval it deserves) and how many are positive."""
    if len(d) == 0:
        return {"n": 0, "mean": None, "se": None, "ci95": None, "b_better": 0}
    se = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else None
    mean = float(d.mean())
    half = None if se is None else t_quantile_975(len(d) - 1) * se
    return {"n": int(len(d)), "mean": mean, "se": se,
            "ci95": None if se is None else [mean - half, mean + half], "b_better": int((d > 0).sum())}


def pair_results(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """B - A (:func:`paired_differences`) on every split two result entries both hold, labelled with both
    models and the split."""
    return [{"a": a["label"], "b": b["label"], "split": split,
             **paired_differences(a["splits"][split], b["splits"][split])}
            for split in a["splits"] if split in b["splits"]]


def format_paired(diff: dict[str, Any]) -> str:
    """The paired table of one :func:`pair_results` item: per (metric, window), each view's and the mean's
    difference B - A, then B's wins."""
    columns = (*VIEW_NAMES, "mean")

    def cell(summary: dict[str, Any], decimals: int) -> str:
        if summary["mean"] is None:
            return f"{'-':>22}"
        text = f"{summary['mean']:+.{decimals}f}"
        if summary["se"] is not None:
            text += f" ± {summary['ci95'][1] - summary['mean']:.{decimals}f}"
        return f"{text:>22}"

    def wins(summary: dict[str, Any]) -> str:
        return f"{str(summary['b_better']) + '/' + str(summary['n']):>22}"

    head = f"{'':<18}" + "".join(f"{v.replace('_left', '').replace('_image', ''):>22}" for v in columns)
    lines = [f"paired, {diff['b']} - {diff['a']}, {diff['split']}: {diff['episodes']} episodes "
             "(mean difference ± 95% interval; then B higher in k of n)", head]
    for key, row in diff["frames"].items():
        decimals = 3 if key.startswith("psnr") else 4
        lines.append(f"{key:<18}" + "".join(cell(row[v], decimals) for v in columns))
        lines.append(f"{'':<18}" + "".join(wins(row[v]) for v in columns))
    if "cube_end_error_m" in diff:
        c = diff["cube_end_error_m"]
        ci = "" if c["se"] is None else f" ± {100 * (c['ci95'][1] - c['mean']):.1f}"
        share = c.get("share_below_5cm")
        lines.append(f"cube end error {100 * c['mean']:+.1f}{ci} cm; B nearer the true cube in "
                     f"{c['b_better']}/{c['n']}; {c['into_5cm']} episodes move into and {c['out_of_5cm']} out of 5 cm"
                     + (f" (share {100 * share['a']:.0f}% -> {100 * share['b']:.0f}%, "
                        f"exact McNemar p = {share['mcnemar_p']:.3g})" if share is not None else ""))
    return "\n".join(lines)


def last_frames_round_trip(wm, episodes: Sequence[EvalEpisode]) -> np.ndarray:
    """Each episode's true last frame through ``wm``'s autoencoder, (N, V, S, S, 3): the probe's round-trip floor."""
    return round_trip_frames(wm, np.stack([e.frames[-1] for e in episodes]),
                             reference=np.stack([e.frames[0] for e in episodes]))


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
    """Where :func:`run` writes its report (:func:`benchmarks.results_path.results_path`)."""
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
    # every input is checked before any work (the probe alone can take 25 minutes to build): a missing
    # split or an unreadable checkpoint fails now, by name, not after the first model's rollouts
    for root in (cfg.data, cfg.ood_data):
        if root is not None:
            finished_records(root)
    models = [load_world_model(ckpt) for ckpt in cfg.checkpoints]
    t_start = time.perf_counter()
    n_held = cfg.max_episodes if cfg.max_episodes is not None else (QUICK_EPISODES if cfg.quick else None)
    n_ood = cfg.max_episodes if cfg.max_episodes is not None else (QUICK_OOD_EPISODES if cfg.quick else None)
    probe = None
    if cfg.probe:
        from . import object_probe

        if (Path(cfg.probe) / "probe.json").is_file():
            probe = object_probe.load(cfg.probe)
        elif cfg.quick:
            log.warning("no object probe at %s: --quick skips the position metric (build it with "
                        "`python -m benchmarks.object_probe --out %s`)", cfg.probe, cfg.probe)
        else:
            log.info("building the object probe at %s (once; ~25 minutes on a busy 2-core CPU)", cfg.probe)
            probe, _ = object_probe.build(cfg.probe, progress=cfg.progress)
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


# ---------------------------------------------------------------------------------------------- report
def _fmt(v, width: int, decimals: int, scale: float = 1.0, unit: str = "") -> str:
    """``v * scale`` right-aligned in ``width`` characters (unit included), or ``-`` when missing."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return f"{'-':>{width}}"
    return f"{f'{v * scale:.{decimals}f}{unit}':>{width}}"


def _per_view(vals: dict[str, float]) -> str:
    """``exterior_image_1 22.74  exterior_image_2 22.98  wrist_image 16.18`` for a per-view metric dict."""
    return "  ".join(f"{v.replace('_left', '')} {vals[v]:.4g}" for v in VIEW_NAMES)


def format_table(report: dict[str, Any]) -> str:
    """The headline table: one row per (checkpoint, split), then per-view detail."""
    cond = report.get("protocol", {}).get("conditioning", "replay")
    head = (f"{'model':<14}{'split':<9}{'eps':>4}  {'PSNR in':>8}{'PSNR 2x':>8}  {'SSIM in':>8}{'SSIM 2x':>8}"
            f"  {'pos err':>8}{'<5cm':>6}  {'probe floor':>11}")
    lines = [head, "-" * len(head)]
    detail = []
    # --autoencoder-only reports: the ceiling and the probe on the round trip stand in the columns
    ae_only = bool(report.get("protocol", {}).get("autoencoder_only"))
    for entry in report["results"]:
        for split, r in entry["splits"].items():
            pos = r.get("position") or {}
            floor = pos.get("probe_on_true_frames_error_m_mean")
            frames = (r.get("autoencoder_ceiling") or {}) if ae_only else r
            err, share = ((pos.get("probe_on_round_trip_error_m_mean"), pos.get("probe_on_round_trip_share_below_5cm"))
                          if ae_only else (pos.get("end_error_m_mean"), pos.get("share_below_5cm")))
            get = lambda m, w: ((frames.get(m) or {}).get(w) or {}).get("mean")  # noqa: E731
            lines.append(
                f"{entry['label'][:13]:<14}{split:<9}{r['episodes']:>4}  {_fmt(get('psnr', 'in_horizon'), 8, 2)}"
                f"{_fmt(get('psnr', 'beyond'), 8, 2)}  {_fmt(get('ssim', 'in_horizon'), 8, 4)}"
                f"{_fmt(get('ssim', 'beyond'), 8, 4)}  {_fmt(err, 8, 1, 100, 'cm')}"
                f"{_fmt(share, 6, 0, 100, '%')}  {_fmt(floor, 11, 1, 100, 'cm')}")
            for metric in ("psnr", "ssim", "sharpness"):
                for w in ("in_horizon", "beyond"):
                    vals = (r.get(metric) or {}).get(w)
                    if vals:
                        detail.append(f"  {entry['label']:<12} {split:<8} {metric} {w:<10} {_per_view(vals)}")
            for metric, windows in (r.get("autoencoder_ceiling") or {}).items():
                for w, vals in windows.items():
                    if vals:
                        detail.append(f"  {entry['label']:<12} {split:<8} {metric} {w:<10} {_per_view(vals)}"
                                      f"  mean {vals['mean']:.4g}  (autoencoder ceiling)")
            for metric, windows in (r.get("hold_first_frame") or {}).items():
                for w, vals in windows.items():
                    if vals:
                        detail.append(f"  {entry['label']:<12} {split:<8} {metric} {w:<10} {_per_view(vals)}"
                                      f"  mean {vals['mean']:.4g}  (frame 0 held still: the no-skill floor)")
            end = r.get("end_frame")
            if end:
                detail.append(f"  {entry['label']:<12} {split:<8} last frame: PSNR {end['psnr_mean']:.2f} dB (frame 0 "
                              f"held still {end['hold_first_frame_psnr_mean']:.2f}); {100 * end['share_lost']:.0f}% of "
                              f"the episodes end below frame 0 held still (lost the scene)")
            drift = r.get("adapter_replay")
            if drift:
                detail.append(f"  {entry['label']:<12} {split:<8} the action adapter's replay ends the flange "
                              f"{100 * drift['end_flange_error_m_mean']:.1f} cm from the simulator's (mean; "
                              f"{100 * drift['share_below_5cm']:.0f}% within 5 cm; by task " + ", ".join(
                                  f"{k} {100 * v:.1f} cm" for k, v in drift["by_task_m_mean"].items()) + ")")
            if pos.get("share_below_5cm_ci95"):
                lo, hi = pos["share_below_5cm_ci95"]
                detail.append(f"  {entry['label']:<12} {split:<8} cube within 5 cm at the end in "
                              f"{100 * pos['share_below_5cm']:.0f}% of {pos['episodes']} episodes "
                              f"(95% Wilson interval {100 * lo:.0f}-{100 * hi:.0f}%)")
            if pos.get("cube_left_at_start_error_m_mean") is not None:
                detail.append(f"  {entry['label']:<12} {split:<8} cube moved "
                              f"{100 * pos['generated_end_from_start_m_mean']:.1f} cm in the generated video, "
                              f"{100 * pos['cube_left_at_start_error_m_mean']:.1f} cm in the simulator (the error of "
                              f"never moving it; that puts {100 * pos['cube_left_at_start_share_below_5cm']:.0f}% "
                              f"within 5 cm)")
            if pos.get("probe_on_round_trip_error_m_mean") is not None:
                detail.append(f"  {entry['label']:<12} {split:<8} cube: the probe on the true last frame through the "
                              f"autoencoder errs {100 * pos['probe_on_round_trip_error_m_mean']:.1f} cm, "
                              f"{100 * pos['probe_on_round_trip_share_below_5cm']:.0f}% < 5 cm (the floor of a "
                              f"perfect DiT)")
            if pos.get("track"):
                detail.append(f"  {entry['label']:<12} {split:<8} cube vs the true frame's, by frame: " + ", ".join(
                    f"{k['frame']} {100 * k['error_m_mean']:.1f} cm" for k in pos["track"]))
            for name, g in (r.get("by_group") or {}).items():
                cube = "" if g.get("share_below_5cm") is None else f", cube < 5 cm {100 * g['share_below_5cm']:.0f}%"
                detail.append(f"  {entry['label']:<12} {split:<8} {name:<20} {g['episodes']:>3} episodes: PSNR "
                              f"{_fmt(g['psnr_in_horizon'], 0, 2).strip()} / {_fmt(g['psnr_beyond'], 0, 2).strip()} "
                              f"dB, SSIM {_fmt(g['ssim_in_horizon'], 0, 4).strip()} / "
                              f"{_fmt(g['ssim_beyond'], 0, 4).strip()}{cube} (in / beyond, episode means)")
            if "targets_met" in r:
                t = ", ".join(f"{k} {'yes' if v else ('no' if v is not None else '-')}"
                              for k, v in r["targets_met"].items())
                detail.append(f"  {entry['label']:<12} {split:<8} targets: {t}")
    if not ae_only:
        lines.append(f"(conditioning: {cond} -- " + ("the env replays the recorded actions)" if cond == "replay" else
                                                     "the recorded robot state, not the env's action adapter)"))
    if ae_only:
        lines.append("(--autoencoder-only: PSNR / SSIM are each autoencoder's round trip of the true frames, the "
                     "position columns the probe on the round trip of the last frame)")
    paired = [format_paired(p) for p in report.get("paired") or []]
    return "\n".join(lines + ["", "per view:"] + detail + [line for p in paired for line in ("", p)])


def load_result(spec: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``REPORT.json`` or ``REPORT.json:LABEL`` -> (the report, its result entry of that label)."""
    head, sep, tail = spec.rpartition(":")
    path, label = (head, tail) if sep and head.endswith(".json") else (spec, "")
    try:
        report = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"no fidelity report at {path!r}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path!r} is not a JSON report: {e}") from None
    if report.get("benchmark") != "fidelity" or not report.get("results"):
        raise ValueError(f"{path!r} is not a fidelity report (no 'benchmark': 'fidelity' with results)")
    labels = [r["label"] for r in report["results"]]
    if label:
        if label not in labels:
            raise ValueError(f"{path!r} has no model labelled {label!r}; it has {labels}")
        return report, report["results"][labels.index(label)]
    if len(labels) > 1:
        raise ValueError(f"{path!r} holds {len(labels)} models {labels}: name one as {path}:LABEL")
    return report, report["results"][0]


def paired_reports(spec_a: str, spec_b: str) -> list[dict[str, Any]]:
    """``--paired A B``: B - A on every split both reports evaluated; refuses reports of different splits."""
    (rep_a, a), (rep_b, b) = load_result(spec_a), load_result(spec_b)
    for key in ("data", "ood_data"):
        da, db = rep_a["protocol"].get(key), rep_b["protocol"].get(key)
        if da and db and Path(da).name != Path(db).name:
            raise ValueError(f"the reports were run on different {key} splits ({da!r} and {db!r}): nothing to pair")
    out = pair_results(a, b)
    if not out:
        raise ValueError(f"the reports share no split ({list(a['splits'])} and {list(b['splits'])})")
    return out


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
    p.add_argument("--data", default=d.data, help="held-out SimDROID split (default %(default)s)")
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
    p.add_argument("--probe", default=d.probe, help="object-probe directory (default %(default)s)")
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
