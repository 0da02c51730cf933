"""Does the world model follow its actions?  Follow ratios of the arm and the manipulated object, by phase.

Usage::

    python -m benchmarks.fidelity.dynamics --checkpoint checkpoints/legible_default/decoder_final_2/model \\
        --data data/legible_heldout --max-episodes 20                    # ~10 min on 2 cores
    python -m benchmarks.fidelity.dynamics --curve runs/legible_default --data data/legible_heldout   # a learning curve

The outcome measures (fidelity, roboarena) read the end of a 150-step open-loop rollout; they cannot tell a model
that never learned to follow its conditioning from one that follows and drifts.  This benchmark asks the question
directly, on short rollouts the model starts from *true* frames, conditioned on the recorded robot state
(:func:`benchmarks.common.heldout.recorded_conditioning`):

* **follow ratio** of a displacement ``d_gen`` read from the generated frames against the true one ``d_true``,
  summed over every frame of every window: ``sum(d_gen . d_true) / sum(|d_true|^2)``.  1 moves like the truth,
  0 stands still (a model that repeats its last context frame scores exactly 0), negative moves the wrong way.
  Intervals: 95% percentile bootstrap over episodes.
* **arm**, per exterior view: the flange is projected through the scene's known camera
  (``neuralsim.envs.scene.project_exterior``) at the window's first frame; :func:`track_point` follows that image
  point frame to frame through the video (template matching, sub-pixel), giving ``d_gen`` in pixels; ``d_true`` is
  the projection's own displacement.  Windows whose point leaves the view are skipped.
* **object**: the manipulated cube (held, else touched, else the target) is located in both exterior views by the
  scene's object probe (:mod:`benchmarks.common.object_probe`) and triangulated; ``d_gen`` [m] is the probe's
  displacement in the generated frames, ``d_true`` the recorded pose's (``ground_truth.object_pose``).  Per view
  too (``object_exterior_image_1`` / ``_2``): the probe's image point against the recorded pose's projection, in
  pixels, so the cube's ratio can be read beside the arm's in the same view.
* **phases** of a window, from the recorded object state at its first frame: ``carry`` (a cube held or touched),
  ``reach`` (none yet), ``after_release`` (after one was), ``idle`` (the flange moves less than
  :data:`IDLE_M` over the window); ``all`` pools them.

**Belief** (``belief``, a model with object tokens): the same object ratio read from the model's own object state
(where it believes the manipulated cube is) instead of the probe on its pixels.

**Action response** (``response``), the precursor of every ratio: a model that does not read its conditioning
cannot follow it.  From the same true context and the same noise, the first frame is generated twice -- under the
recorded condition of the next frame, and under the condition :data:`RESPONSE_JUMP` frames later (the hand moved on),
the second from a fork of the context state, in the same pass as the rollouts.  The response is
``sum MSE(jumped, generated) / sum MSE(true frame t+8, true frame t+1)`` over the windows (pixel errors): ~0 when
the frame ignores where the hand is; of the order of 1 when moving the condition moves the image as much as the true
motion does (it cannot reach exactly 1: the cube does not teleport with the hand).

**Latent** (``latent``): the same response, and one step against "repeat the last frame", in the DiT's normalised
latent space, before the decoder: what the DiT itself learned, with no decoder (or reference head) between it and
the measure.  ``one_step_vs_repeat_last`` is the first generated latent's squared error against the true next
frame's latent, over the last true frame's: ~1 for a DiT that copies its context, < 1 once it predicts motion.

Protocols: ``one_step`` (teacher forced: the first generated frame after true context, its pixel error against
the true next frame beside "repeat the last frame"'s, and the share of generated frames closer to the previous
true frame than to the next); ``rollout_4`` / ``rollout_8`` (k frames from true context, windows every
:data:`STRIDE` frames); ``onset`` (16 frames from the frame the gripper first holds a cube); ``open_loop`` (the
whole episode from frame 0, measured in 8-frame windows).  Beside each: ``truth`` (the same readers on the true
frames: the tracker's and probe's floor), ``round_trip`` (the true frames through the model's autoencoder: what a
perfect DiT could reach) and ``repeat_last`` (the last context frame held: 0 by construction).

``--curve RUN_DIR`` measures every model a training run kept (``snapshots/step_*`` from ``neuralsim train
--snapshot-every N``, its ``model/``, and for a recipe's output every stage's snapshots and ``model/``, each at the
DiT steps of its whole history) with the rollout protocols, and plots the carry-phase ratios against the training
step: whether a run is learning to follow its actions is visible after the first snapshots, not at the end.
Re-run with the same ``--out`` as the run goes on, it measures only the new models and keeps the earlier points, those
whose model is no longer on disk included (a run carried to another machine by its last model).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from neuralsim.episode import VIEW_NAMES

from ..common.heldout import (
    EvalEpisode,
    finished_records,
    load_split,
    recorded_conditioning,
    round_trip_frames,
    row_noise,
)
from ..common.results_path import out_help, results_path
from ..common.stats import bootstrap_ratio_ci, ratio_of_sums

log = logging.getLogger(__name__)

#: Frames between the first frames of consecutive rollout windows (and the open loop's window length).
STRIDE = 8
#: Rollout lengths measured from true context.
HORIZONS = (4, 8)
#: Frames generated from the frame the gripper first holds a cube.
ONSET_FRAMES = 16
#: The action response's counterfactual: the first frame conditioned on the state this many frames ahead.
RESPONSE_JUMP = 8
#: A window whose flange moves less than this [m] (largest distance from its first frame) is ``idle``.
IDLE_M = 0.01
#: Below this mean true displacement at a window's last frame the ratio is not reported (nothing to follow):
#: pixels for the arm, metres for the object.
MIN_MOTION = {"arm": 1.0, "object": 0.01}
PHASES = ("reach", "carry", "after_release", "idle")
EXTERIOR = ("exterior_image_1_left", "exterior_image_2_left")
#: Template half-size and per-frame search radius [px] of :func:`track_point` (64x64 views; the arm moves ~1-2 px
#: a frame).
TRACK_RADIUS, TRACK_SEARCH = 3, 4
SOURCES = ("generated", "truth", "round_trip", "repeat_last")
QUICK_EPISODES = 4


# ---------------------------------------------------------------------------------------------- readers
def track_point(frames: np.ndarray, start: np.ndarray, radius: int = TRACK_RADIUS,
                search: int = TRACK_SEARCH) -> np.ndarray:
    """Follow an image point through ``frames`` (T, H, W, 3) frame to frame: (T, 2) displacement (column, row) [px]
    from ``start`` (2,) (pixel coordinates, 0 = centre of the first pixel), 0 at frame 0.

    Each step matches the (2r+1)^2 patch around the point in frame t-1 against frame t at integer offsets within
    ``search`` (sum of squared differences; edge pixels repeated past the border), refined to sub-pixel by a
    parabola through the best offset's neighbours.  Identical frames give exactly 0."""
    f = np.asarray(frames, np.float32)
    t_len, h, w, _ = f.shape
    pad = radius + search + 1
    fp = np.pad(f, ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="edge")
    side = 2 * radius + 1
    p = np.asarray(start, np.float64).copy()
    out = np.zeros((t_len, 2))
    for t in range(1, t_len):
        c = np.clip(np.round(p).astype(int), 0, [w - 1, h - 1]) + pad
        tpl = fp[t - 1, c[1] - radius:c[1] + radius + 1, c[0] - radius:c[0] + radius + 1]
        reach = radius + search
        area = fp[t, c[1] - reach:c[1] + reach + 1, c[0] - reach:c[0] + reach + 1]
        wins = np.lib.stride_tricks.sliding_window_view(area, (side, side), axis=(0, 1))  # (2s+1, 2s+1, 3, side, side)
        ssd = ((wins - tpl.transpose(2, 0, 1)[None, None]) ** 2).sum(axis=(2, 3, 4))
        iy, ix = np.unravel_index(int(np.argmin(ssd)), ssd.shape)
        d = np.array([ix - search, iy - search], np.float64)
        if ssd[iy, ix] == 0.0:  # an exact match (e.g. a repeated frame): no sub-pixel shift
            pass
        elif 0 < ix < 2 * search:
            d[0] += _parabola(ssd[iy, ix - 1], ssd[iy, ix], ssd[iy, ix + 1])
        if ssd[iy, ix] != 0.0 and 0 < iy < 2 * search:
            d[1] += _parabola(ssd[iy - 1, ix], ssd[iy, ix], ssd[iy + 1, ix])
        p = p + d
        out[t] = p - start
    return out


