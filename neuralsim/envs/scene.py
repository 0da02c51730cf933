"""The SimDROID MuJoCo scene: a Franka Panda on a table, coloured cubes, a bowl and a target pad.

The arm is built from the Panda meshes that ``gymnasium-robotics`` ships (low-poly collision meshes,
which render ~10x faster than the visual ones on a CPU), with its kinematic chain corrected to match
Franka's modified-DH table exactly (``neuralsim.kinematics``):

* link 6 of the shipped model is yawed by +pi/2 relative to DH (its joint 6 range is shifted by
  -pi/2 to compensate); here link 6 is the DH frame and joint 6 has the datasheet range;
* link 7 of the shipped model is yawed by +pi/4; here link 7 is the DH frame, and the hand is mounted
  at -pi/4 about the flange axis as on the real robot;
* joint ranges are Franka's datasheet values;
* a ``flange`` site sits 0.107 m along joint 7's axis, so its pose equals ``forward_kinematics(q)``.

The scene is generated as an MJCF string so object counts, sizes and cameras live in one place.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from neuralsim import kinematics as K

# Off-screen rendering on a machine without a display: EGL (Mesa llvmpipe on a CPU) unless the user
# chose another backend (``osmesa``, ``glfw``).  Must be set before ``mujoco`` is imported.
os.environ.setdefault("MUJOCO_GL", "egl")

#: Table top height [m] in the robot base frame (the base stands on the floor beside the table).
TABLE_HEIGHT = 0.0
#: Physics steps per 1/15 s control period.
SUBSTEPS = 32
TIMESTEP = 1.0 / (K.CONTROL_HZ * SUBSTEPS)
#: Finger travel [m] per finger: 0 = closed, 0.04 = open.
FINGER_OPEN = 0.04

CAMERA_NAMES = ("exterior_1", "exterior_2", "wrist")
#: The hand body's quaternion in the flange frame (a turn of ``K.HAND_YAW`` about z).
_HAND_QUAT = f"{math.cos(K.HAND_YAW / 2):.6g} 0 0 {math.sin(K.HAND_YAW / 2):.6g}"


@dataclass(frozen=True)
class SceneConfig:
    """Object sizes, layout ranges and exterior cameras of one SimDROID scene (all lengths in metres).

    Two scenes are defined, :data:`CLASSIC` (``SimDROID-v0``, the scene the shipped world model is trained on)
    and :data:`LEGIBLE` (``SimDROID-v1``); :data:`SCENES` maps their names to them.
    """

    #: Name of the scene (``SCENES`` key), recorded in every episode's metadata.
    name: str
    #: Edge length of the manipulable cubes.
    cube_size: float
    #: Number of cubes: the episode's target, the base for stacking, distractors.
    num_cubes: int
    #: Bowl inner half-extent, wall height and wall thickness.
    bowl_half: float
    bowl_wall_h: float
    bowl_wall_t: float
    #: Target pad half-extent.
    pad_half: float
    #: Where cube centres are drawn in the training distribution: ((x low, x high), (y low, y high)).
    cube_region: tuple
    #: ``distribution="ood"``: the target cube lies in this box but outside ``cube_region`` grown by ``ood_margin``.
    ood_target_region: tuple
    ood_margin: float
    #: Bowl and pad centres: x range, and |y| range (they stand on opposite sides of the robot's axis).
    fixture_x: tuple
    fixture_abs_y: tuple
    #: Smallest centre distance between two cubes.
    cube_spacing: float
    #: Smallest max-norm distance from a cube's centre to the bowl's inner edge, and to the pad's edge.
    bowl_clearance: float
    pad_clearance: float
    #: Pushing: half-width of the corridor from behind the target to the pad that distractors keep free.
    push_corridor: float
    #: Pushing: smallest max-norm distance from the point the pusher starts at (behind the target, away from the
    #: pad) to the bowl's outer edge, so the hand does not come down on the bowl; None: not checked.
    push_start_clearance: float | None
    #: Gripper position (0 open, 1 closed) at which the fingers just reach the cube's sides: the scripted expert's
    #: ``weak_grip`` failure closes to it, so the cube slips out when lifted.
    touch_grip: float
    #: Exterior cameras: name -> (position, look-at point, vertical field of view [deg]).
    exterior_cameras: dict = field(hash=False)

    @property
    def env_id(self) -> str:
        """The registered id of the SimDROID env of this scene (``SimDROID-v0`` classic, ``SimDROID-v1`` legible)."""
        return {"classic": "SimDROID-v0", "legible": "SimDROID-v1"}.get(self.name, f"SimDROID[{self.name}]")

    @property
    def bowl_outer_half(self) -> float:
        """Half-extent of the bowl's outside walls."""
        return self.bowl_half + 2 * self.bowl_wall_t


