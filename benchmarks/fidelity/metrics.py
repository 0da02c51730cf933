"""What the fidelity benchmark scores (:mod:`benchmarks.fidelity.fidelity`): frames, the cube's position, the arm.

Frames: PSNR (:func:`psnr_frames`, capped at :data:`PSNR_CAP_DB`), SSIM (:func:`ssim_frames`) and the detail kept
(:func:`sharpness_frames`) of uint8 frames, and :func:`frame_metrics`, which averages them over the protocol's
:class:`Windows` per view and keeps each episode's score for paired A/Bs; :func:`end_frame_scores` for the last
frame of each episode.  The cube: :func:`position_errors` (and :func:`probe_floors`, the object probe's own error)
of the target cube's table position against the simulator's.  The arm: :func:`adapter_replay_drift`, how far the
env's action adapter ends from the simulator's flange.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from neuralsim.episode import VIEW_NAMES

from ..common.stats import wilson_interval

if TYPE_CHECKING:
    from ..common.heldout import EvalEpisode

#: PSNR of identical frames (MSE 0) and the most any frame can score [dB].
PSNR_CAP_DB = 100.0
#: Position error counted as "right": the cube's edge length [m].
POSITION_TOLERANCE_M = 0.05


# ---------------------------------------------------------------------------------------------- frames
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



# ---------------------------------------------------------------------------------------------- position
def target_rgb(episodes: Sequence[EvalEpisode]) -> np.ndarray:
    """(N, 3) RGB in [0, 1] of each episode's target cube, the colour the object probe is asked to find."""
    from ..common.object_probe import colour_rgb

    return np.stack([colour_rgb(e.record["target"]) for e in episodes])


def probe_floors(probe, episodes: Sequence[EvalEpisode], decoded_last: np.ndarray | None = None) -> dict[str, Any]:
    """The probe's table-xy error on each episode's true last frame (``probe_on_true_frames_*``) and, given
    ``decoded_last`` (those frames through a model's autoencoder, (N, V, S, S, 3)), on the round trip
    (``probe_on_round_trip_*``): the best a DiT could score with this autoencoder and this probe."""
    from ..common.object_probe import EXTERIOR_VIEWS, locate

    ext = [VIEW_NAMES.index(v) for v in EXTERIOR_VIEWS]
    truth_xy = np.stack([e.target_final_xy for e in episodes])
    rgb = target_rgb(episodes)
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
    from ..common.object_probe import EXTERIOR_VIEWS, locate

    ext = [VIEW_NAMES.index(v) for v in EXTERIOR_VIEWS]
    truth_xy = np.stack([e.target_final_xy for e in episodes])
    rgb = target_rgb(episodes)
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


# ---------------------------------------------------------------------------------------------- the arm
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