def _parabola(a: float, b: float, c: float) -> float:
    den = a - 2.0 * b + c
    return 0.5 * (a - c) / den if den > 0 else 0.0


def flange_pixels(joint_position: np.ndarray, scene: str, size: int) -> np.ndarray:
    """(T, 2 exterior views, 2) pixel coordinates (column, row) of the flange at joint states (T, 7)."""
    from neuralsim import kinematics as K
    from neuralsim.envs.scene import project_exterior

    uv = project_exterior(K.forward_kinematics(np.asarray(joint_position, np.float64))[:, :3], scene)
    return (uv + 1.0) * 0.5 * size - 0.5


def follow_pairs(d_gen: np.ndarray, d_true: np.ndarray) -> tuple[float, float]:
    """(sum of d_gen . d_true, sum of |d_true|^2) over the frames of one window, displacements (k, D)."""
    return float((d_gen * d_true).sum()), float((d_true * d_true).sum())


# ---------------------------------------------------------------------------------------------- phases
def manipulated_object(episode: EvalEpisode, t: int) -> int:
    """Index (into ``episode.objects``) of the cube in hand at frame t, else the one touched, else the target."""
    o = episode.objects
    if o.held[t] >= 0:
        return int(o.held[t])
    if o.touched[t] >= 0:
        return int(o.touched[t])
    return o.names.index(episode.record["target"])


def window_phase(episode: EvalEpisode, t0: int, k: int) -> str:
    """The phase of the window of frames t0 .. t0 + k (see the module docstring)."""
    from neuralsim import kinematics as K

    q = episode.joint_position[t0:t0 + k + 1]
    xyz = K.forward_kinematics(q)[:, :3]
    if np.linalg.norm(xyz - xyz[0], axis=1).max() < IDLE_M:
        return "idle"
    o = episode.objects
    if o.held[t0] >= 0 or o.touched[t0] >= 0:
        return "carry"
    return "after_release" if ((o.held[:t0] >= 0) | (o.touched[:t0] >= 0)).any() else "reach"


def onset_frame(episode: EvalEpisode) -> int | None:
    """The first frame at which the gripper holds a cube (None: never)."""
    held = np.flatnonzero(episode.objects.held >= 0)
    return int(held[0]) if held.size else None


# ---------------------------------------------------------------------------------------------- generation
@dataclass(frozen=True)
class Window:
    """One measured window: frames ``start`` .. ``start + length`` of episode number ``episode`` (list position)."""

    episode: int
    start: int
    length: int
    protocol: str


def rollouts_from_truth(wm, episodes: Sequence[EvalEpisode], windows: Sequence[Window], *, seed: int = 0,
                        batch_size: int = 16, progress: bool = False, cond_shift: int = 0,
                        response_shift: int | None = None, beliefs: list | None = None):
    """For each window: the true context frames up to its first frame (at most the model's window, teacher forced
    through :meth:`WorldModel.observe`), then ``length`` generated frames conditioned on the recorded robot state.

    Returns uint8 (length + 1, V, S, S, 3) per window, frame 0 the true frame ``start`` (the last context frame).
    The decoder's reference (for a model with a reference head) is the episode's frame 0, as in the env.  Each
    window's noise comes from its own generator seeded by (seed, episode index, start): deterministic and
    independent of the batching.  ``cond_shift``: generated frame t is conditioned on the recorded state at
    ``start + t + cond_shift`` (the action response's counterfactual; 0: the true one).

    With ``response_shift``, returns ``(videos, responses, latent)``: beside each window's video, a (2, V, S, S, 3)
    one whose frame 1 is generated from a fork of the same context state (:meth:`WorldModelState.fork`) and the same
    noise, conditioned on the state at ``start + 1 + response_shift``: the counterfactual of
    ``cond_shift=response_shift`` without a second context pass; and the same comparisons in the DiT's normalised
    latent space, before any decoder (:func:`latent_terms`: summed squared differences per window).

    ``beliefs``: a list, for a model with object state filled with each window's belief about where the objects are
    (:meth:`WorldModel.object_poses`): (length + 1, K, 3) [m], frame 0 read from the last true context frame; left
    empty for a model without."""
    import torch
    from tqdm import tqdm

    w_model = wm.config.window
    conds: dict[int, Any] = {}
    latents: dict[int, Any] = {}  # episode -> its true frames' normalised latents
    out: list[np.ndarray | None] = [None] * len(windows)
    responses: list[np.ndarray | None] = [None] * len(windows)
    latent: list[dict[str, float] | None] = [None] * len(windows)
    order = sorted(range(len(windows)), key=lambda i: (min(windows[i].start + 1, w_model), windows[i].length))
    bar = tqdm(total=len(windows), disable=not progress, desc="rollouts", unit="window")
    i = 0
    while i < len(order):
        ctx = min(windows[order[i]].start + 1, w_model)
        length = windows[order[i]].length
        batch = []
        while (i < len(order) and len(batch) < batch_size and min(windows[order[i]].start + 1, w_model) == ctx
               and windows[order[i]].length == length):
            batch.append(order[i])
            i += 1
        wins = [windows[j] for j in batch]
        eps = [episodes[w.episode] for w in wins]
        for w in wins:
            if w.episode not in conds:
                conds[w.episode] = torch.from_numpy(recorded_conditioning(wm, episodes[w.episode]))
            if w.episode not in latents:  # every true frame encoded once
                frames = torch.from_numpy(episodes[w.episode].frames)
                latents[w.episode] = torch.cat([wm.encode(frames[a:a + 64]) for a in range(0, len(frames), 64)])
        cond_at = lambda t: torch.stack([conds[w.episode][w.start + t] for w in wins]).to(wm.device)  # noqa: E731
        frame_at = lambda t: torch.from_numpy(np.stack([e.frames[w.start + t] for e, w in zip(eps, wins)]))  # noqa: E731
        latent_at = lambda t: torch.stack([latents[w.episode][w.start + t] for w in wins])  # noqa: E731
        b = len(wins)
        with torch.inference_mode():
            state = wm.new_state(b, window=w_model, num_sink=0, device=wm.device)
            wm.reset_latents(state, torch.arange(b), latent_at(1 - ctx), cond_at(1 - ctx), views=frame_at(1 - ctx))
            if state.reference_views is not None:  # the env decodes against the episode's first frame
                first = torch.from_numpy(np.stack([e.frames[0] for e in eps]))
                state.reference_views.copy_(first.to(state.reference_views.device))
                state.reference_latents.copy_(torch.stack([latents[w.episode][0] for w in wins]))
            for t in range(2 - ctx, 1):
                wm.observe(state, latent_at(t), cond_at(t))

            def generators():
                return [torch.Generator().manual_seed(int(seed) * 1_000_003 + e.index * 1_009 + w.start)
                        for e, w in zip(eps, wins)]

            frames = np.zeros((b, length + 1, *eps[0].frames.shape[1:]), np.uint8)
            frames[:, 0] = frame_at(0).numpy()
            if response_shift is not None:
                fork = state.fork()
                jumped = frames[:, :2].copy()
                x_jumped = wm.generate(fork, row_noise(wm, generators()), cond_at(1 + response_shift))
                jumped[:, 1] = wm.decode(x_jumped, fork.reference()).cpu().numpy()
                for j, f in zip(batch, jumped):
                    responses[j] = f
            gens = generators()
            belief = None
            if beliefs is not None and getattr(wm, "num_objects", 0):
                belief = np.zeros((b, length + 1, wm.num_objects, 3))
                belief[:, 0] = wm.object_poses(state)[..., :3].float().cpu().numpy()
            for t in range(1, length + 1):
                x = wm.generate(state, row_noise(wm, gens), cond_at(t + cond_shift))
                frames[:, t] = wm.decode(x, state.reference()).cpu().numpy()
                if belief is not None:
                    belief[:, t] = wm.object_poses(state)[..., :3].float().cpu().numpy()
                if t == 1 and response_shift is not None:
                    terms = latent_terms(*(y.float().cpu() for y in (x, x_jumped, latent_at(0), latent_at(1),
                                                                      latent_at(1 + response_shift))))
                    for k, j in enumerate(batch):
                        latent[j] = {name: float(v[k]) for name, v in terms.items()}
        for j, f in zip(batch, frames):
            out[j] = f
        if belief is not None:
            if not beliefs:
                beliefs.extend([None] * len(windows))
            for j, o in zip(batch, belief):
                beliefs[j] = o
        bar.update(b)
    bar.close()
    return out if response_shift is None else (out, responses, latent)