#: The scene of ``SimDROID-v0``: 5 cm cubes seen by two side cameras with a 60 deg field of view (a cube is
#: 3-4 pixels wide in a 64x64 exterior view).
CLASSIC = SceneConfig(
    name="classic", cube_size=0.05, num_cubes=3, bowl_half=0.065, bowl_wall_h=0.045, bowl_wall_t=0.008,
    pad_half=0.07, cube_region=((0.42, 0.64), (-0.22, 0.22)), ood_target_region=((0.32, 0.72), (-0.30, 0.30)),
    ood_margin=0.02, fixture_x=(0.45, 0.62), fixture_abs_y=(0.18, 0.30), cube_spacing=0.10,
    bowl_clearance=0.07, pad_clearance=0.04, push_corridor=0.10, push_start_clearance=None, touch_grip=0.34,
    exterior_cameras={
        "exterior_1": ((0.20, 0.70, 0.62), (0.48, 0.0, 0.17), 60.0),
        "exterior_2": ((0.20, -0.70, 0.62), (0.48, 0.0, 0.17), 60.0),
    })

#: The scene of ``SimDROID-v1``, legible at 64x64: two 6 cm cubes (the hand opens 8 cm; the target and the base
#: for stacking or a distractor) on a compact workspace, seen from high beside it through an 18.5 deg field of
#: view, so every cube spans at least 8 pixels in each exterior view wherever a task can put it
#: (``benchmarks/fidelity/legibility.py`` measures it).
LEGIBLE = SceneConfig(
    name="legible", cube_size=0.06, num_cubes=2, bowl_half=0.05, bowl_wall_h=0.04, bowl_wall_t=0.008,
    pad_half=0.055, cube_region=((0.45, 0.59), (-0.10, 0.10)), ood_target_region=((0.42, 0.62), (-0.13, 0.13)),
    ood_margin=0.015, fixture_x=(0.47, 0.57), fixture_abs_y=(0.14, 0.16), cube_spacing=0.09,
    bowl_clearance=0.05, pad_clearance=0.035, push_corridor=0.08, push_start_clearance=0.04,
    touch_grip=0.215,
    exterior_cameras={
        "exterior_1": ((0.59, 0.45, 1.40), (0.63, 0.0, 0.02), 18.5),
        "exterior_2": ((0.59, -0.45, 1.40), (0.63, 0.0, 0.02), 18.5),
    })

SCENES = {sc.name: sc for sc in (CLASSIC, LEGIBLE)}

# The classic scene's values under their historical names (the world model and benchmarks of ``SimDROID-v0``).
CUBE_SIZE = CLASSIC.cube_size
NUM_CUBES = CLASSIC.num_cubes
BOWL_HALF, BOWL_WALL_H, BOWL_WALL_T = CLASSIC.bowl_half, CLASSIC.bowl_wall_h, CLASSIC.bowl_wall_t
PAD_HALF = CLASSIC.pad_half
EXTERIOR_CAMERAS = CLASSIC.exterior_cameras


def get_scene(scene: "str | SceneConfig") -> SceneConfig:
    """The :class:`SceneConfig` named ``scene`` (or ``scene`` itself)."""
    if isinstance(scene, SceneConfig):
        return scene
    if scene not in SCENES:
        raise ValueError(f"unknown scene {scene!r}; expected one of {sorted(SCENES)}")
    return SCENES[scene]


def scene_of(metadata: dict, default: str = "classic") -> str:
    """The SimDROID scene an episode (spec) was made in, from its metadata.

    Reads ``metadata["scene"]`` where it is recorded, else the SimDROID env id in ``"spec_source"`` or
    ``"source"`` (``SimDROID-v0`` classic, ``SimDROID-v1`` legible); ``default`` when neither says.
    """
    if metadata.get("scene") in SCENES:
        return metadata["scene"]
    by_id = {sc.env_id: sc.name for sc in SCENES.values()}
    for key in ("spec_source", "source"):
        if metadata.get(key) in by_id:
            return by_id[metadata[key]]
    return default


