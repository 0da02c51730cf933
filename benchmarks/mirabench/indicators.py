"""MiraBench's Level 1 and Level 2 indicators as pure functions of cube tracks (:mod:`benchmarks.mirabench`).

Every function takes arrays -- a cube's per-frame position, visible area and colour drift
(:class:`benchmarks.common.cube_tracks.CubeTracks`), the arm's tool point -- and returns an :class:`Indicator`: pass,
fail or not applicable, with the number behind the verdict.  Nothing here reads video, so tests feed known cases
(a cube that vanishes, one that jumps) straight in.

Level 1, physics adherence (MiraBench Appendix D.1, reference-free: a video is compared with itself):

* **existence** (D.2.2's object preservation: visible in at least :data:`PRESENT_SHARE` of the frames);
* **colour** and **size** (D.1.1's object consistency: while visible, the cube keeps its frame-0 colour and
  area);
* **occlusion** (D.1.1's occlusion consistency: a cube that disappears -- behind the arm, say -- comes back as
  itself, with its colour and size, before the video ends);
* **teleport** (no jump faster than anything in the scene moves, across occlusions too);
* **drift after contact** (D.1.2's post-contact drift: a cube the gripper is away from stays where it is);
* **fall** (D.1.2's free fall: a released cube above its supports comes down within a free fall's time, and a
  fall long enough to measure accelerates).

Level 2, action following against the simulator's truth for the same actions (D.2): **task completion** (the
target in its goal region at the end), **grounding** (the cubes that moved are the cubes that truly moved: the
target, not a distractor) and **motion quality** (the target's path against the true path).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Relative visible area above which a cube counts as visible.
VISIBLE_AREA = 0.3
#: Share of frames a cube must be visible in (MiraBench's object-preservation threshold, D.2.2).
PRESENT_SHARE = 0.7
#: Largest colour drift (uint8 RGB distance) of a visible cube counted as its own colour.
COLOUR_TOLERANCE = 45.0
#: A visible cube's area may grow or shrink by this factor at most.
SIZE_RATIO = 3.0
#: Share of visible frames that must keep colour and size.
CONSISTENT_SHARE = 0.8
#: Fastest plausible cube speed [m per 1/15 s frame] (the expert carries at <= 0.022) and the jump allowance [m]
#: on top of it that covers the probe's noise.
MAX_SPEED_M = 0.03
JUMP_ALLOWANCE_M = 0.08
#: The gripper is "away" from a cube when its tool point is farther than this [m].
CONTACT_RADIUS_M = 0.10
#: Shortest free stretch [frames] judged for drift, and the drift [m] allowed over it (probe noise).
FREE_FRAMES = 6
DRIFT_M = 0.04
#: A free cube's centre above this [m] is unsupported (a classic two-cube stack's top cube sits at 0.075).
SUPPORT_Z_M = 0.10
#: Longest unsupported stretch [frames]: a 0.2 m free fall lasts 3 frames at 15 Hz.
MAX_FALL_FRAMES = 4
#: Net displacement [m] from the first to the last frames that counts as "moved" (the cube's edge).
MOVED_M = 0.05
#: Track error [m] counted as on the true path (the cube's edge).
ON_PATH_M = 0.05


@dataclass(frozen=True)
class Indicator:
    """One indicator's verdict on one cube (or episode)."""

    passed: bool | None
    """True / False, or None when it does not apply (no occlusion, no fall, no visible frame)."""
    value: float | None
    """The number the verdict reads (its meaning is the indicator's)."""

    def as_dict(self) -> dict:
        return {"passed": self.passed, "value": None if self.value is None else round(float(self.value), 4)}


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[start, stop) of every run of True in a 1-d bool array."""
    m = np.concatenate([[False], np.asarray(mask, bool), [False]])
    d = np.flatnonzero(np.diff(m.astype(int)))
    return list(zip(d[::2], d[1::2]))


# ---------------------------------------------------------------------------------------------- Level 1: appearance
def existence(area: np.ndarray) -> Indicator:
    """Visible (``area >= VISIBLE_AREA``) in at least :data:`PRESENT_SHARE` of the frames; value = that share."""
    share = float((np.asarray(area) >= VISIBLE_AREA).mean())
    return Indicator(share >= PRESENT_SHARE, share)


def colour_consistency(area: np.ndarray, colour_drift: np.ndarray) -> Indicator:
    """While visible, the colour stays within :data:`COLOUR_TOLERANCE` of frame 0's in at least
    :data:`CONSISTENT_SHARE` of the frames; value = that share (None: never visible)."""
    vis = np.asarray(area) >= VISIBLE_AREA
    if not vis.any():
        return Indicator(None, None)
    share = float((np.nan_to_num(np.asarray(colour_drift)[vis], nan=np.inf) <= COLOUR_TOLERANCE).mean())
    return Indicator(share >= CONSISTENT_SHARE, share)


def size_consistency(area: np.ndarray) -> Indicator:
    """While visible, the area stays within a factor :data:`SIZE_RATIO` of frame 0's (it cannot shrink below
    :data:`VISIBLE_AREA` and stay visible, so this catches growth and near-vanishing) in at least
    :data:`CONSISTENT_SHARE` of the frames; value = that share (None: never visible)."""
    a = np.asarray(area, float)
    vis = a >= VISIBLE_AREA
    if not vis.any():
        return Indicator(None, None)
    share = float(((a[vis] <= SIZE_RATIO) & (a[vis] >= 1.0 / SIZE_RATIO)).mean())
    return Indicator(share >= CONSISTENT_SHARE, share)


def occlusion_consistency(area: np.ndarray, colour_drift: np.ndarray) -> Indicator:
    """Every disappearance after frame 0 ends with the same cube back before the video ends.  A frame shows "the
    cube" when it is visible with its colour (within :data:`COLOUR_TOLERANCE`) and size (below :data:`SIZE_RATIO`);
    a disappearance is a run of frames that do not.  value = the number of disappearances; None when there is
    none."""
    a = np.asarray(area, float)
    drift = np.nan_to_num(np.asarray(colour_drift, float), nan=np.inf)
    same = (a >= VISIBLE_AREA) & (a <= SIZE_RATIO) & (drift <= COLOUR_TOLERANCE)
    gaps = [(s, e) for s, e in _runs(~same) if s > 0]
    if not gaps:
        return Indicator(None, None)
    return Indicator(bool(gaps[-1][1] < len(a)), len(gaps))


# ---------------------------------------------------------------------------------------------- Level 1: motion
def teleport(xyz: np.ndarray, area: np.ndarray | None = None) -> Indicator:
    """No jump between consecutive visible frames longer than ``JUMP_ALLOWANCE_M + MAX_SPEED_M * frames apart``
    (table xy; a jump across an occlusion counts).  Positions are smoothed by a 3-frame median first (a probe's
    one-frame miss is not a teleport).  value = the largest excess jump [m] (<= 0 passes); None: < 2 visible frames."""
    xy = np.asarray(xyz, float)[:, :2]
    t = np.arange(len(xy)) if area is None else np.flatnonzero(np.asarray(area) >= VISIBLE_AREA)
    if len(t) < 2:
        return Indicator(None, None)
    p = xy[t]
    if len(p) >= 3:
        p = np.stack([np.median(p[max(i - 1, 0):i + 2], axis=0) for i in range(len(p))])
    jump = np.linalg.norm(np.diff(p, axis=0), axis=1)
    excess = float((jump - JUMP_ALLOWANCE_M - MAX_SPEED_M * np.diff(t)).max())
    return Indicator(excess <= 0.0, excess)


def _free(xyz: np.ndarray, tcp: np.ndarray) -> np.ndarray:
    return np.linalg.norm(np.asarray(xyz, float) - np.asarray(tcp, float), axis=1) > CONTACT_RADIUS_M


def post_contact_drift(xyz: np.ndarray, tcp: np.ndarray, area: np.ndarray | None = None) -> Indicator:
    """Over every stretch of at least :data:`FREE_FRAMES` frames with the gripper away (farther than
    :data:`CONTACT_RADIUS_M`) and the cube visible, the cube's table position (3-frame medians at both ends) moves
    less than :data:`DRIFT_M`.  value = the largest drift [m]; None: no such stretch."""
    free = _free(xyz, tcp)
    if area is not None:
        free &= np.asarray(area) >= VISIBLE_AREA
    xy = np.asarray(xyz, float)[:, :2]
    drifts = [float(np.linalg.norm(np.median(xy[e - 3:e], 0) - np.median(xy[s:s + 3], 0)))
              for s, e in _runs(free) if e - s >= FREE_FRAMES]
    if not drifts:
        return Indicator(None, None)
    return Indicator(max(drifts) < DRIFT_M, max(drifts))


def fall(xyz: np.ndarray, tcp: np.ndarray, area: np.ndarray | None = None) -> Indicator:
    """A free cube above :data:`SUPPORT_Z_M` comes down within :data:`MAX_FALL_FRAMES` frames (no hovering), and in a
    fall of 3 or more frames its downward speed does not decrease (gravity accelerates; 1 cm per frame of probe
    noise allowed).  value = the longest unsupported stretch [frames]; None: never unsupported."""
    z = np.asarray(xyz, float)[:, 2]
    up = _free(xyz, tcp) & (z > SUPPORT_Z_M)
    if area is not None:
        up &= np.asarray(area) >= VISIBLE_AREA
    runs = _runs(up)
    if not runs:
        return Indicator(None, None)
    longest = max(e - s for s, e in runs)
    ok = longest <= MAX_FALL_FRAMES
    for s, e in runs:
        seg = z[s:min(e + 1, len(z))]  # the stretch and the landing frame
        if len(seg) >= 4:
            speed = -np.diff(seg)
            ok &= bool(np.all(np.diff(speed) >= -0.01))
    return Indicator(bool(ok), float(longest))


# ---------------------------------------------------------------------------------------------- Level 2
def net_displacement(xyz: np.ndarray, ends: int = 3) -> float:
    """Table-xy distance [m] between the medians of the first and of the last ``ends`` frames."""
    xy = np.asarray(xyz, float)[:, :2]
    return float(np.linalg.norm(np.median(xy[-ends:], 0) - np.median(xy[:ends], 0)))


def in_goal(xy: np.ndarray, task: str, goal_xy: np.ndarray, goal_half: float) -> bool:
    """Is a table point in a task's goal region: within ``goal_half`` per axis of the bowl or pad centre, or within
    ``goal_half`` (radius) of the base cube for ``stack`` (SimDROID's success test, in the table plane)."""
    d = np.asarray(xy, float)[:2] - np.asarray(goal_xy, float)[:2]
    if task == "stack":
        return bool(np.linalg.norm(d) < goal_half)
    return bool(np.all(np.abs(d) < goal_half))


def task_completion(end_xy: np.ndarray, task: str, goal_xy: np.ndarray, goal_half: float,
                    true_success: bool) -> dict:
    """The video's outcome (target in the goal region at the end, :func:`in_goal`) beside the truth's."""
    shown = in_goal(end_xy, task, goal_xy, goal_half)
    return {"shown_success": shown, "true_success": bool(true_success), "agrees": shown == bool(true_success)}


def grounding(moved: np.ndarray, true_moved: np.ndarray, target: int) -> dict:
    """Did the right cubes move?  ``moved`` / ``true_moved`` (C,) bool: each cube's net displacement above
    :data:`MOVED_M` in the video / in the simulator.  ``target_agrees``: the target moved in the video iff it truly
    did; ``distractor_moves``: distractors that moved in the video but not in truth; ``passed``: both right."""
    moved, true_moved = np.asarray(moved, bool), np.asarray(true_moved, bool)
    others = np.arange(len(moved)) != target
    wrong = int((moved & ~true_moved & others).sum())
    agrees = bool(moved[target] == true_moved[target])
    return {"target_agrees": agrees, "distractor_moves": wrong, "passed": agrees and wrong == 0,
            "target_moved": bool(moved[target]), "target_truly_moved": bool(true_moved[target])}


def motion_quality(xyz: np.ndarray, true_xyz: np.ndarray) -> dict:
    """The target's table path against the true path, frame by frame: mean error [m], share of frames within
    :data:`ON_PATH_M`, and the path-length ratio (video / truth; 1 = as much motion, 0 = a frozen cube)."""
    a, b = np.asarray(xyz, float)[:, :2], np.asarray(true_xyz, float)[:, :2]
    err = np.linalg.norm(a - b, axis=1)
    def length(p):  # of the 5-frame median path (the probe's frame-to-frame noise is not motion)
        p = np.stack([np.median(p[max(i - 2, 0):i + 3], axis=0) for i in range(len(p))])
        return float(np.linalg.norm(np.diff(p, axis=0), axis=1).sum())

    true_len = length(b)
    return {"track_error_m": float(err.mean()), "on_path_share": float((err < ON_PATH_M).mean()),
            "path_length_ratio": None if true_len < MOVED_M else length(a) / true_len}