def latent_terms(generated, jumped, last, true_next, true_far) -> dict[str, Any]:
    """Per row (summed over views, channels and positions) the squared latent differences whose ratios
    :func:`latent_measures` reads: ``response``, the frame generated under the jumped condition against the one under
    the true condition, over ``true_change``, between the same two true frames; ``generated``, the generated frame
    against the true next one, over ``repeat_last``, the last true frame against it."""
    def sq(a, b):
        return (a - b).pow(2).flatten(1).sum(1).numpy()

    return {"response": sq(jumped, generated), "true_change": sq(true_far, true_next),
            "generated": sq(generated, true_next), "repeat_last": sq(last, true_next)}


# ---------------------------------------------------------------------------------------------- measuring
@dataclass
class Measured:
    """What one window's frames of one source say: per exterior view (num, den) of the arm, (num, den) of the
    object (triangulated [m], and per view in pixels), the true motion at the window's end, and (one_step) pixel
    errors."""

    arm: dict[str, tuple[float, float]] = field(default_factory=dict)
    arm_motion: dict[str, float] = field(default_factory=dict)
    object: tuple[float, float] | None = None
    object_motion: float | None = None
    object_view: dict[str, tuple[float, float]] = field(default_factory=dict)
    object_view_motion: dict[str, float] = field(default_factory=dict)


def measure_windows(episodes: Sequence[EvalEpisode], windows: Sequence[Window], videos: Sequence[np.ndarray],
                    probe, scene: str) -> list[Measured]:
    """Arm and object follow pairs of each window's video (length + 1 frames, frame 0 the window's first).  The
    object's per view too, in pixels: where the probe sees the cube in each view against where the recorded pose
    projects (does the cube follow in the view where the arm does?)."""
    from neuralsim.envs.scene import project_exterior

    from ..common.object_probe import colour_rgb, locate_views, triangulate

    ext = [VIEW_NAMES.index(v) for v in EXTERIOR]
    size = videos[0].shape[-2] if videos else 64
    pixels = {}
    out = []
    probe_jobs = []  # (window number, frames (k+1, 2, S, S, 3), rgb)
    for n, (w, video) in enumerate(zip(windows, videos)):
        e = episodes[w.episode]
        if w.episode not in pixels:
            pixels[w.episode] = flange_pixels(e.joint_position, scene, size)
        px = pixels[w.episode][w.start:w.start + w.length + 1]  # (k+1, 2, 2)
        m = Measured()
        for v, name in enumerate(EXTERIOR):
            if np.all((px[:, v] >= TRACK_RADIUS) & (px[:, v] <= size - 1 - TRACK_RADIUS)):
                d_true = px[1:, v] - px[0, v]
                d_gen = track_point(video[:, ext[v]], px[0, v])[1:]
                m.arm[name] = follow_pairs(d_gen, d_true)
                m.arm_motion[name] = float(np.linalg.norm(d_true[-1]))
        if probe is not None and e.objects is not None:
            c = manipulated_object(e, w.start)
            probe_jobs.append((n, video[:, ext], colour_rgb(e.objects.names[c]), e.objects.position[
                w.start:w.start + w.length + 1, c]))
        out.append(m)
    if probe_jobs:
        views = np.concatenate([j[1] for j in probe_jobs])
        rgb = np.concatenate([np.repeat(j[2][None], len(j[1]), 0) for j in probe_jobs])
        uv = locate_views(probe, views, rgb)
        xyz = triangulate(uv, probe.config.scene)
        at = 0
        for n, frames, _, true_xyz in probe_jobs:
            seen, seen_uv = xyz[at:at + len(frames)], uv[at:at + len(frames)]
            at += len(frames)
            d_true = true_xyz[1:] - true_xyz[0]
            out[n].object = follow_pairs(seen[1:] - seen[0], d_true)
            out[n].object_motion = float(np.linalg.norm(d_true[-1]))
            true_uv = project_exterior(true_xyz, scene)
            for v, name in enumerate(EXTERIOR):  # [-1, 1] -> pixels
                d_true_px = (true_uv[1:, v] - true_uv[0, v]) * size / 2
                out[n].object_view[name] = follow_pairs((seen_uv[1:, v] - seen_uv[0, v]) * size / 2, d_true_px)
                out[n].object_view_motion[name] = float(np.linalg.norm(d_true_px[-1]))
    return out


