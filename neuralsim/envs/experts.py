"""Scripted experts for SimDROID: privileged, IK-driven, acting only through the 8-d DROID action.

Each step the expert picks a tool-point (``tcp``) waypoint from its phase plan, turns the pose error
into a joint step with damped least squares on MuJoCo's site Jacobian (plus a null-space pull towards
DROID's reset posture), and divides by the controller's realised step per unit command
(:data:`~neuralsim.envs.sim_droid.REALISED_STEP_PER_V`) to get DROID's normalised joint velocity.

``noise`` adds Gaussian noise (std in normalised-velocity units) to the arm command.  ``failure``
corrupts the plan in one of :data:`FAILURE_MODES` so the task should fail; whether it actually did is
the simulator's ground truth, recorded separately by the data generator:

* ``missed_grasp`` - grasp (or push) 4.5 cm beside the object;
* ``weak_grip`` - close the gripper only to touching (the scene's ``touch_grip``; 0.34 in the classic scene),
  so the cube slips out when lifted;
  for pushing: stop halfway;
* ``early_release`` - open the gripper a quarter of the way through the carry; for pushing: lift off halfway;
* ``overshoot`` - aim the placement (or push) 12 cm past the goal;
* ``wrist_tilt`` - grasp with the hand rolled 0.5 rad and yawed 45 deg, fingers on the cube's edges;
* ``oscillation`` - large joint-velocity oscillation while approaching and grasping.
"""

from __future__ import annotations

import numpy as np

from . import scene as S
from .sim_droid import PUSH_START_BEHIND, REALISED_STEP_PER_V, SimDROIDEnv

FAILURE_MODES = ("missed_grasp", "weak_grip", "early_release", "overshoot", "wrist_tilt", "oscillation")

#: Largest tool-point move [m] and rotation [rad] the expert asks for per 1/15 s step.
MAX_LINEAR_STEP = 0.022
MAX_ANGULAR_STEP = 0.12
#: Tool-point height [m] above the table while carrying.
CARRY_HEIGHT = 0.16
#: With an ``approach_yaw``, the descent to the grasp waits until the hand's yaw is this close to the grasp's [rad].
ALIGNED_YAW = np.radians(3.0)
#: Damping of the least-squares IK and gain of the null-space posture pull.
IK_DAMPING = 0.05
NULLSPACE_GAIN = 0.05
#: Finger axis relative to the push direction (0: fingers one behind the other, a narrow pusher).
PUSH_YAW_OFFSET = 0.0


def _wrap(a: float) -> float:
    return (a + np.pi) % (2 * np.pi) - np.pi


