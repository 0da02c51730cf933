"""How legible a SimDROID scene is at the world model's resolution: cube size in pixels and goal visibility.

Usage:
    python -m benchmarks.fidelity.legibility                      # both scenes, 30 layouts per task family
    python -m benchmarks.fidelity.legibility --quick              # 4 layouts per family

A world model and a judge can only be as faithful as what the pixels carry.  For every layout (seeded reset of
each task family) and for the goal state of its task (the target cube in the bowl, on the pad, on the base cube)
this measures, in each exterior view at ``--image-size`` (64):

* **span** -- the cube's extent in pixels: the smaller side of the bounding box of its eight corners projected
  through the compiled MuJoCo camera (occlusion ignored), for every cube of the layout and for the target cube in
  its goal pose;
* **goal visibility** -- MuJoCo's segmentation render of the goal state: pixels of the target cube and of what it
  must be in or on (bowl, pad, base cube) that are seen.  The goal counts as visible in a view when both show at
  least :data:`MIN_VISIBLE_PX` pixels, and the scene passes when every goal is visible in at least one view.

The targets (issue "Outcome fidelity"): every cube spans at least :data:`MIN_SPAN_PX` pixels in each exterior view,
and every goal is visible in at least one.  Writes ``benchmarks/results/legibility.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import itertools
import json
from typing import Any

import numpy as np

from ..common.results_path import out_help, results_path

#: Smallest cube extent [px] a 64x64 exterior view must give (the legibility target).
MIN_SPAN_PX = 8.0
#: Pixels of each object of a goal relation that must be seen for the relation to count as visible in a view.
MIN_VISIBLE_PX = 12
EXTERIOR_CAMERAS = ("exterior_1", "exterior_2")


def camera_projector(model, data, camera: str, image_size: int):
    """A function world points (N, 3) -> pixel (column, row) (N, 2) of MuJoCo camera ``camera``."""
    cid = model.camera(camera).id
    pos, rot = data.cam_xpos[cid].copy(), data.cam_xmat[cid].reshape(3, 3).copy()  # columns: right, up, backwards
    f = 0.5 * image_size / np.tan(np.radians(model.cam_fovy[cid]) / 2)

    def project(points: np.ndarray) -> np.ndarray:
        cam = (np.asarray(points, float) - pos) @ rot  # (N, 3) in the camera frame; forward is -z
        depth = -cam[:, 2]
        return np.stack([0.5 * image_size + f * cam[:, 0] / depth, 0.5 * image_size - f * cam[:, 1] / depth], 1)

    return project


def cube_corners(centre: np.ndarray, quat_wxyz: np.ndarray, size: float) -> np.ndarray:
    """The eight corners (8, 3) of a cube of edge ``size`` at ``centre`` with orientation ``quat_wxyz``."""
    import mujoco

    rot = np.zeros(9)
    mujoco.mju_quat2Mat(rot, np.asarray(quat_wxyz, float))
    h = size / 2
    local = np.array(list(itertools.product((-h, h), repeat=3)))
    return np.asarray(centre, float) + local @ rot.reshape(3, 3).T


def span_px(project, corners: np.ndarray) -> float:
    """The smaller side [px] of the projected bounding box of ``corners``."""
    uv = project(corners)
    return float(np.min(uv.max(0) - uv.min(0)))


def goal_pose(env) -> np.ndarray:
    """Where the target cube's centre is when the task succeeds: in the bowl, on the pad, on the base cube."""
    sc, t = env.scene, env.spec_task
    if t.family == "put_in_bowl":
        c = env.data.xpos[env.h.bowl_body]
        return np.array([c[0], c[1], 0.006 + sc.cube_size / 2])
    if t.family == "push_to_pad":
        c = env.data.xpos[env.h.pad_body]
        return np.array([c[0], c[1], sc.cube_size / 2])
    base = env.cube_position(t.base)
    return np.array([base[0], base[1], base[2] + sc.cube_size])


def _partner_geoms(env) -> list[int]:
    t = env.spec_task
    if t.family == "put_in_bowl":
        return list(env.h.bowl_geoms)
    if t.family == "push_to_pad":
        return [env.h.pad_geom]
    return [env.h.cube_geom[t.base]]