def belief_ratios(episodes: Sequence[EvalEpisode], windows: Sequence[Window], beliefs: Sequence[np.ndarray],
                  resamples: int = 1000) -> dict[str, Any]:
    """The manipulated cube's follow ratio in the model's own object state (a model with object tokens), by phase:
    its believed position (the slot nearest the cube's recorded position at the window's first frame) against the
    recorded pose, in metres, as the probe's ``object`` ratio reads the pixels.  What the object tokens learned,
    before any pixel has to show it."""
    measured, phases = [], []
    for w, b in zip(windows, beliefs):
        e = episodes[w.episode]
        m = Measured()
        if e.objects is not None:
            c = manipulated_object(e, w.start)
            true_xyz = e.objects.position[w.start:w.start + w.length + 1, c]
            slot = int(np.argmin(np.linalg.norm(b[0] - true_xyz[0], axis=-1)))
            d_true = true_xyz[1:] - true_xyz[0]
            m.object = follow_pairs(b[1:, slot] - b[0, slot], d_true)
            m.object_motion = float(np.linalg.norm(d_true[-1]))
        measured.append(m)
        phases.append(window_phase(e, w.start, w.length))
    return {phase: entry["object"] for phase, entry in aggregate(windows, phases, measured, resamples).items()}


def one_step_errors(episodes: Sequence[EvalEpisode], windows: Sequence[Window],
                    videos: Sequence[np.ndarray]) -> list[dict[str, float]]:
    """Teacher-forced one step of each window: mean squared pixel error (uint8 units) of the first generated frame
    against the true next frame, of "repeat the last frame" against it, and of the generated frame against the
    last true frame."""
    out = []
    for w, video in zip(windows, videos):
        e = episodes[w.episode]
        prev = e.frames[w.start].astype(np.float32)
        nxt = e.frames[w.start + 1].astype(np.float32)
        gen = video[1].astype(np.float32)
        out.append({"mse_generated": float(((gen - nxt) ** 2).mean()),
                    "mse_repeat_last": float(((prev - nxt) ** 2).mean()),
                    "mse_to_previous": float(((gen - prev) ** 2).mean())})
    return out


def action_response(episodes: Sequence[EvalEpisode], windows: Sequence[Window], generated: Sequence[np.ndarray],
                    jumped: Sequence[np.ndarray], phases: Sequence[str], resamples: int = 1000) -> dict[str, Any]:
    """The action response by phase (module docstring): per window the pixel MSE between the first frame generated
    under the jumped condition and the one generated under the true one, against the MSE between the true frames
    ``start + 1 + RESPONSE_JUMP - 1`` and ``start + 1``; ratio of sums, 95% bootstrap interval over episodes."""
    pairs = []
    for w, gen, jmp in zip(windows, generated, jumped):
        e = episodes[w.episode]
        true_far = e.frames[w.start + RESPONSE_JUMP].astype(np.float32)
        true_next = e.frames[w.start + 1].astype(np.float32)
        pairs.append((float(((jmp[1].astype(np.float32) - gen[1].astype(np.float32)) ** 2).mean()),
                      float(((true_far - true_next) ** 2).mean())))
    return _phase_ratios(windows, phases, pairs, resamples)


def latent_measures(windows: Sequence[Window], latent: Sequence[dict[str, float]], phases: Sequence[str],
                    resamples: int = 1000) -> dict[str, Any]:
    """The DiT's own side of the response and of one step, in its normalised latent space (no decoder between):
    ``response`` (:func:`latent_terms`: as :func:`action_response`, ~0 when the condition changes nothing) and
    ``one_step_vs_repeat_last`` (the first generated frame's squared error against repeating the last true frame's:
    < 1 when the DiT predicts the next frame better than a copy), each by phase."""
    return {"response": _phase_ratios(windows, phases, [(t["response"], t["true_change"]) for t in latent],
                                      resamples),
            "one_step_vs_repeat_last": _phase_ratios(windows, phases,
                                                     [(t["generated"], t["repeat_last"]) for t in latent], resamples)}


def _phase_ratios(windows: Sequence[Window], phases: Sequence[str], pairs: Sequence[tuple[float, float]],
                  resamples: int) -> dict[str, Any]:
    """Per phase (and ``all``) the ratio of sums of each window's (numerator, denominator), summed per episode first,
    with its 95% bootstrap interval over episodes."""
    out = {}
    for phase in ("all", *PHASES):
        keep = [i for i, p in enumerate(phases) if phase == "all" or p == phase]
        if not keep:
            continue
        by_episode: dict[int, list[float]] = {}
        for i in keep:
            acc = by_episode.setdefault(windows[i].episode, [0.0, 0.0])
            acc[0] += pairs[i][0]
            acc[1] += pairs[i][1]
        out[phase] = {**_episode_ratio([tuple(v) for v in by_episode.values()], resamples),
                      "windows": len(keep), "episodes": len(by_episode)}
    return out


def source_videos(source: str, wm, episodes: Sequence[EvalEpisode], windows: Sequence[Window],
                  generated: Sequence[np.ndarray], round_trips: dict[int, np.ndarray]) -> list[np.ndarray]:
    """The frames of each window as ``source`` (:data:`SOURCES`) has them."""
    if source == "generated":
        return list(generated)
    out = []
    for w in windows:
        e = episodes[w.episode]
        sl = slice(w.start, w.start + w.length + 1)
        if source == "truth":
            out.append(e.frames[sl])
        elif source == "repeat_last":
            out.append(np.repeat(e.frames[w.start][None], w.length + 1, 0))
        elif source == "round_trip":
            if w.episode not in round_trips:
                round_trips[w.episode] = round_trip_frames(wm, e.frames, reference=e.frames[0])
            video = round_trips[w.episode][sl].copy()
            video[0] = e.frames[w.start]  # the window starts from the true frame, as a rollout does
            out.append(video)
        else:
            raise ValueError(f"unknown source {source!r}; expected one of {SOURCES}")
    return out


# ---------------------------------------------------------------------------------------------- aggregation
def _episode_ratio(per_episode: list[tuple[float, float]], resamples: int, measurable: bool = True
                   ) -> dict[str, Any]:
    """``ratio`` (of sums over episodes) and its 95% bootstrap interval over episodes, rounded; both None when not
    ``measurable`` or when the denominators sum to 0."""
    ratio = ratio_of_sums(per_episode) if measurable else None
    ci = bootstrap_ratio_ci(per_episode, resamples) if ratio is not None else None
    return {"ratio": None if ratio is None else round(ratio, 4),
            "ci95": None if ci is None else [round(x, 4) for x in ci]}


def _ratio(pairs_by_episode: dict[int, list[tuple[float, float]]], motions: list[float], kind: str,
           resamples: int) -> dict[str, Any]:
    per_episode = [(sum(a for a, _ in p), sum(b for _, b in p)) for p in pairs_by_episode.values()]
    motion = float(np.mean(motions)) if motions else None
    enough = motion is not None and motion >= MIN_MOTION[kind]
    return {**_episode_ratio(per_episode, resamples, enough),
            "windows": len(motions), "episodes": len(pairs_by_episode),
            ("true_motion_px" if kind == "arm" else "true_motion_m"): None if motion is None else round(motion, 4)}


def _by_episode(windows: Sequence[Window], measured: Sequence[Measured], keep: Sequence[int], items
                ) -> tuple[dict[int, list], list]:
    """The (pair, motion) couples ``items(measured[i])`` gives for each kept window: pairs grouped by episode (the
    bootstrap's unit), motions in one list."""
    pairs: dict[int, list] = {}
    motions = []
    for i in keep:
        for pair, motion in items(measured[i]):
            pairs.setdefault(windows[i].episode, []).append(pair)
            motions.append(motion)
    return pairs, motions