class ScriptedExpert:
    """A phase-machine expert for the three SimDROID task families.

    Args:
        env: the (unwrapped) :class:`SimDROIDEnv` it acts in; it reads the privileged state.
        noise: std of Gaussian noise added to the normalised arm command.
        failure: None or one of :data:`FAILURE_MODES`.
        seed: seed of the noise generator.
        approach_yaw: yaw offset [rad] the hand keeps on its way to a pick (put in bowl, stack), corrected above the
            cube: the descent waits until the fingers are within :data:`ALIGNED_YAW` of the grasp's yaw.  A
            recovery demonstration (the task still succeeds): it shows a policy what to do when it arrives above
            the cube misaligned, the state a cloned policy reaches when it misreads the cube's yaw far away.
    """

    def __init__(self, env: SimDROIDEnv, noise: float = 0.0, failure: str | None = None, seed: int | None = None,
                 approach_yaw: float = 0.0):
        env = getattr(env, "unwrapped", env)
        if not isinstance(env, SimDROIDEnv):
            raise TypeError(f"ScriptedExpert needs a SimDROIDEnv (it reads privileged state), got {type(env).__name__}")
        if failure is not None and failure not in FAILURE_MODES:
            raise ValueError(f"failure must be None or one of {FAILURE_MODES}, got {failure!r}")
        if not 0.0 <= noise <= 1.0:
            raise ValueError(f"noise must be in [0, 1], got {noise}")
        if not abs(approach_yaw) <= np.pi / 4:
            raise ValueError(f"approach_yaw must be within [-pi/4, pi/4] rad, got {approach_yaw}")
        if env.action_mode != "joint_velocity":
            raise ValueError("ScriptedExpert acts in action_mode='joint_velocity'")
        self.env, self.noise, self.failure, self.approach_yaw = env, float(noise), failure, float(approach_yaw)
        self.rng = np.random.default_rng(seed)
        self.done = False
        self._phase = 0
        self._timer = 0
        self._steps = 0

    # ------------------------------------------------------------------ plan
    def reset(self) -> None:
        """Plan for the episode the env was just reset to."""
        env = self.env
        if env.spec_task is None:
            raise RuntimeError("reset the env before the expert")
        self.task = env.spec_task
        self.done, self._phase, self._timer, self._steps = False, 0, 0, 0
        self._grip = 0.0
        self._yaw = self._grasp_yaw()
        self._push_dir = None
        self._replans = 0

    def _hand_rotation(self) -> np.ndarray:
        return self.env.data.site_xmat[self.env.h.tcp_site].reshape(3, 3).copy()

    def _grasp_yaw(self) -> float:
        """Yaw of the finger axis that grips the target's faces and is closest to the current hand."""
        cur = self.env.finger_yaw()
        base = self.env.cube_yaw(self.task.target)
        cands = [base + k * np.pi / 2 for k in range(-4, 5)]
        return float(min(cands, key=lambda c: abs(_wrap(c - cur))))

    def _goal_xy(self) -> np.ndarray:
        env, t = self.env, self.task
        if t.family == "put_in_bowl":
            return env.data.xpos[env.h.bowl_body][:2].copy()
        if t.family == "push_to_pad":
            return env.data.xpos[env.h.pad_body][:2].copy()
        return env.cube_position(t.base)[:2]

    def _target_rotation(self, yaw: float, roll: float = 0.0) -> np.ndarray:
        """Hand pointing down, finger axis (hand y) at ``yaw``, optionally rolled about the finger axis."""
        y = np.array([np.cos(yaw), np.sin(yaw), 0.0])
        z = np.array([0.0, 0.0, -1.0])
        x = np.cross(y, z)
        R = np.stack([x, y, z], axis=1)
        if roll:
            c, s = np.cos(roll), np.sin(roll)
            R = R @ np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])
        return R

    # ------------------------------------------------------------------ control
    def _ik_command(self, p_goal: np.ndarray, R_goal: np.ndarray, max_lin: float = MAX_LINEAR_STEP) -> np.ndarray:
        import mujoco

        env = self.env
        m, d, h = env.model, env.data, env.h
        jacp, jacr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
        mujoco.mj_jacSite(m, d, jacp, jacr, h.tcp_site)
        J = np.vstack([jacp[:, h.arm_dof], jacr[:, h.arm_dof]])
        p = d.site_xpos[h.tcp_site]
        R = self._hand_rotation()
        dp = p_goal - p
        n = np.linalg.norm(dp)
        if n > max_lin:
            dp *= max_lin / n
        dr = 0.5 * sum(np.cross(R[:, k], R_goal[:, k]) for k in range(3))
        n = np.linalg.norm(dr)
        if n > MAX_ANGULAR_STEP:
            dr *= MAX_ANGULAR_STEP / n
        err = np.concatenate([dp, dr])
        JJt = J @ J.T + IK_DAMPING ** 2 * np.eye(6)
        dq = J.T @ np.linalg.solve(JJt, err)
        q = d.qpos[h.arm_qpos]
        null = np.eye(7) - np.linalg.pinv(J) @ J
        dq += null @ (NULLSPACE_GAIN * (S.K.RESET_JOINT_POSITION - q))
        v = dq / REALISED_STEP_PER_V
        v /= max(1.0, np.max(np.abs(v)))
        return v

    def _at(self, p_goal: np.ndarray, tol: float) -> bool:
        return bool(np.linalg.norm(self.env.tcp_position() - p_goal) < tol)

    def act(self, obs=None) -> np.ndarray:
        """The next DROID action (8,): normalised joint velocities then gripper position."""
        if not hasattr(self, "task"):
            raise RuntimeError("call expert.reset() after env.reset() before act()")
        self._steps += 1
        if self.task.family == "push_to_pad":
            p_goal, R_goal, max_lin = self._push_plan()
        else:
            p_goal, R_goal, max_lin = self._pick_place_plan()
        v = self._ik_command(p_goal, R_goal, max_lin)
        if self.failure == "oscillation" and self._phase <= 2:
            v = v + 0.8 * np.sin(self._steps * 2.2) * np.array([1, -1, 1, -1, 1, -1, 1.0])
        if self.noise > 0:
            v = v + self.rng.normal(0.0, self.noise, 7)
        v = np.clip(v, -1.0, 1.0)
        return np.append(v, self._grip).astype(np.float32)

    def _advance(self, cond: bool, patience: int = 60) -> None:
        if cond:
            self._phase += 1
            self._timer = 0
        else:
            self._timer += 1
            if self._timer > patience:  # stuck: give up on this phase rather than spin forever
                self._phase += 1
                self._timer = 0

    def _pick_place_plan(self):
        env, t, f = self.env, self.task, self.failure
        cube = env.cube_position(t.target)
        roll = 0.5 if f == "wrist_tilt" else 0.0
        yaw = self._yaw + (np.pi / 4 if f == "wrist_tilt" and self._phase <= 3 else 0.0) + (
            self.approach_yaw if self._phase == 0 else 0.0)
        R = self._target_rotation(yaw, roll if self._phase <= 3 else 0.0)
        grasp_xy = cube[:2] + (0.045 * np.array([np.cos(self._yaw + np.pi / 2), np.sin(self._yaw + np.pi / 2)])
                               if f == "missed_grasp" else 0.0)
        if not hasattr(self, "_grasp_point") or self._phase == 0:
            self._grasp_point = np.array([grasp_xy[0], grasp_xy[1], env.scene.cube_size / 2 + 0.005])
        gp = self._grasp_point
        goal = self._goal_xy()
        if f == "overshoot":
            d = goal - gp[:2]
            goal = goal + 0.12 * d / (np.linalg.norm(d) + 1e-9)
        if t.family == "stack":
            place_z = env.cube_position(t.base)[2] + env.scene.cube_size + 0.004
        else:
            place_z = env.scene.cube_size / 2 + 0.03
        ph = self._phase
        if ph == 0:  # above the cube, gripper open
            p = np.array([gp[0], gp[1], CARRY_HEIGHT])
            self._grip = 0.0
            self._advance(self._at(p, 0.02) and self._timer > 2)
        elif ph == 1:  # descend (with an approach_yaw: turn to the grasp's yaw first, above the cube)
            p = gp.copy()
            turning = bool(self.approach_yaw) and abs(_wrap(self.env.finger_yaw() - yaw)) > ALIGNED_YAW
            if turning:
                p[2] = max(p[2], CARRY_HEIGHT - 0.04)
            self._advance(not turning and self._at(p, 0.008))
        elif ph == 2:  # close
            p = gp.copy()
            self._grip = env.scene.touch_grip if f == "weak_grip" else 1.0
            self._advance(self._timer >= 7)
        elif ph == 3:  # lift
            p = np.array([gp[0], gp[1], CARRY_HEIGHT])
            self._advance(self._at(p, 0.02))
        elif ph == 4:  # carry above the goal
            p = np.array([goal[0], goal[1], CARRY_HEIGHT])
            if f == "early_release":
                start = getattr(self, "_carry_start", None)
                if start is None:
                    self._carry_start = env.tcp_position()[:2]
                elif np.linalg.norm(env.tcp_position()[:2] - start) > 0.25 * np.linalg.norm(goal - start):
                    self._grip = 0.0
            self._advance(self._at(p, 0.015))
        elif ph == 5:  # lower
            p = np.array([goal[0], goal[1], place_z])
            self._advance(self._at(p, 0.01))
        elif ph == 6:  # release
            p = np.array([goal[0], goal[1], place_z])
            self._grip = 0.0
            self._advance(self._timer >= 5)
        else:  # retreat and finish
            p = np.array([goal[0], goal[1], CARRY_HEIGHT])
            if self._at(p, 0.03):
                self.done = True
        return p, R, MAX_LINEAR_STEP

    def _push_plan(self):
        env, f = self.env, self.failure
        cube = env.cube_position(self.task.target)
        pad = self._goal_xy()
        if self._push_dir is None:
            d = pad - cube[:2]
            self._push_dir = d / (np.linalg.norm(d) + 1e-9)
            self._push_start = cube[:2].copy()
            self._push_len = float(np.linalg.norm(d))
            perp = np.array([-self._push_dir[1], self._push_dir[0]])
            self._lateral = 0.06 * perp if f == "missed_grasp" else np.zeros(2)
        d = self._push_dir
        yaw = float(np.arctan2(d[1], d[0])) + PUSH_YAW_OFFSET
        R = self._target_rotation(yaw)
        self._grip = 1.0
        z_push = 0.03
        behind = env.scene.cube_size / 2 + PUSH_START_BEHIND
        goal = pad + (0.12 * d if f == "overshoot" else 0.0)
        ph = self._phase
        if ph == 0:  # above the start point behind the cube
            start = cube[:2] - behind * d + self._lateral
            p = np.array([start[0], start[1], 0.12])
            self._advance(self._at(p, 0.02) and self._timer > 2)
        elif ph == 1:  # descend behind the cube
            start = self._push_start - behind * d + self._lateral
            p = np.array([start[0], start[1], z_push])
            self._advance(self._at(p, 0.01))
        elif ph == 2:  # push: aim the tool point behind the cube along the line to the goal
            to_goal = goal - cube[:2]
            dist = float(np.linalg.norm(to_goal))
            dd = to_goal / (dist + 1e-9) if dist > 0.01 else d
            tcp = env.tcp_position()[:2]
            rel = cube[:2] - tcp
            along, across = float(np.dot(rel, dd)), float(abs(dd[0] * rel[1] - dd[1] * rel[0]))
            if not self._lateral.any() and self._replans < 3 and (along < 0.02 or across > 0.025):
                # the cube slid off the pusher: lift and come again from behind it
                self._replans += 1
                self._push_dir, self._phase, self._timer = dd, 0, 0
                self._push_start = cube[:2].copy()
                self._push_len = dist
                p = np.array([tcp[0] - 0.03 * dd[0], tcp[1] - 0.03 * dd[1], 0.12])
                return p, R, MAX_LINEAR_STEP
            aim = cube[:2] - (env.scene.cube_size / 2 + 0.012) * dd + 0.06 * dd + self._lateral
            p = np.array([aim[0], aim[1], z_push])
            pushed = float(np.dot(cube[:2] - self._push_start, d))
            stop = (f == "weak_grip" and pushed > 0.5 * self._push_len) or \
                   (f == "early_release" and pushed > 0.6 * self._push_len)
            reached = dist < 0.015 or np.dot(goal - cube[:2], d) < 0.0
            self._advance(reached or stop or (self._lateral.any() and self._timer > 25), patience=90)
            return p, R, 0.016
        else:  # lift off and finish
            tcp = env.tcp_position()
            p = np.array([tcp[0] - 0.03 * d[0], tcp[1] - 0.03 * d[1], 0.12])
            if tcp[2] > 0.10:
                self.done = True
        return p, R, MAX_LINEAR_STEP


def run_expert_episode(env: SimDROIDEnv, seed: int, task: str | None = None, noise: float = 0.0,
                       failure: str | None = None, max_steps: int = 150, settle_steps: int = 5):
    """Run one expert episode; returns (final info, number of steps)."""
    obs, info = env.reset(seed=seed, options={"task": task} if task else None)
    expert = ScriptedExpert(env, noise=noise, failure=failure, seed=seed)
    expert.reset()
    settle, steps = 0, 0
    for steps in range(1, max_steps + 1):
        obs, _, terminated, truncated, info = env.step(expert.act(obs))
        if expert.done:
            settle += 1
        if settle > settle_steps or terminated or truncated:
            break
    return info, steps