def measure_layout(env, renderer, seed: int, family: str) -> dict[str, Any]:
    """Spans of every cube at reset and of the target in its goal pose, and the goal's visible pixels, per view."""
    import mujoco

    env.reset(seed=seed, options={"task": family})
    m, d, sc, t = env.model, env.data, env.scene, env.spec_task
    size = renderer.height
    projectors = {c: camera_projector(m, d, c, size) for c in EXTERIOR_CAMERAS}
    spans = {c: [span_px(p, cube_corners(env.cube_position(i), env.cube_quat(i), sc.cube_size))
                 for i in range(sc.num_cubes)] for c, p in projectors.items()}
    # the goal state: the target cube moved (not simulated) to where success puts it, the arm where it is
    saved = d.qpos.copy()
    adr = env.h.cube_qpos[t.target]
    d.qpos[adr:adr + 3] = goal_pose(env)
    mujoco.mj_forward(m, d)
    goal_spans = {c: span_px(p, cube_corners(env.cube_position(t.target), env.cube_quat(t.target), sc.cube_size))
                  for c, p in projectors.items()}
    visible = {}
    renderer.enable_segmentation_rendering()
    try:
        for c in EXTERIOR_CAMERAS:
            renderer.update_scene(d, camera=c)
            seg = renderer.render()
            geoms = np.where(seg[..., 1] == int(mujoco.mjtObj.mjOBJ_GEOM), seg[..., 0], -1)
            visible[c] = {"target": int(np.sum(geoms == env.h.cube_geom[t.target])),
                          "partner": int(np.isin(geoms, _partner_geoms(env)).sum())}
    finally:
        renderer.disable_segmentation_rendering()
        d.qpos[:] = saved
        mujoco.mj_forward(m, d)
    goal_visible = any(v["target"] >= MIN_VISIBLE_PX and v["partner"] >= MIN_VISIBLE_PX for v in visible.values())
    return {"seed": seed, "family": family, "spans": spans, "goal_spans": goal_spans, "goal_visible_px": visible,
            "goal_visible": goal_visible}


def measure_scene(scene: str, layouts: int, image_size: int = 64, seed0: int = 0) -> dict[str, Any]:
    """:func:`measure_layout` over ``layouts`` seeds per task family; the summary and every row."""
    import mujoco

    from neuralsim.envs.sim_droid import TASK_FAMILIES, SimDROIDEnv

    env = SimDROIDEnv(image_size=image_size, reward_fn=None, scene=scene)
    renderer = mujoco.Renderer(env.model, image_size, image_size)
    try:
        rows = [measure_layout(env, renderer, seed0 + i, fam) for fam in TASK_FAMILIES for i in range(layouts)]
    finally:
        renderer.close()
        env.close()
    start = np.array([[r["spans"][c] for c in EXTERIOR_CAMERAS] for r in rows])  # (rows, views, cubes)
    goal = np.array([[r["goal_spans"][c] for c in EXTERIOR_CAMERAS] for r in rows])  # (rows, views)
    per_family = {fam: float(np.mean([r["goal_visible"] for r in rows if r["family"] == fam])) for fam in TASK_FAMILIES}
    smallest = float(min(start.min(), goal.min()))
    return {
        "scene": scene, "image_size": image_size, "layouts_per_family": layouts,
        "min_span_px": smallest, "median_span_px": float(np.median(start)),
        "min_span_px_per_view": {c: float(min(start[:, v].min(), goal[:, v].min()))
                                 for v, c in enumerate(EXTERIOR_CAMERAS)},
        "min_goal_span_px": float(goal.min()),
        "goal_visible_share": per_family,
        "passes": bool(smallest >= MIN_SPAN_PX and all(v == 1.0 for v in per_family.values())),
        "rows": rows,
    }


def format_table(reports: list[dict[str, Any]]) -> str:
    lines = [f"{'scene':10s} {'min span':>9s} {'median':>7s} {'goal min':>9s}  goal visible in a view "
             f"(bowl / pad / stack)   target >= {MIN_SPAN_PX:g} px, every goal visible"]
    for r in reports:
        vis = " / ".join(f"{100 * v:.0f}%" for v in r["goal_visible_share"].values())
        lines.append(f"{r['scene']:10s} {r['min_span_px']:7.1f}px {r['median_span_px']:5.1f}px "
                     f"{r['min_goal_span_px']:7.1f}px  {vis:35s} {'pass' if r['passes'] else 'FAIL'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.fidelity.legibility", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenes", default="classic,legible", help="comma-separated scenes (default %(default)s)")
    p.add_argument("--layouts", type=int, default=30, help="seeded layouts per task family (default %(default)s)")
    p.add_argument("--image-size", dest="image_size", type=int, default=64, help="view side in pixels (default 64)")
    p.add_argument("--quick", action="store_true", help="4 layouts per family")
    p.add_argument("--out", default=None, help=out_help("legibility"))
    a = p.parse_args(argv)
    from neuralsim.envs.scene import SCENES

    scenes = [s.strip() for s in a.scenes.split(",") if s.strip()]
    bad = [s for s in scenes if s not in SCENES]
    if bad or not scenes:
        p.error(f"--scenes: unknown {bad or scenes}; choose from {sorted(SCENES)}")
    if a.layouts < 1:
        p.error(f"--layouts must be >= 1, got {a.layouts}")
    layouts = 4 if a.quick else a.layouts
    reports = [measure_scene(s, layouts, a.image_size) for s in scenes]
    print(format_table(reports))
    out = results_path("legibility", a.quick, a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"min_span_px_target": MIN_SPAN_PX, "min_visible_px": MIN_VISIBLE_PX,
                               "scenes": reports}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