def _arm_in(views: Sequence[str]):
    return lambda m: [(m.arm[v], m.arm_motion[v]) for v in views if v in m.arm]


def _object_in(view: str):
    return lambda m: [(m.object_view[view], m.object_view_motion[view])] if view in m.object_view else []


def _object_triangulated(m: Measured):
    return [] if m.object is None else [(m.object, m.object_motion)]


def aggregate(windows: Sequence[Window], phases: Sequence[str], measured: Sequence[Measured],
              resamples: int = 1000) -> dict[str, Any]:
    """Ratios by phase (and ``all``): ``arm`` per exterior view and their pool ``arm_mean``, ``object``
    (triangulated) and ``object_<view>`` (in each exterior view's pixels, as the arm's)."""
    out: dict[str, Any] = {}
    for phase in ("all", *PHASES):
        keep = [i for i, p in enumerate(phases) if phase == "all" or p == phase]
        if not keep:
            continue
        entry: dict[str, Any] = {"windows": len(keep)}
        for view in EXTERIOR:
            entry[f"arm_{view.removesuffix('_left')}"] = _ratio(
                *_by_episode(windows, measured, keep, _arm_in((view,))), "arm", resamples)
        entry["arm_mean"] = _ratio(*_by_episode(windows, measured, keep, _arm_in(EXTERIOR)), "arm", resamples)
        entry["object"] = _ratio(*_by_episode(windows, measured, keep, _object_triangulated), "object", resamples)
        for view in EXTERIOR:
            entry[f"object_{view.removesuffix('_left')}"] = _ratio(
                *_by_episode(windows, measured, keep, _object_in(view)), "arm", resamples)
        out[phase] = entry
    return out


def aggregate_one_step(phases: Sequence[str], errors: Sequence[dict[str, float]]) -> dict[str, Any]:
    out = {}
    for phase in ("all", *PHASES):
        keep = [e for e, p in zip(errors, phases) if phase == "all" or p == phase]
        if keep:
            gen = float(np.mean([e["mse_generated"] for e in keep]))
            rep = float(np.mean([e["mse_repeat_last"] for e in keep]))
            out[phase] = {"frames": len(keep), "mse_generated": round(gen, 2), "mse_repeat_last": round(rep, 2),
                          "beats_repeat_last": gen < rep,
                          "share_closer_to_previous": round(float(np.mean(
                              [e["mse_to_previous"] < e["mse_generated"] for e in keep])), 4)}
    return out


# ---------------------------------------------------------------------------------------------- protocols
def plan_windows(episodes: Sequence[EvalEpisode], horizon: int = max(HORIZONS)) -> dict[str, list[Window]]:
    """The windows of each protocol: rollouts every :data:`STRIDE` frames from frame STRIDE on, the onset windows,
    and the open loop's consecutive windows from frame 0."""
    rollouts, onset, open_loop = [], [], []
    for n, e in enumerate(episodes):
        rollouts += [Window(n, t0, horizon, "rollout") for t0 in range(STRIDE, len(e) - horizon, STRIDE)]
        t_on = onset_frame(e)
        if t_on is not None and t_on >= 1 and t_on + ONSET_FRAMES < len(e):
            onset.append(Window(n, t_on, ONSET_FRAMES, "onset"))
        open_loop += [Window(n, t0, STRIDE, "open_loop") for t0 in range(0, len(e) - STRIDE, STRIDE)]
    return {"rollout": rollouts, "onset": onset, "open_loop": open_loop}


def truncate(windows: Sequence[Window], videos: Sequence[np.ndarray], k: int) -> tuple[list[Window], list[np.ndarray]]:
    """The same windows cut to their first k generated frames."""
    return ([Window(w.episode, w.start, k, w.protocol) for w in windows], [v[:k + 1] for v in videos])


def measure_protocol(wm, episodes, windows, generated, probe, scene, round_trips, resamples,
                     sources: Sequence[str] = SOURCES) -> dict[str, Any]:
    phases = [window_phase(episodes[w.episode], w.start, w.length) for w in windows]
    out = {}
    for source in sources:
        videos = source_videos(source, wm, episodes, windows, generated, round_trips)
        out[source] = aggregate(windows, phases, measure_windows(episodes, windows, videos, probe, scene), resamples)
    return out