def _vec(values) -> str:
    """Numbers as an MJCF attribute value ("0.065 0 0.03")."""
    return " ".join(f"{float(v):g}" for v in values)


def look_at_xyaxes(pos, target) -> str:
    """MJCF ``xyaxes`` of a camera at ``pos`` looking at ``target`` with world z up."""
    pos, target = np.asarray(pos, float), np.asarray(target, float)
    fwd = target - pos
    fwd /= np.linalg.norm(fwd)
    x = np.cross(fwd, [0.0, 0.0, 1.0])
    x /= np.linalg.norm(x)
    y = np.cross(x, fwd)
    return " ".join(f"{v:.5f}" for v in (*x, *y))


def _exterior_cameras(scene: SceneConfig) -> str:
    return "\n    ".join(
        f'<camera name="{n}" pos="{p[0]} {p[1]} {p[2]}" xyaxes="{look_at_xyaxes(p, t)}" fovy="{f}"/>'
        for n, (p, t, f) in scene.exterior_cameras.items())


def exterior_camera_frames(scene: "str | SceneConfig" = CLASSIC) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A scene's exterior cameras as (positions (2, 3), bases (2, 3, 3) rows = right, up, forward, tan(fovy / 2) (2,)),
    in the order of its ``exterior_cameras`` (the dataset's views 0 and 1)."""
    pos, basis, tans = [], [], []
    for p, target, fovy in get_scene(scene).exterior_cameras.values():
        p = np.asarray(p, float)
        fwd = np.asarray(target, float) - p
        fwd /= np.linalg.norm(fwd)
        right = np.cross(fwd, [0.0, 0.0, 1.0])  # the frame of look_at_xyaxes
        right /= np.linalg.norm(right)
        up = np.cross(right, fwd)
        pos.append(p)
        basis.append(np.stack([right, up, fwd]))
        tans.append(np.tan(np.radians(fovy) / 2))
    return np.stack(pos), np.stack(basis), np.asarray(tans)


def project_exterior(points: np.ndarray, scene: "str | SceneConfig" = CLASSIC) -> np.ndarray:
    """World points (N, 3) -> image points (N, 2 views, 2) as (column, row) in [-1, 1] (-1 = left/top edge)."""
    pos, basis, tans = exterior_camera_frames(scene)
    d = np.asarray(points, float)[:, None, :] - pos[None]  # (N, 2, 3)
    cam = np.einsum("vij,nvj->nvi", basis, d)  # right, up, forward
    return np.stack([cam[..., 0] / cam[..., 2] / tans[None, :], -cam[..., 1] / cam[..., 2] / tans[None, :]], -1)


def project_wrist(points: np.ndarray, joint_position: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """World points (N, 3) seen from SimDROID's wrist camera at joint states (T, 7): image points (T, N, 2) as
    (column, row) in [-1, 1] (-1 = left/top edge) and (T, N) whether each point is in front of the camera.

    The camera is the one the scene's MJCF mounts on the hand (:func:`~neuralsim.kinematics.wrist_camera_pose`)."""
    pos, rot = K.wrist_camera_pose(K.forward_kinematics(np.asarray(joint_position, np.float64)))  # (T, 3), (T, 3, 3)
    cam = np.einsum("tji,tnj->tni", rot, np.asarray(points, float)[None] - pos[:, None])  # right, up, backwards
    ahead = -cam[..., 2]
    tan = math.tan(math.radians(K.WRIST_CAMERA_FOVY) / 2)
    depth = np.maximum(ahead, 1e-6)
    return np.stack([cam[..., 0] / depth / tan, -cam[..., 1] / depth / tan], -1), ahead > 0.02


def franka_mesh_dir() -> str:
    """Directory of the Panda meshes shipped by gymnasium-robotics."""
    import importlib.util

    # Locate the package without importing it (its import prints unrelated deprecation notices).
    spec = importlib.util.find_spec("gymnasium_robotics")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("SimDROID needs the Panda meshes from gymnasium-robotics: pip install gymnasium-robotics")
    d = os.path.join(list(spec.submodule_search_locations)[0], "envs", "assets", "kitchen_franka",
                     "franka_assets", "meshes", "collision")
    if not os.path.isdir(d):
        raise FileNotFoundError(f"Panda meshes not found at {d}; is gymnasium-robotics installed correctly?")
    return d


def _joint_range(i: int) -> str:
    return f"{K.JOINT_LIMITS_LOW[i]:.4f} {K.JOINT_LIMITS_HIGH[i]:.4f}"


def _finger(name: str, sign: int) -> str:
    s = "" if sign > 0 else "-"
    caps = []
    for r, y0, y1, z in [(0.0070, .006, .009, .0875), (0.0075, .007, .010, .0775), (0.0082, .008, .011, .0675),
                         (0.0090, .009, .012, .0575), (0.0100, .0105, .0135, .0475), (0.0110, .012, .015, .035)]:
        caps.append(f'<geom class="fingerpad" size="{r}" fromto=".009 {s}{y0} {z} -.009 {s}{y1} {z}"/>')
        caps.append(f'<geom class="fingerpad" size="{r}" fromto=".009 {s}{y1} {z} -.009 {s}{y0} {z}"/>')
    axis = "0 1 0" if sign > 0 else "0 -1 0"
    quat_mesh = "" if sign > 0 else ' quat="0 0 0 1"'
    return f"""
      <body name="{name}" pos="0 0 0.0584">
        <inertial pos="0 {s}0.0119 0.0434" mass="0.0927" diaginertia="6.6e-05 6.1e-05 1.1e-05"/>
        <joint name="{name}_joint" type="slide" axis="{axis}" range="0 {FINGER_OPEN}" damping="10" armature="0.1"/>
        <geom class="visual" mesh="finger"{quat_mesh}/>
        {''.join(caps)}
        <geom class="fingerpad" type="box" size="0.0185 0.0120 0.0175" pos="0 {s}0.014 0.015"/>
      </body>"""


def build_mjcf(scene: "str | SceneConfig" = CLASSIC) -> str:
    """The SimDROID scene as an MJCF string."""
    scene = get_scene(scene)
    mesh_dir = franka_mesh_dir()
    links = [f'<mesh name="link{i}" file="link{i}.stl"/>' for i in range(8)]
    cubes = []
    for i in range(scene.num_cubes):
        h = scene.cube_size / 2
        cubes.append(f"""
    <body name="cube{i}" pos="{0.4 + 0.1 * i} 0.3 {TABLE_HEIGHT + h}">
      <freejoint name="cube{i}_free"/>
      <geom name="cube{i}" type="box" size="{h} {h} {h}" mass="0.08" rgba="1 0 0 1" friction="1.2 0.01 0.001"
            condim="4" solref="0.005 1"/>
    </body>""")
    bw, bh, bt = scene.bowl_half, scene.bowl_wall_h, scene.bowl_wall_t
    walls = []
    for k, (px, py, sx, sy) in enumerate([(bw + bt, 0, bt, bw + 2 * bt), (-bw - bt, 0, bt, bw + 2 * bt),
                                          (0, bw + bt, bw, bt), (0, -bw - bt, bw, bt)]):
        walls.append(f'<geom name="bowl_wall{k}" type="box" pos="{px} {py} {bh / 2}" size="{sx} {sy} {bh / 2}" '
                     'rgba="0 0 1 1"/>')
    q0 = K.RESET_JOINT_POSITION
    keyframe_q = " ".join(f"{v:.6f}" for v in list(q0) + [FINGER_OPEN, FINGER_OPEN])
    return f"""<mujoco model="simdroid">
  <compiler angle="radian" meshdir="{mesh_dir}" autolimits="true"/>
  <option timestep="{TIMESTEP:.8f}" integrator="implicitfast" cone="elliptic" impratio="10"/>
  <visual>
    <global offwidth="256" offheight="256"/>
    <quality shadowsize="0"/>
    <headlight ambient="0.45 0.45 0.45" diffuse="0.5 0.5 0.5" specular="0 0 0"/>
  </visual>
  <asset>
    {''.join(links)}
    <mesh name="hand" file="hand.stl"/>
    <mesh name="finger" file="finger.stl" scale="1.75 1.0 1.75"/>
    <texture name="floor" type="2d" builtin="checker" rgb1=".32 .30 .28" rgb2=".28 .26 .24" width="64" height="64"/>
    <material name="floor" texture="floor" texrepeat="6 6"/>
  </asset>
  <default>
    <default class="visual">
      <geom type="mesh" contype="0" conaffinity="0" group="0" rgba=".92 .92 .90 1"/>
    </default>
    <default class="collision">
      <geom type="mesh" group="3" rgba=".5 .6 .7 1"/>
    </default>
    <default class="fingerpad">
      <geom type="capsule" group="3" friction="1.5 0.01 0.001" condim="4" solref="0.005 1" rgba=".3 .3 .3 1"/>
    </default>
    <joint damping="2" armature="0.1"/>
  </default>
  <worldbody>
    <light pos="0.5 0 1.5" dir="0 0 -1" diffuse=".6 .6 .6" castshadow="false"/>
    <geom name="floor" type="plane" size="3 3 .1" pos="0 0 -0.75" material="floor"/>
    <geom name="table" type="box" pos="0.55 0 {TABLE_HEIGHT - 0.02}" size="0.45 0.6 0.02" rgba=".62 .50 .38 1"/>
    <geom name="pedestal" type="box" pos="0 0 -0.38" size="0.1 0.1 0.36" rgba=".2 .2 .2 1" contype="0" conaffinity="0"/>
    {_exterior_cameras(scene)}
    <body name="link0" gravcomp="1">
      <geom class="visual" mesh="link0"/>
      <body name="link1" pos="0 0 0.333" gravcomp="1">
        <inertial pos="0 -0.04 -0.05" mass="2.7" diaginertia="0.016 0.016 0.006"/>
        <joint name="joint1" axis="0 0 1" range="{_joint_range(0)}"/>
        <geom class="visual" mesh="link1"/>
        <body name="link2" quat="0.707107 -0.707107 0 0" gravcomp="1">
          <inertial pos="0 -0.07 0.03" mass="2.73" diaginertia="0.018 0.017 0.006"/>
          <joint name="joint2" axis="0 0 1" range="{_joint_range(1)}"/>
          <geom class="visual" mesh="link2"/>
          <body name="link3" pos="0 -0.316 0" quat="0.707107 0.707107 0 0" gravcomp="1">
            <inertial pos="0.04 0.02 -0.04" mass="2.04" diaginertia="0.009 0.008 0.005"/>
            <joint name="joint3" axis="0 0 1" range="{_joint_range(2)}"/>
            <geom class="visual" mesh="link3"/>
            <body name="link4" pos="0.0825 0 0" quat="0.707107 0.707107 0 0" gravcomp="1">
              <inertial pos="-0.04 0.05 0.03" mass="2.08" diaginertia="0.009 0.008 0.005"/>
              <joint name="joint4" axis="0 0 1" range="{_joint_range(3)}"/>
              <geom class="visual" mesh="link4"/>
              <body name="link5" pos="-0.0825 0.384 0" quat="0.707107 -0.707107 0 0" gravcomp="1">
                <inertial pos="0 0.04 -0.1" mass="3.0" diaginertia="0.03 0.027 0.006"/>
                <joint name="joint5" axis="0 0 1" range="{_joint_range(4)}"/>
                <geom class="visual" mesh="link5"/>
                <body name="link6" quat="0.707107 0.707107 0 0" gravcomp="1">
                  <inertial pos="0.06 0 0.01" mass="1.32" diaginertia="0.004 0.003 0.003"/>
                  <joint name="joint6" axis="0 0 1" range="{_joint_range(5)}"/>
                  <geom class="visual" mesh="link6" quat="0.707107 0 0 -0.707107"/>
                  <body name="link7" pos="0.088 0 0" quat="0.707107 0.707107 0 0" gravcomp="1">
                    <inertial pos="0 0 0.08" mass="0.75" diaginertia="0.003 0.003 0.001"/>
                    <joint name="joint7" axis="0 0 1" range="{_joint_range(6)}"/>
                    <geom class="visual" mesh="link7" quat="0.92388 0 0 -0.382683"/>
                    <site name="flange" pos="0 0 {K.FLANGE_OFFSET}" size="0.005"/>
                    <body name="hand" pos="0 0 {K.FLANGE_OFFSET}" quat="{_HAND_QUAT}" gravcomp="1">
                      <inertial pos="0 0 0.03" mass="0.73" diaginertia="0.002 0.002 0.001"/>
                      <geom class="visual" mesh="hand"/>
                      <geom class="collision" mesh="hand" group="3"/>
                      <site name="tcp" pos="0 0 0.130" size="0.005"/>
                      <camera name="wrist" pos="{_vec(K.WRIST_CAMERA_POS)}" xyaxes="{_vec(K.WRIST_CAMERA_XYAXES)}"
                              fovy="{K.WRIST_CAMERA_FOVY:g}"/>
                      {_finger("left_finger", 1)}
                      {_finger("right_finger", -1)}
                    </body>
                  </body>
                </body>
              </body>
            </body>
          </body>
        </body>
      </body>
    </body>
    <body name="bowl" pos="0.5 -0.25 {TABLE_HEIGHT}">
      <geom name="bowl_floor" type="box" pos="0 0 0.003" size="{bw + 2 * bt} {bw + 2 * bt} 0.003" rgba="0 0 1 1"/>
      {''.join(walls)}
    </body>
    <body name="pad" pos="0.5 0.25 {TABLE_HEIGHT}">
      <geom name="pad" type="box" pos="0 0 0.0005" size="{scene.pad_half} {scene.pad_half} 0.0005" rgba="1 1 0 1"
            contype="0" conaffinity="0"/>
    </body>
    {''.join(cubes)}
  </worldbody>
  <contact>
    <exclude body1="link7" body2="hand"/>
  </contact>
  <actuator>
    <position name="left_finger" joint="left_finger_joint" kp="400" kv="20" ctrlrange="0 {FINGER_OPEN}"
              forcerange="-40 40"/>
    <position name="right_finger" joint="right_finger_joint" kp="400" kv="20" ctrlrange="0 {FINGER_OPEN}"
              forcerange="-40 40"/>
  </actuator>
  <keyframe>
    <key name="home" qpos="{keyframe_q} {' '.join('0 0 0 1 0 0 0' for _ in range(scene.num_cubes))}"/>
  </keyframe>
</mujoco>"""


@dataclass
class SceneHandles:
    """Integer ids into the compiled model, looked up once."""

    arm_qpos: np.ndarray
    arm_dof: np.ndarray
    finger_qpos: np.ndarray
    finger_dof: np.ndarray
    cube_qpos: list
    cube_body: list
    cube_geom: list
    flange_site: int
    tcp_site: int
    bowl_body: int
    pad_body: int
    pad_geom: int
    bowl_geoms: list
    finger_geoms: set
    table_geom: int


def load_model(scene: "str | SceneConfig" = CLASSIC):
    """Compile the scene; returns (model, data, handles)."""
    import mujoco

    scene = get_scene(scene)
    model = mujoco.MjModel.from_xml_string(build_mjcf(scene))
    data = mujoco.MjData(model)
    jid = lambda n: mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n)  # noqa: E731
    bid = lambda n: mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, n)  # noqa: E731
    gid = lambda n: mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, n)  # noqa: E731
    arm_j = [jid(f"joint{i + 1}") for i in range(7)]
    fing_j = [jid("left_finger_joint"), jid("right_finger_joint")]
    fingers = {bid("left_finger"), bid("right_finger")}
    finger_geoms = {g for g in range(model.ngeom) if model.geom_bodyid[g] in fingers and model.geom_contype[g]}
    h = SceneHandles(
        arm_qpos=np.array([model.jnt_qposadr[j] for j in arm_j]),
        arm_dof=np.array([model.jnt_dofadr[j] for j in arm_j]),
        finger_qpos=np.array([model.jnt_qposadr[j] for j in fing_j]),
        finger_dof=np.array([model.jnt_dofadr[j] for j in fing_j]),
        cube_qpos=[model.jnt_qposadr[jid(f"cube{i}_free")] for i in range(scene.num_cubes)],
        cube_body=[bid(f"cube{i}") for i in range(scene.num_cubes)],
        cube_geom=[gid(f"cube{i}") for i in range(scene.num_cubes)],
        flange_site=mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, "flange"),
        tcp_site=mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, "tcp"),
        bowl_body=bid("bowl"),
        pad_body=bid("pad"),
        pad_geom=gid("pad"),
        bowl_geoms=[gid("bowl_floor")] + [gid(f"bowl_wall{k}") for k in range(4)],
        finger_geoms=finger_geoms,
        table_geom=gid("table"),
    )
    return model, data, h
