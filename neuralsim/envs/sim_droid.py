"""``SimDROID-v0``: a MuJoCo Franka Panda tabletop with DROID's spaces, controller and ground truth.

It is the data source of the world model, its ground-truth twin and the "real world" every benchmark
correlates against.  Spaces and option names are the ones ``NeuralDROID-v0`` uses (see
``docs/ARCHITECTURE.md``, "Environments").

Controller (DROID's, measured on the real sample): a normalised joint velocity ``v`` in [-1, 1] sets
a joint target ``q + 0.2 v`` that a joint impedance controller tracks over the 1/15 s step.  Here
the impedance controller is a computed-torque PD law ``tau = M(q) (kp (q_target - q) - kd qdot)``
(gravity is compensated by the model), with gains tuned so that a steady command realises
``REALISED_STEP_PER_V * v`` per step, as the real arm does (~0.053 v of the 0.2 v asked for).

Task families (``TASK_FAMILIES``): put a cube in the bowl, push a cube onto the yellow pad, stack a
cube on another.  Colours, object poses and which cube is the target come from the seed.

Distributions (``distribution=``): ``"train"`` (default) draws cube colours from :data:`COLORS` and
cube centres from :data:`CUBE_REGION`, the ranges the world model's dataset uses; ``"ood"`` draws
colours from :data:`OOD_COLORS` (none of them in the training palette) and puts the target cube
outside :data:`CUBE_REGION` (at least :data:`OOD_MARGIN` beyond it, within :data:`OOD_TARGET_REGION`),
for the out-of-distribution fidelity split.

Ground truth in ``info``: object poses, contacts, grasped object, success, and the RoboWorld rubric
level of the episode so far: 5 success; 4 the target was touched or grasped but the goal is not
reached; 2 the gripper came within a few centimetres of the target; 0 otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from .. import kinematics as K
from ..episode import VIEW_NAMES, Episode, collage
from ..rewards import make_reward_fn, reward_from_result
from . import scene as S
from .horizon import HorizonFromMake

TASK_FAMILIES = ("put_in_bowl", "push_to_pad", "stack")

#: Named cube colours (RGBA); blue and yellow are kept for the bowl and the pad.
COLORS = {
    "red": (0.85, 0.10, 0.10, 1.0),
    "green": (0.10, 0.65, 0.20, 1.0),
    "orange": (1.00, 0.50, 0.05, 1.0),
    "purple": (0.50, 0.15, 0.70, 1.0),
    "white": (0.95, 0.95, 0.95, 1.0),
    "black": (0.08, 0.08, 0.08, 1.0),
    "pink": (1.00, 0.45, 0.70, 1.0),
    "cyan": (0.10, 0.80, 0.80, 1.0),
}

#: Cube colours of ``distribution="ood"``: none is in :data:`COLORS`, none is the bowl's blue, the pad's
#: yellow or the table's brown.
OOD_COLORS = {
    "grey": (0.50, 0.50, 0.50, 1.0),
    "olive": (0.50, 0.50, 0.10, 1.0),
    "maroon": (0.45, 0.05, 0.12, 1.0),
    "teal": (0.00, 0.45, 0.45, 1.0),
    "lavender": (0.75, 0.62, 0.95, 1.0),
}
_ALL_COLORS = {**COLORS, **OOD_COLORS}

DISTRIBUTIONS = ("train", "ood")
#: The classic scene's cube regions (each scene's own are :class:`~neuralsim.envs.scene.SceneConfig` fields):
#: where cube centres are drawn in the training distribution, ((x low, x high), (y low, y high)) [m]; for
#: ``distribution="ood"`` the box the target cube's centre lies in, outside ``CUBE_REGION`` grown by ``OOD_MARGIN``.
CUBE_REGION = S.CLASSIC.cube_region
OOD_TARGET_REGION = S.CLASSIC.ood_target_region
OOD_MARGIN = S.CLASSIC.ood_margin

#: Joint step realised per 1/15 s per unit of normalised velocity command, for a steady command.
#: Real DROID (least squares of observed joint step on ``action.joint_velocity`` over the 11 episodes
#: in shared/data/droid_real, all joints): 0.0527 (per joint 0.043-0.062).  SimDROID: 0.0526.
REALISED_STEP_PER_V = 0.0527
#: Gains of the computed-torque impedance law ``qddot* = kp (q_target - q) - kd qdot`` [1/s^2, 1/s].
#: kd sets how fast the arm follows (first step already realises ~85% of the steady step); kp was
#: tuned (kp in {260, 275, 290} -> 0.0500, 0.0526, 0.0550 rad per unit v) to match the real arm.
PD_KD = 60.0
PD_KP = 275.0

#: How far behind the target cube's face [m] (away from the pad) the scripted pusher comes down.
PUSH_START_BEHIND = 0.05

#: Distance [m] from the gripper's tool point to the target cube's centre that counts as "approached".
APPROACH_DISTANCE = 0.06

ACTION_MODES = ("joint_velocity", "joint_position")

#: Bounds of ``cartesian_position``: the Panda's reach (0.855 m + flange) and Euler angles in [-pi, pi].
CARTESIAN_LOW = np.array([-1.2, -1.2, -0.6, -np.pi, -np.pi, -np.pi], np.float32)
CARTESIAN_HIGH = np.array([1.2, 1.2, 1.6, np.pi, np.pi, np.pi], np.float32)


def droid_spaces(image_size: int, action_mode: str) -> tuple[spaces.Dict, spaces.Box]:
    """The observation and action spaces both DROID envs share (DROID's key names; images ``image_size``
    square; actions 7 joint velocities in [-1, 1] or 7 joint positions within the limits, then the gripper
    in [0, 1])."""
    img = spaces.Box(0, 255, (image_size, image_size, 3), np.uint8)
    obs = spaces.Dict({
        "exterior_image_1_left": img,
        "exterior_image_2_left": img,
        "wrist_image_left": img,
        "joint_position": spaces.Box(K.JOINT_LIMITS_LOW.astype(np.float32), K.JOINT_LIMITS_HIGH.astype(np.float32),
                                     dtype=np.float32),
        "gripper_position": spaces.Box(0.0, 1.0, (1,), np.float32),
        "cartesian_position": spaces.Box(CARTESIAN_LOW, CARTESIAN_HIGH, dtype=np.float32),
    })
    if action_mode == "joint_velocity":
        act = spaces.Box(np.array([-1.0] * 7 + [0.0], np.float32), np.ones(8, np.float32))
    else:
        act = spaces.Box(np.append(K.JOINT_LIMITS_LOW, 0.0).astype(np.float32),
                         np.append(K.JOINT_LIMITS_HIGH, 1.0).astype(np.float32))
    return obs, act


def instruction_for(task: str, target: str, base: str | None = None) -> str:
    """The language instruction of an episode."""
    if task == "put_in_bowl":
        return f"put the {target} cube in the blue bowl"
    if task == "push_to_pad":
        return f"push the {target} cube onto the yellow pad"
    if task == "stack":
        return f"stack the {target} cube on the {base} cube"
    raise ValueError(f"unknown task family {task!r}; expected one of {TASK_FAMILIES}")


@dataclass
class TaskSpec:
    """What one episode asks for: family, colours, which cube is the target (and base for stacking)."""

    family: str
    colors: tuple[str, ...]
    target: int = 0
    base: int | None = None

    @property
    def instruction(self) -> str:
        base = None if self.base is None else self.colors[self.base]
        return instruction_for(self.family, self.colors[self.target], base)


class SimDROIDEnv(HorizonFromMake, gym.Env):
    """MuJoCo Franka Panda tabletop with DROID's action/observation conventions and ground truth.

    ## Description
    A Franka Panda with a parallel gripper on a table holding three coloured cubes, a blue bowl and a
    yellow target pad; two fixed exterior cameras and a wrist camera.  ``scene`` sets the sizes and the
    cameras (:class:`~neuralsim.envs.scene.SceneConfig`): ``"classic"`` (``SimDROID-v0``) has 5 cm cubes
    seen through 60 deg side cameras, 3-4 pixels wide in a 64x64 exterior view; ``"legible"``
    (``SimDROID-v1``) has 6 cm cubes on a compact workspace seen from high beside it through 18.5 deg
    cameras, at least 8 pixels wide in each exterior view wherever a task puts them.  Each episode draws a task
    family (``put_in_bowl``, ``push_to_pad``, ``stack``), colours and poses from the seed and states it
    as a language instruction (``info["instruction"]``).

    ## Action Space
    ``Box(low=[-1]*7 + [0], high=[1]*8)`` in the default ``action_mode="joint_velocity"``:

    | index | meaning                              | range   | unit / effect                          |
    |-------|--------------------------------------|---------|----------------------------------------|
    | 0-6   | normalised joint velocity, joints 1-7 | [-1, 1] | target ``q + 0.2 v`` rad per 1/15 s; realised ~0.053 v |
    | 7     | gripper position                     | [0, 1]  | 0 open (8 cm), 1 closed                 |

    ``action_mode="joint_position"``: indices 0-6 are absolute joint targets within the datasheet limits
    (the step towards them is capped at 0.2 rad per 1/15 s).  Finite out-of-range actions are clipped;
    NaN/inf or a wrong shape raise ``ValueError``.

    ## Observation Space
    ``Dict`` with DROID's names: ``exterior_image_1_left``, ``exterior_image_2_left``,
    ``wrist_image_left`` (uint8, ``image_size`` x ``image_size`` x 3); ``joint_position`` (7, rad);
    ``gripper_position`` (1, 0 open ... 1 closed); ``cartesian_position`` (6: flange xyz [m] +
    extrinsic XYZ Euler [rad], forward kinematics of ``joint_position``).

    ## Rewards
    0 on every step but the last; when the episode terminates or truncates, ``reward_fn`` scores the
    whole episode.  The default ``"ground_truth"`` gives the rubric level (0, 2, 4 or 5).  With a judge, its
    judgement goes to ``info["judgement"]``; a judge failure -- an exception, or a judgement with no score (a VLM
    judge whose server is unreachable) -- gives NaN and ``info["judgement_error"]``, the error as a string, never
    an exception.

    ## Episode End
    Truncation at ``max_episode_steps``.  Made by ``gym.make`` the env takes its ``TimeLimit``'s horizon (150,
    10 s at 15 Hz, unless ``gym.make(..., max_episode_steps=N)``), so the episode is scored on the step the
    wrapper truncates (:mod:`neuralsim.envs.horizon`); a ``TimeLimit`` added by hand is invisible to the env,
    give it the same ``max_episode_steps``.  Termination only with
    ``terminate_on_success=True``, when the task succeeds.

    ## Info (ground truth)
    ``task``, ``instruction``, ``target``, ``object_poses`` (name -> xyz + wxyz quaternion),
    ``tcp_position``, ``target_distance``, ``contacts`` (named pairs), ``grasped_object`` (held between both
    fingers), ``touched_object`` (the first cube, in scene order, touching any part of the robot), ``success``,
    ``rubric_level`` (5 success; 4 target touched or grasped; 2 gripper within 6 cm; 0 otherwise -
    the best level reached so far unless the goal holds now).

    ## Arguments
    render_mode: ``"rgb_array"`` makes ``render()`` return the 2x2 camera collage.
    image_size: side of the square camera images (the world model uses 64).
    action_mode: ``"joint_velocity"`` (DROID default) or ``"joint_position"``.
    task: a family of ``TASK_FAMILIES`` or None to draw one from the seed on every reset
        (``reset(options={"task": ...})`` overrides it for one episode).
    distribution: ``"train"`` (colours and cube positions of the training data) or ``"ood"`` (colours
        from ``OOD_COLORS``, target cube outside ``CUBE_REGION``); see the module docstring.
    terminate_on_success: end the episode (``terminated``) as soon as the task succeeds.
    reward_fn: ``"ground_truth"``, a reward-function name for :func:`neuralsim.rewards.make_reward_fn`
        (e.g. ``"roboworld:offline"``), a callable ``fn(Episode)``, or None (always 0).
    max_episode_steps: horizon used for ``truncated`` and the reward; None: no horizon.  ``gym.make`` replaces
        it with its ``TimeLimit``'s (see Episode End).

    scene: ``"classic"`` (default), ``"legible"`` or a :class:`~neuralsim.envs.scene.SceneConfig`.

    ## Version History
    v1: the legible scene (``scene="legible"``): 6 cm cubes, a smaller bowl (10 cm inside) and pad (11 cm), a
        compact layout and exterior cameras that frame it (18.5 deg field of view, from high beside the
        workspace).  Spaces, tasks, controller and rubric are v0's.
    v0: first release (``distribution="ood"`` added later; the default layouts are unchanged).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": K.CONTROL_HZ}

    def __init__(self, render_mode: str | None = None, image_size: int = 64, action_mode: str = "joint_velocity",
                 task: str | None = None, terminate_on_success: bool = False,
                 reward_fn: str | Callable | None = "ground_truth", max_episode_steps: int | None = None,
                 distribution: str = "train", scene: str | S.SceneConfig = "classic"):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        if action_mode not in ACTION_MODES:
            raise ValueError(f"action_mode must be one of {ACTION_MODES}, got {action_mode!r}")
        if task is not None and task not in TASK_FAMILIES:
            raise ValueError(f"task must be one of {TASK_FAMILIES} or None, got {task!r}")
        if not 16 <= int(image_size) <= 256:
            raise ValueError(f"image_size must be in [16, 256], got {image_size}")
        if distribution not in DISTRIBUTIONS:
            raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, got {distribution!r}")
        self.distribution = distribution
        self.scene = S.get_scene(scene)
        self.render_mode, self.image_size, self.action_mode = render_mode, int(image_size), action_mode
        self.task_family, self.terminate_on_success = task, terminate_on_success
        self.max_episode_steps = max_episode_steps
        self._reward_fn = None if reward_fn == "ground_truth" else make_reward_fn(reward_fn)
        self._ground_truth_reward = reward_fn == "ground_truth"

        self.model, self.data, self.h = S.load_model(self.scene)
        self._home = self.model.key("home").id
        left = {self.model.body("left_finger").id}
        right = {self.model.body("right_finger").id}
        robot_bodies = {b for b in range(self.model.nbody) if self._is_robot_body(b)}
        self._left_geoms = {g for g in self.h.finger_geoms if self.model.geom_bodyid[g] in left}
        self._right_geoms = {g for g in self.h.finger_geoms if self.model.geom_bodyid[g] in right}
        self._robot_geoms = {g for g in range(self.model.ngeom) if self.model.geom_bodyid[g] in robot_bodies
                             and self.model.geom_contype[g]}
        self._renderer = None
        self._arm_damping = self.model.dof_damping[self.h.arm_dof].copy()
        self._gravcomp = self.model.body_gravcomp.copy()

        self.observation_space, self.action_space = droid_spaces(self.image_size, action_mode)
        self.spec_task: TaskSpec | None = None
        self._steps = 0
        self._best_level = 0
        self._record: dict[str, list] = {}

    def _set_horizon(self, steps: int) -> None:
        self.max_episode_steps = steps

    @property
    def env_id(self) -> str:
        """The registered id of this env's scene (``SimDROID-v0`` classic, ``SimDROID-v1`` legible)."""
        return self.scene.env_id

    # ------------------------------------------------------------------ helpers
    def _is_robot_body(self, b: int) -> bool:
        name = self.model.body(b).name
        return name.startswith("link") or name in ("hand", "left_finger", "right_finger")

    def _render_views(self) -> dict[str, np.ndarray]:
        import mujoco

        if self._renderer is None:
            self._renderer = mujoco.Renderer(self.model, self.image_size, self.image_size)
        out = {}
        for view, cam in zip(VIEW_NAMES, S.CAMERA_NAMES):
            self._renderer.update_scene(self.data, camera=cam)
            out[view] = self._renderer.render().copy()
        return out

    def _joint_position(self) -> np.ndarray:
        return self.data.qpos[self.h.arm_qpos].copy()

    def _gripper_position(self) -> float:
        opening = float(np.mean(self.data.qpos[self.h.finger_qpos]))
        return float(np.clip(1.0 - opening / S.FINGER_OPEN, 0.0, 1.0))

    def _obs(self, views: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        q = self._joint_position()
        obs = {v: views[v] for v in VIEW_NAMES}
        obs["joint_position"] = np.clip(q, K.JOINT_LIMITS_LOW, K.JOINT_LIMITS_HIGH).astype(np.float32)
        obs["gripper_position"] = np.array([self._gripper_position()], np.float32)
        obs["cartesian_position"] = K.forward_kinematics(q).astype(np.float32)
        return obs

    def cube_position(self, i: int) -> np.ndarray:
        return self.data.xpos[self.h.cube_body[i]].copy()

    def cube_quat(self, i: int) -> np.ndarray:
        return self.data.xquat[self.h.cube_body[i]].copy()

    def cube_yaw(self, i: int) -> float:
        """Yaw [rad] of cube ``i`` about the vertical, from its quaternion."""
        w, x, y, z = self.data.xquat[self.h.cube_body[i]]
        return float(np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))

    def finger_yaw(self) -> float:
        """Yaw [rad] of the finger axis (the tool site's y axis) about the vertical."""
        R = self.data.site_xmat[self.h.tcp_site].reshape(3, 3)
        return float(np.arctan2(R[1, 1], R[0, 1]))

    def tcp_position(self) -> np.ndarray:
        return self.data.site_xpos[self.h.tcp_site].copy()

    def _contacts(self) -> tuple[list[tuple[str, str]], set[int], set[int], set[int]]:
        """(named contact pairs, cubes touched by the left/right finger, cubes touched by the robot)."""
        named, left, right, robot = [], set(), set(), set()
        cube_of = {g: i for i, g in enumerate(self.h.cube_geom)}
        for c in self.data.contact[: self.data.ncon]:
            g1, g2 = int(c.geom1), int(c.geom2)
            named.append((self._geom_label(g1), self._geom_label(g2)))
            for a, b in ((g1, g2), (g2, g1)):
                if b in cube_of:
                    if a in self._left_geoms:
                        left.add(cube_of[b])
                    if a in self._right_geoms:
                        right.add(cube_of[b])
                    if a in self._robot_geoms:
                        robot.add(cube_of[b])
        return named, left, right, robot

    def _geom_label(self, g: int) -> str:
        name = self.model.geom(g).name
        if name:
            return name.rstrip("0123456789") if name.startswith("bowl_wall") else name
        return self.model.body(self.model.geom_bodyid[g]).name

    def _success(self, grasped: set[int]) -> bool:
        t, sc = self.spec_task, self.scene
        p = self.cube_position(t.target)
        if t.target in grasped:
            return False
        if t.family == "put_in_bowl":
            c = self.data.xpos[self.h.bowl_body]
            return bool(np.all(np.abs(p[:2] - c[:2]) < sc.bowl_half) and p[2] < sc.bowl_wall_h + 0.01)
        if t.family == "push_to_pad":
            c = self.data.xpos[self.h.pad_body]
            return bool(np.all(np.abs(p[:2] - c[:2]) < sc.pad_half) and p[2] < sc.cube_size)
        base = self.cube_position(t.base)
        dz = p[2] - base[2]
        return bool(np.linalg.norm(p[:2] - base[:2]) < 0.6 * sc.cube_size
                    and 0.8 * sc.cube_size < dz < 1.2 * sc.cube_size and base[2] < sc.cube_size)

    def ground_truth(self) -> dict[str, Any]:
        """Object poses, contacts, grasped object, success and the rubric level so far."""
        t = self.spec_task
        named, left, right, robot = self._contacts()
        grasp = left & right if self._gripper_position() > 0.2 else set()
        success = self._success(grasp)
        tcp = self.tcp_position()
        dist = float(np.linalg.norm(tcp - self.cube_position(t.target)))
        touched = t.target in (robot if t.family == "push_to_pad" else (left | right))
        level = 4 if touched else (2 if dist < APPROACH_DISTANCE else 0)
        self._best_level = max(self._best_level, level)
        names = [t.colors[i] + "_cube" for i in range(self.scene.num_cubes)]
        poses = {n: np.concatenate([self.cube_position(i), self.cube_quat(i)]) for i, n in enumerate(names)}
        poses["bowl"] = np.concatenate([self.data.xpos[self.h.bowl_body], [1.0, 0, 0, 0]])
        poses["pad"] = np.concatenate([self.data.xpos[self.h.pad_body], [1.0, 0, 0, 0]])
        return {
            "task": t.family,
            "instruction": t.instruction,
            "target": names[t.target],
            "base": None if t.base is None else names[t.base],
            "object_poses": poses,
            "tcp_position": tcp,
            "target_distance": dist,
            "contacts": named,
            "grasped_object": names[min(grasp)] if grasp else None,
            "touched_object": names[min(robot)] if robot else None,
            "success": success,
            "rubric_level": 5 if success else self._best_level,
        }

    # ------------------------------------------------------------------ reset
    def _sample_task(self, rng: np.random.Generator, family: str | None) -> TaskSpec:
        family = family or self.task_family or TASK_FAMILIES[int(rng.integers(len(TASK_FAMILIES)))]
        if family not in TASK_FAMILIES:
            raise ValueError(f"options['task'] must be one of {TASK_FAMILIES}, got {family!r}")
        palette = COLORS if self.distribution == "train" else OOD_COLORS
        colors = tuple(rng.choice(list(palette), size=self.scene.num_cubes, replace=False).tolist())
        return TaskSpec(family, colors, target=0, base=1 if family == "stack" else None)

    def _place_objects(self, rng: np.random.Generator) -> None:
        """Seeded layout: bowl and pad on opposite sides, the cubes apart from each other and them.

        For pushing, the corridor from behind the target to the pad is kept free of distractors, so
        the task is always feasible (the scripted expert does not plan around obstacles).  A draw whose
        cubes do not fit is redrawn, bowl and pad included (the classic scene's draws always fit).
        """
        m, d, h, sc = self.model, self.data, self.h, self.scene
        for _ in range(100):
            layout = self._draw_layout(rng)
            if layout is not None:
                break
        else:  # pragma: no cover - every scene's region fits its cubes in most draws
            raise RuntimeError(f"could not place the cubes of scene {sc.name!r} without overlap")
        bowl, pad, cubes = layout
        m.body_pos[h.bowl_body] = bowl
        m.body_pos[h.pad_body] = pad
        for i, (xy, yaw) in enumerate(cubes):
            adr = h.cube_qpos[i]
            d.qpos[adr:adr + 3] = [xy[0], xy[1], S.TABLE_HEIGHT + sc.cube_size / 2]
            d.qpos[adr + 3:adr + 7] = [np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]

    def _draw_layout(self, rng: np.random.Generator):
        """One draw of (bowl xyz, pad xyz, [(cube xy, yaw)]), or None when the cubes do not fit."""
        sc = self.scene
        (fx0, fx1), (fy0, fy1) = sc.fixture_x, sc.fixture_abs_y
        side = 1.0 if rng.random() < 0.5 else -1.0
        bowl = np.array([rng.uniform(fx0, fx1), side * rng.uniform(-fy1, -fy0), S.TABLE_HEIGHT])
        pad = np.array([rng.uniform(fx0, fx1), side * rng.uniform(fy0, fy1), S.TABLE_HEIGHT])
        push = self.spec_task.family == "push_to_pad"
        placed: list[np.ndarray] = []
        cubes = []
        for i in range(sc.num_cubes):
            for _ in range(2000):
                xy = self._draw_cube_xy(rng, i)
                ok = all(np.linalg.norm(xy - p) > sc.cube_spacing for p in placed) and \
                    np.max(np.abs(xy - bowl[:2])) > sc.bowl_half + sc.bowl_clearance and \
                    np.max(np.abs(xy - pad[:2])) > sc.pad_half + sc.pad_clearance
                if ok and push and i == 0 and sc.push_start_clearance is not None:
                    u = (pad[:2] - xy) / np.linalg.norm(pad[:2] - xy)
                    start = xy - (sc.cube_size / 2 + PUSH_START_BEHIND) * u
                    ok = np.max(np.abs(start - bowl[:2])) > sc.bowl_outer_half + sc.push_start_clearance
                if ok and push and i > 0:
                    target = placed[0]
                    u = (pad[:2] - target) / np.linalg.norm(pad[:2] - target)
                    rel = xy - (target - 0.1 * u)
                    along = float(np.dot(rel, u))
                    across = abs(float(u[0] * rel[1] - u[1] * rel[0]))
                    ok = not (-0.05 < along < np.linalg.norm(pad[:2] - target) + 0.15 and across < sc.push_corridor)
                if ok:
                    break
            else:
                return None
            placed.append(xy)
            cubes.append((xy, rng.uniform(-np.pi / 4, np.pi / 4)))
        return bowl, pad, cubes

    def _draw_cube_xy(self, rng: np.random.Generator, i: int) -> np.ndarray:
        """A candidate centre for cube ``i``: in the scene's cube region, or outside it for the OOD target cube."""
        sc = self.scene
        if self.distribution == "ood" and i == self.spec_task.target:
            (x0, x1), (y0, y1) = sc.cube_region
            m = sc.ood_margin
            while True:
                xy = np.array([rng.uniform(*sc.ood_target_region[0]), rng.uniform(*sc.ood_target_region[1])])
                if not (x0 - m <= xy[0] <= x1 + m and y0 - m <= xy[1] <= y1 + m):
                    return xy
        return np.array([rng.uniform(*sc.cube_region[0]), rng.uniform(*sc.cube_region[1])])

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        import mujoco

        super().reset(seed=seed)
        options = dict(options or {})
        unknown = set(options) - {"task", "joint_position"}
        if unknown:
            raise ValueError(f"unknown reset options {sorted(unknown)}; SimDROID accepts 'task' and 'joint_position'")
        rng = self.np_random
        self.spec_task = self._sample_task(rng, options.get("task"))
        mujoco.mj_resetDataKeyframe(self.model, self.data, self._home)
        if "joint_position" in options:
            q0 = np.asarray(options["joint_position"], float)
            if q0.shape != (7,) or not np.all(np.isfinite(q0)):
                raise ValueError(f"options['joint_position'] must be 7 finite numbers, got {q0!r}")
            self.data.qpos[self.h.arm_qpos] = np.clip(q0, K.JOINT_LIMITS_LOW, K.JOINT_LIMITS_HIGH)
        for i, c in enumerate(self.spec_task.colors):
            self.model.geom_rgba[self.h.cube_geom[i]] = _ALL_COLORS[c]
        self._place_objects(rng)
        self._target = self._joint_position()
        self.data.ctrl[:] = S.FINGER_OPEN
        mujoco.mj_forward(self.model, self.data)
        # let the cubes settle on the table with the arm held still
        for _ in range(4):
            self._physics_step()
        self._steps, self._best_level = 0, 0
        views = self._render_views()
        obs = self._obs(views)
        info = self.ground_truth()
        self._record = {"frames": [views], "joint_position": [obs["joint_position"]],
                        "gripper_position": [obs["gripper_position"]],
                        "cartesian_position": [obs["cartesian_position"]], "actions": []}
        return obs, info

    # ------------------------------------------------------------------ step
    def _physics_step(self) -> None:
        import mujoco

        m, d, h = self.model, self.data, self.h
        acc = np.zeros(m.nv)
        tau = np.zeros(m.nv)
        for _ in range(S.SUBSTEPS):
            q, qd = d.qpos[h.arm_qpos], d.qvel[h.arm_dof]
            acc[:] = 0.0
            acc[h.arm_dof] = PD_KP * (self._target - q) - PD_KD * qd
            mujoco.mj_mulM(m, d, tau, acc)
            d.qfrc_applied[:] = 0.0
            # computed torque: inertia-scaled PD + the joints' passive damping and Coriolis terms
            d.qfrc_applied[h.arm_dof] = tau[h.arm_dof] + self._arm_damping * qd + self._coriolis(d)
            mujoco.mj_step(m, d)

    def _coriolis(self, d) -> np.ndarray:
        # qfrc_bias = Coriolis/centrifugal + gravity; gravity of the arm is compensated by gravcomp,
        # whose force appears in qfrc_passive.  The difference is what the controller must cancel.
        return d.qfrc_bias[self.h.arm_dof] - d.qfrc_gravcomp[self.h.arm_dof]

    def validate_action(self, action) -> np.ndarray:
        a = np.asarray(action, dtype=np.float64)
        if a.shape != (8,):
            joints = "velocities" if self.action_mode == "joint_velocity" else "positions"
            raise ValueError(f"action must have shape (8,) (7 joint {joints} + gripper), got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"action contains NaN or inf: {a}")
        return np.clip(a, self.action_space.low, self.action_space.high)

    def step(self, action):
        if self.spec_task is None:
            raise RuntimeError("call reset() before step()")
        a = self.validate_action(action)
        q = self._joint_position()
        if self.action_mode == "joint_velocity":
            target = q + K.MAX_JOINT_DELTA * a[:7]
        else:
            target = q + np.clip(a[:7] - q, -K.MAX_JOINT_DELTA, K.MAX_JOINT_DELTA)
        self._target = np.clip(target, K.JOINT_LIMITS_LOW, K.JOINT_LIMITS_HIGH)
        self.data.ctrl[:] = S.FINGER_OPEN * (1.0 - a[7])
        self._physics_step()
        self._steps += 1
        views = self._render_views()
        obs = self._obs(views)
        info = self.ground_truth()
        rec = self._record
        rec["frames"].append(views)
        for k in ("joint_position", "gripper_position", "cartesian_position"):
            rec[k].append(obs[k])
        rec["actions"].append(a.astype(np.float32))
        terminated = bool(self.terminate_on_success and info["success"])
        truncated = bool(self.max_episode_steps is not None and self._steps >= self.max_episode_steps)
        reward = 0.0
        if terminated or truncated:
            reward = self._episode_reward(info)
        return obs, reward, terminated, truncated, info

    def _episode_reward(self, info: dict[str, Any]) -> float:
        if self._ground_truth_reward:
            return float(info["rubric_level"])
        if self._reward_fn is None:
            return 0.0
        try:
            reward, judgement = reward_from_result(self._reward_fn(self.episode()))
        except Exception as e:  # a judge failure must never lose the rollout
            info["judgement_error"] = f"{type(e).__name__}: {e}"
            return float("nan")
        info["judgement"] = judgement
        if math.isnan(reward):  # a judge that caught its own failure: a Judgement with no score and its error
            info["judgement_error"] = str(getattr(judgement, "error", None) or "the reward function gave no score")
        return reward

    # ------------------------------------------------------------------ episode / render
    def episode(self) -> Episode:
        """The episode so far as an :class:`Episode` (frames of all views, states, actions)."""
        rec = self._record
        if not rec:
            raise RuntimeError("no episode recorded yet: call reset() first")
        frames = {v: np.stack([f[v] for f in rec["frames"]]) for v in VIEW_NAMES}
        t = self.spec_task
        return Episode(
            frames=frames,
            joint_position=np.stack(rec["joint_position"]),
            gripper_position=np.stack(rec["gripper_position"]),
            cartesian_position=np.stack(rec["cartesian_position"]),
            actions=np.stack(rec["actions"]) if rec["actions"] else np.zeros((0, 8), np.float32),
            instruction=t.instruction,
            fps=K.CONTROL_HZ,
            metadata={"source": self.env_id, "task": t.family, "colors": list(t.colors),
                      "distribution": self.distribution, "scene": self.scene.name},
        )

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        if not self._record:
            raise RuntimeError("call reset() before render()")
        last = self._record["frames"][-1]
        return collage(*(last[v] for v in VIEW_NAMES))

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