def evaluate(wm, episodes: Sequence[EvalEpisode], probe, scene: str, *, seed: int = 0, batch_size: int = 16,
             resamples: int = 1000, open_loop: bool = True, progress: bool = False,
             sources: Sequence[str] = SOURCES, response_only: bool = False) -> dict[str, Any]:
    """Every protocol of the module docstring on ``episodes``; the report's ``protocols`` section.
    ``response_only``: only what the first generated frame of each window gives (one step, the action response, the
    latent measures), a fraction of the cost: the early signal of a learning curve."""
    from ..common.heldout import open_loop_recorded

    plan = plan_windows(episodes)
    if response_only:
        plan["rollout"] = [Window(w.episode, w.start, 1, w.protocol) for w in plan["rollout"]]
    beliefs: list = []
    rollouts, jumped, latent = rollouts_from_truth(wm, episodes, plan["rollout"], seed=seed, batch_size=batch_size,
                                                   progress=progress, response_shift=RESPONSE_JUMP - 1,
                                                   beliefs=beliefs)
    round_trips: dict[int, np.ndarray] = {}
    report: dict[str, Any] = {}
    one_win, one_vid = truncate(plan["rollout"], rollouts, 1)
    phases = [window_phase(episodes[w.episode], w.start, w.length) for w in one_win]
    report["one_step"] = aggregate_one_step(phases, one_step_errors(episodes, one_win, one_vid))
    response_phases = [window_phase(episodes[w.episode], w.start, RESPONSE_JUMP) for w in one_win]
    report["response"] = action_response(episodes, one_win, one_vid, jumped, response_phases, resamples)
    report["latent"] = latent_measures(one_win, latent, response_phases, resamples)
    if response_only:
        return report
    for k in HORIZONS:
        wins, vids = truncate(plan["rollout"], rollouts, k)
        report[f"rollout_{k}"] = measure_protocol(wm, episodes, wins, vids, probe, scene, round_trips, resamples,
                                                  sources)
        if beliefs:  # a model with object state: the cube in its own belief
            report[f"rollout_{k}"]["belief"] = belief_ratios(episodes, wins, [o[:k + 1] for o in beliefs], resamples)
    if plan["onset"]:
        onset_beliefs: list = []
        onset = rollouts_from_truth(wm, episodes, plan["onset"], seed=seed, batch_size=batch_size, progress=progress,
                                    beliefs=onset_beliefs)
        report["onset"] = measure_protocol(wm, episodes, plan["onset"], onset, probe, scene, round_trips, resamples,
                                           sources)
        if onset_beliefs:
            report["onset"]["belief"] = belief_ratios(episodes, plan["onset"], onset_beliefs, resamples)
    if open_loop:
        videos = open_loop_recorded(wm, episodes, seed=seed, batch_size=batch_size, progress=progress)
        wins = plan["open_loop"]
        vids = [videos[w.episode][w.start:w.start + w.length + 1] for w in wins]
        report["open_loop"] = measure_protocol(wm, episodes, wins, vids, probe, scene, round_trips, resamples,
                                               ("generated", "truth"))
        by_window = {}
        for j in sorted({w.start // STRIDE for w in wins}):
            keep = [i for i, w in enumerate(wins) if w.start // STRIDE == j]
            sub = [wins[i] for i in keep]
            phases = [window_phase(episodes[w.episode], w.start, w.length) for w in sub]
            agg = aggregate(sub, phases, measure_windows(episodes, sub, [vids[i] for i in keep], probe, scene),
                            resamples)["all"]
            by_window[f"frames_{j * STRIDE}_{(j + 1) * STRIDE}"] = agg
        report["open_loop"]["generated_by_window"] = by_window
    return report


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """The figures a learning curve plots and the targets read: carry-phase ratios 8 frames from true context, the
    onset's object ratio, and whether one step beats repeating the last frame."""
    def get(*keys):
        x = report
        for k in keys:
            if not isinstance(x, dict) or k not in x:
                return None
            x = x[k]
        return x

    return {
        "arm_carry_8": get("rollout_8", "generated", "carry", "arm_mean", "ratio"),
        "arm_reach_8": get("rollout_8", "generated", "reach", "arm_mean", "ratio"),
        "object_carry_8": get("rollout_8", "generated", "carry", "object", "ratio"),
        "object_onset": get("onset", "generated", "all", "object", "ratio"),
        "object_belief_carry_8": get("rollout_8", "belief", "carry", "ratio"),
        "object_carry_8_views": [get("rollout_8", "generated", "carry", f"object_exterior_image_{v}", "ratio")
                                 for v in (1, 2)],
        "arm_carry_8_views": [get("rollout_8", "generated", "carry", f"arm_exterior_image_{v}", "ratio")
                              for v in (1, 2)],
        "action_response": get("response", "all", "ratio"),
        "latent_response": get("latent", "response", "all", "ratio"),
        "latent_one_step_vs_repeat_last": get("latent", "one_step_vs_repeat_last", "all", "ratio"),
        "one_step_mse_generated": get("one_step", "all", "mse_generated"),
        "one_step_mse_repeat_last": get("one_step", "all", "mse_repeat_last"),
    }


# ---------------------------------------------------------------------------------------------- runs
@dataclass
class Config:
    """Options of ``python -m benchmarks.fidelity.dynamics``."""

    checkpoint: str | None = None
    """A world model directory (``neuralsim train``'s ``model/``, a snapshot, a shipped model)."""
    curve: str | None = None
    """A training run (or a recipe's output) whose kept models are all measured: a learning curve."""
    data: str | None = None
    """A SimDROID split of the model's scene written with object state (``neuralsim data generate``); None: the
    held-out split of the model's scene (:func:`~benchmarks.common.heldout.default_split`)."""
    max_episodes: int | None = 20
    """The first episodes of the split (None: all)."""
    probe: str | None = "default"
    """Object-probe directory; ``"default"``: the shipped probe of the model's scene; None: no object ratios."""
    seed: int = 0
    batch_size: int = 16
    resamples: int = 1000
    """Bootstrap resamples of each interval."""
    open_loop: bool = True
    """Also the open loop from frame 0 (not in a curve)."""
    response_only: bool = False
    """Only the first generated frame of each window: one step, the action response and the latent measures."""
    quick: bool = False
    """A smoke run: QUICK_EPISODES episodes, no open loop, 200 resamples, ``dynamics_quick.json``."""
    threads: int | None = None
    out: str | None = None
    progress: bool = True


def out_path(cfg: Config) -> Path:
    return results_path("dynamics_curve" if cfg.curve else "dynamics", cfg.quick, cfg.out)


def load_episodes(cfg: Config, image_size: int) -> list[EvalEpisode]:
    finished_records(cfg.data)
    n = QUICK_EPISODES if cfg.quick and cfg.max_episodes is None else cfg.max_episodes
    episodes = load_split(cfg.data, image_size, n)
    if any(e.objects is None for e in episodes):
        raise ValueError(f"{cfg.data!r} has no recorded object state (ground_truth.object_pose): it was written "
                         "before those columns; generate it again with `neuralsim data generate`")
    return episodes


def load_probe(cfg: Config, scene: str):
    if cfg.probe is None:
        return None
    from ..common import object_probe

    path = object_probe.default_dir(scene) if cfg.probe == "default" else Path(cfg.probe)
    if not (path / "probe.safetensors").is_file():
        raise FileNotFoundError(f"no object probe in {str(path)!r}; build it with "
                                f"`python -m benchmarks.common.object_probe --scene {scene}` or pass --no-probe")
    return object_probe.load(path)


def curve_checkpoints(run_dir: str | Path) -> list[tuple[str, int | None, Path]]:
    """(label, training step, directory) of every model a run kept, in training order: its snapshots by step, then
    its ``model/``; a recipe's output: every stage's (in the order the stages finished), each model at the DiT steps
    its config records over its whole history, so that the stages of one run share one axis (an autoencoder stage's
    models, whose DiT no stage has trained, are left out)."""
    from neuralsim.world_model.checkpoint import find_checkpoint, list_snapshots, read_trainer, recorded_dit_steps

    root = Path(run_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"--curve {str(root)!r} is not a directory")

    def of_run(d: Path, prefix: str) -> list[tuple[str, int | None, Path]]:
        found = [(f"{prefix}step_{s}", s, p) for s, p in list_snapshots(d)]
        if (d / "model" / "config.json").is_file():
            ck = find_checkpoint(d)
            step = read_trainer(ck)["step"] if ck is not None else None
            if step is None and (d / "done.json").is_file():
                step = json.loads((d / "done.json").read_text()).get("steps")
            if not found or found[-1][1] != step:
                found.append((f"{prefix}model", step, d / "model"))
        return found

    found = of_run(root, "")
    if not found:  # a recipe's output: one run per stage
        stages = sorted((d for d in root.iterdir() if d.is_dir() and (d / "model" / "config.json").is_file()),
                        key=lambda d: ((d / "done.json").stat().st_mtime if (d / "done.json").is_file()
                                       else float("inf"), d.name))
        for d in stages:
            for label, _, path in of_run(d, f"{d.name}/"):
                step = recorded_dit_steps(json.loads((path / "config.json").read_text()))
                if step is not None:  # None: an autoencoder stage's model, its DiT as drawn: nothing to follow yet
                    found.append((label, step, path))
    if not found:
        raise FileNotFoundError(f"{str(root)!r} holds no kept model (snapshots/step_*, model/, or stages with model/ "
                                "whose DiT has trained); train with --snapshot-every N to keep some")
    return found


def earlier_points(path: Path, report: dict[str, Any]) -> dict[str, dict]:
    """The points of an earlier curve report at ``path`` measured the same way (data, episodes, seed, protocol, run),
    by checkpoint path: its kept snapshots' (``snapshots/step_*``, never rewritten) are not measured again as a run
    goes on, and every one whose model has left the disk stays in the curve (:func:`with_earlier_points`)."""
    if not path.is_file():
        return {}
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    same = all(old.get(k) == report[k] for k in ("data", "episodes", "seed", "protocol", "run"))
    return {p["checkpoint"]: p for p in old.get("curve", []) if same and "checkpoint" in p}


def with_earlier_points(points: list[dict], earlier: dict[str, dict]) -> list[dict]:
    """``points`` (this curve's models on disk) and the earlier report's points (snapshots' or a ``model/``'s) whose
    model is no longer on disk, at steps no point of ``points`` has, in step order: a run moved to another machine
    carries only its last model (docs/TRAINING.md, "Resuming"), and its curve keeps what was measured before the
    move, also where that was a part's ``model/``, which the next part's replaces."""
    steps = {p["step"] for p in points}  # a point still on disk is in ``points`` at its step: not taken twice
    gone = [p for p in earlier.values() if p.get("step") is not None and p["step"] not in steps]
    if not gone:
        return points
    last = float("inf")  # a model whose step is unknown stays after the measured ones
    return sorted(points + gone, key=lambda p: last if p.get("step") is None else p["step"])


def run(cfg: Config) -> dict[str, Any]:
    """Measure one checkpoint, or every model of a run (``curve``); write and return the JSON report."""
    import torch

    from neuralsim.envs.neural_droid import load_world_model

    if (cfg.checkpoint is None) == (cfg.curve is None):
        raise ValueError("give one of --checkpoint DIR or --curve RUN_DIR")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    resamples = 200 if cfg.quick else cfg.resamples
    targets = [(Path(cfg.checkpoint).name, None, Path(cfg.checkpoint))] if cfg.checkpoint else \
        curve_checkpoints(cfg.curve)
    first = load_world_model(str(targets[0][2]))
    scene = first.config.scene
    from neuralsim.world_model.batches import data_scene

    if cfg.data is None:
        from ..common.heldout import default_split

        cfg = replace(cfg, data=default_split(scene))
    if data_scene(cfg.data) != scene:
        raise ValueError(f"{cfg.data} holds {data_scene(cfg.data)}-scene episodes, the world model is trained on the "
                         f"{scene} scene: measure it on a split of its own scene")
    episodes = load_episodes(cfg, first.config.autoencoder.image_size)
    probe = None if cfg.response_only else load_probe(cfg, scene)
    t0 = time.perf_counter()
    report: dict[str, Any] = {
        "benchmark": "dynamics", "data": cfg.data, "episodes": len(episodes), "scene": scene, "seed": cfg.seed,
        "protocol": {"stride": STRIDE, "horizons": list(HORIZONS), "onset_frames": ONSET_FRAMES, "idle_m": IDLE_M,
                     "min_motion": MIN_MOTION, "response_jump": RESPONSE_JUMP, "conditioning": "recorded",
                     "resamples": resamples, "response_only": cfg.response_only,
                     "probe": None if probe is None else cfg.probe},
    }
    if cfg.checkpoint:
        report["checkpoint"] = cfg.checkpoint
        report["window"] = first.config.window
        report["protocols"] = evaluate(first, episodes, probe, scene, seed=cfg.seed, batch_size=cfg.batch_size,
                                       resamples=resamples, open_loop=cfg.open_loop and not cfg.quick,
                                       progress=cfg.progress, response_only=cfg.response_only)
        report["headline"] = headline(report["protocols"])
    else:
        report["run"] = cfg.curve
        earlier = earlier_points(out_path(cfg), report)
        points = []
        for label, step, path in targets:
            # a kept snapshot never changes: measured once, by an earlier run of this curve
            if str(path) in earlier and "/snapshots/step_" in str(path):
                points.append(earlier[str(path)])
                continue
            wm = first if path == targets[0][2] else load_world_model(str(path))
            log.info("curve: %s (step %s)", label, step)
            protocols = evaluate(wm, episodes, probe, scene, seed=cfg.seed, batch_size=cfg.batch_size,
                                 resamples=resamples, open_loop=False, progress=cfg.progress,
                                 sources=("generated",), response_only=cfg.response_only)
            points.append({"checkpoint": str(path), "label": label, "step": step, **headline(protocols)})
        report["curve"] = with_earlier_points(points, earlier)
    report["seconds"] = round(time.perf_counter() - t0, 1)
    path = out_path(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=1) + "\n")
    tmp.replace(path)
    plot(report, path.with_suffix(".png"))
    return report


# ---------------------------------------------------------------------------------------------- plots and print
def stage_starts(points: Sequence[dict[str, Any]], xs: Sequence[float]) -> list[tuple[float, str]]:
    """(x, stage) where a curve's stage changes: the last point before it, the model the new stage started from.

    A point's stage is its label's part with a recipe's `_NN` repeat number dropped:
    ``step_forcing_18/step_2000`` then ``step_forcing_mix_01/step_500`` is a change (expert data to the mix);
    ``step_forcing_17`` then ``step_forcing_18`` is not. The first stage gets no line."""
    from neuralsim.world_model.recipe import stage_of

    starts, last, last_x = [], None, None
    for p, x in zip(points, xs):
        stage = stage_of(str(p.get("label", "")).split("/")[0])
        if last is not None and stage != last:
            starts.append((last_x, stage))
        last, last_x = stage, x
    return starts


def plot(report: dict[str, Any], path: Path) -> Path:
    """A PNG beside the report: ratio by phase and horizon (one checkpoint), or ratio against step (a curve)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if "curve" in report:
        fig, ax = plt.subplots(figsize=(7, 4))
        pts = report["curve"]
        xs = [p["step"] if p["step"] is not None else i for i, p in enumerate(pts)]
        for key, style in (("arm_carry_8", "o-"), ("arm_reach_8", "s--"), ("object_carry_8", "^-"),
                           ("object_onset", "v:"), ("action_response", "d-."), ("latent_response", "x-."),
                           ("latent_one_step_vs_repeat_last", "+:")):
            ys = [np.nan if p.get(key) is None else p[key] for p in pts]
            if not np.isnan(ys).all():  # a --response-only curve has no follow ratios: no empty legend entries
                ax.plot(xs, ys, style, label=key)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.axhline(0.0, color="black", lw=0.8)
        for x, stage in stage_starts(pts, xs):  # where the data or the objective changes
            ax.axvline(x, color="grey", lw=0.8, ls=":")
            ax.annotate(stage, (x, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -2),
                        textcoords="offset points", fontsize=7, color="grey", rotation=90, va="top")
        ax.set_xlabel("training step" if all(p["step"] is not None for p in pts) else "kept model")
        ax.set_ylabel("follow ratio / response / latent step error")
        ax.set_title(f"Following while training: {report['run']}", fontsize=10)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=4, frameon=False)
    elif "rollout_8" not in report["protocols"]:  # --response-only
        fig, ax = plt.subplots(figsize=(7, 4))
        protos = report["protocols"]
        phases = [ph for ph in ("all", *PHASES) if ph in protos["response"]]
        series = (("action response (pixels)", protos["response"]),
                  ("latent response", protos["latent"]["response"]),
                  ("latent one step / repeat-last", protos["latent"]["one_step_vs_repeat_last"]))
        for j, (label, entries) in enumerate(series):
            ax.bar(np.arange(len(phases)) + j * 0.27, [entries[ph]["ratio"] or 0.0 for ph in phases], 0.27,
                   label=label)
        ax.set_xticks(np.arange(len(phases)) + 0.27)
        ax.set_xticklabels(phases)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_ylabel("ratio")
        ax.set_title(f"First frame from true context: {report.get('checkpoint', '')}", fontsize=9)
        ax.legend(fontsize=8, frameon=False)
    else:
        protos = report["protocols"]
        fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
        for ax, kind, key in ((axes[0], "arm", "arm_mean"), (axes[1], "object", "object")):
            names = [p for p in ("rollout_4", "rollout_8", "onset") if p in protos]
            phases = ["all", *PHASES]
            width = 0.8 / (len(names) + 1)
            for j, name in enumerate(names):
                entries = [protos[name]["generated"].get(ph, {}).get(key, {}) for ph in phases]
                vals = np.array([np.nan if e.get("ratio") is None else e["ratio"] for e in entries])
                ci = np.array([e["ci95"] if e.get("ci95") else [np.nan, np.nan] for e in entries]).T
                err = np.nan_to_num(np.abs(ci - vals[None]))
                ax.bar(np.arange(len(phases)) + j * width, vals, width, yerr=err, capsize=2,
                       label=f"{name} generated")
            floor = [protos["rollout_8"]["round_trip"].get(ph, {}).get(key, {}).get("ratio")
                     for ph in phases] if "round_trip" in protos.get("rollout_8", {}) else []
            if floor:
                ax.bar(np.arange(len(phases)) + len(names) * width, [np.nan if v is None else v for v in floor], width,
                       color="lightgrey", label="rollout_8 autoencoder round trip")
            ax.set_xticks(np.arange(len(phases)) + 0.4 - width / 2)
            ax.set_xticklabels(phases)
            ax.axhline(1.0, color="grey", lw=0.8)
            ax.axhline(0.0, color="black", lw=0.8)
            ax.set_title(f"{kind}: follow ratio from true context (95% intervals)", fontsize=10)
            ax.set_ylim(min(-0.2, ax.get_ylim()[0]), max(1.3, ax.get_ylim()[1]))
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)
        axes[0].set_ylabel("follow ratio (1 = as the truth)")
        fig.suptitle(report.get("checkpoint", ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def format_report(report: dict[str, Any]) -> str:
    """A short table for the terminal."""
    def f(x):
        return "   -  " if x is None else f"{x:6.2f}"

    def r(x):  # a response: 0.0023 and 0.0001 differ by 20x
        return "   -  " if x is None else f"{x:6.4f}"

    lines = []
    if "curve" in report:
        lines.append(f"{'model':40s} {'step':>7s} {'arm carry':>9s} {'arm reach':>9s} {'obj carry':>9s} "
                     f"{'onset':>6s} {'response':>8s} {'latent response':>15s} {'latent step/repeat':>18s}")
        for p in report["curve"]:
            lines.append(f"{p['label'][:40]:40s} {str(p['step']):>7s} {f(p['arm_carry_8']):>9s} "
                         f"{f(p['arm_reach_8']):>9s} {f(p['object_carry_8']):>9s} {f(p['object_onset']):>6s} "
                         f"{r(p.get('action_response')):>8s} {r(p.get('latent_response')):>15s} "
                         f"{f(p.get('latent_one_step_vs_repeat_last')):>18s}")
        return "\n".join(lines)
    protos = report["protocols"]
    lines.append(f"{report['checkpoint']} on {report['data']} ({report['episodes']} episodes)")
    lines.append(f"{'protocol':10s} {'source':11s} {'phase':14s} {'arm ext1':>8s} {'arm ext2':>8s} {'object':>8s} "
                 f"{'obj ext1':>8s} {'obj ext2':>8s}")
    for name in ("rollout_4", "rollout_8", "onset", "open_loop"):
        for source in SOURCES:
            for phase, e in protos.get(name, {}).get(source, {}).items():
                views = [e.get(f"object_exterior_image_{v}", {}).get("ratio") for v in (1, 2)]
                lines.append(f"{name:10s} {source:11s} {phase:14s} {f(e['arm_exterior_image_1']['ratio']):>8s} "
                             f"{f(e['arm_exterior_image_2']['ratio']):>8s} {f(e['object']['ratio']):>8s} "
                             f"{f(views[0]):>8s} {f(views[1]):>8s}")
    for name in ("rollout_8", "onset"):
        for phase, e in protos.get(name, {}).get("belief", {}).items():
            lines.append(f"{name:10s} {'belief':11s} {phase:14s} {'':>8s} {'':>8s} {f(e['ratio']):>8s}  "
                         "(the cube in the model's object state)")
    for phase, e in protos.get("response", {}).items():
        lines.append(f"action response, {phase:14s} {r(e['ratio'])}  (0: ignores where the hand is)")
    latent = protos.get("latent", {})
    for phase, e in latent.get("response", {}).items():
        step = latent["one_step_vs_repeat_last"][phase]["ratio"]
        lines.append(f"latent, {phase:14s} response {r(e['ratio'])}  one step / repeat-last {f(step)}  "
                     "(the DiT alone, before the decoder)")
    for phase, e in protos["one_step"].items():
        lines.append(f"one step, {phase:14s} MSE generated {e['mse_generated']:7.1f}  repeat-last "
                     f"{e['mse_repeat_last']:7.1f}  closer to previous {e['share_closer_to_previous']:.0%}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.fidelity.dynamics", description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="world model directory to measure")
    src.add_argument("--curve", metavar="RUN_DIR", help="measure every model a training run kept (a learning curve)")
    p.add_argument("--data", default=Config.data, help="SimDROID split with object state (default: the held-out "
                   "split of the model's scene, data/legible_heldout or data/simdroid_heldout)")
    p.add_argument("--max-episodes", type=int, default=Config.max_episodes, help="first N episodes (default 20)")
    p.add_argument("--probe", default="default", help="object-probe directory (default: the scene's shipped probe)")
    p.add_argument("--no-probe", action="store_true", help="skip the object ratios")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=Config.batch_size)
    p.add_argument("--resamples", type=int, default=Config.resamples, help="bootstrap resamples (default 1000)")
    p.add_argument("--no-open-loop", action="store_true", help="skip the open loop from frame 0")
    p.add_argument("--response-only", action="store_true",
                   help="only the first generated frame of each window: one step, the action response and the latent "
                        "measures (a cheap learning curve; no follow ratios)")
    p.add_argument("--quick", action="store_true", help=f"smoke run: {QUICK_EPISODES} episodes, dynamics_quick.json")
    p.add_argument("--threads", type=int, help="torch CPU threads")
    p.add_argument("--out", help=out_help("dynamics") + "; a PNG is written beside it")
    p.add_argument("--no-progress", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cfg = Config(checkpoint=args.checkpoint, curve=args.curve, data=args.data,
                 max_episodes=None if args.quick and args.max_episodes == Config.max_episodes else args.max_episodes,
                 probe=None if args.no_probe else args.probe, seed=args.seed, batch_size=args.batch_size,
                 resamples=args.resamples, open_loop=not args.no_open_loop, response_only=args.response_only,
                 quick=args.quick, threads=args.threads,
                 out=args.out, progress=not args.no_progress)
    try:
        report = run(cfg)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_report(report))
    print(f"wrote {out_path(cfg)} and {out_path(cfg).with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
