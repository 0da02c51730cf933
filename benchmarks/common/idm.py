"""A small gripper-centric inverse dynamics model (GC-IDM): two consecutive frames -> the tool-point move between them.

Usage (trains the shipped model of a SimDROID scene: 2500 steps on the first 200 episodes of the scene's training
data, 23 minutes on a busy 2-core CPU)::

    python -m benchmarks.common.idm                    # classic: data/classic -> benchmarks/common/assets/idm
    python -m benchmarks.common.idm --scene legible    # legible: data/legible -> benchmarks/common/assets/idm_legible

What it reads and says (WoW-World-Eval §5 and Appendix 10.3: an IDM trained only on real executions turns a video
into actions for the robot; the gripper-centric variant predicts the end effector's motion rather than joint
commands).  **Video only**: the three views of frames t and t+1 (64x64 each); no robot state goes in, so a
generated video is read exactly as a true one.  Out, for the step t -> t+1:

* the tool point's displacement ``dp`` [m] and rotation ``dr`` (rotation vector of R_{t+1} R_t^T, world frame);
* the tool point's position ``p`` [m] and rotation (first two columns of R) at t+1 (where the gripper *is*);
* the gripper command in [0, 1] sent at t.

:func:`controller_action` turns an inferred move into SimDROID's DROID action on the replaying robot: the goal is
the robot's own tool point moved by ``dp`` / ``dr``, pulled a share :data:`ABSOLUTE_GAIN` of the way towards the
absolute pose read from the frame (so errors of the moves do not add up), reached by the scripted expert's damped
least-squares IK step.  The weights are safetensors beside a JSON :class:`IDMConfig` (which records the scene it
was trained on); ``InverseDynamics.from_pretrained(dir)`` (:func:`load`) refuses files that do not match the config.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from neuralsim.kinematics import rotation_matrix as rotation
from neuralsim.kinematics import rotation_vector as rotvec

log = logging.getLogger(__name__)

#: Where the shipped IDM of the classic scene lives (:func:`default_dir`: any scene's).
DEFAULT_DIR = Path(__file__).resolve().parent / "assets" / "idm"
#: Each SimDROID scene's training data, what ``python -m benchmarks.common.idm --scene SCENE`` reads by default.
TRAINING_DATA = {"classic": "data/classic", "legible": "data/legible"}
#: Share of the way from the integrated goal to the pose read from the frame (0: moves only, 1: poses only).
ABSOLUTE_GAIN = 0.3
#: Output layout: dp (3), dr (3), p (3), rotation columns (6), gripper logit (1).
OUT_DIM = 16
#: Output scales: a step moves the tool point <= 0.022 m and turns it <= 0.12 rad (the expert's limits).
DP_SCALE, DR_SCALE = 0.02, 0.1


class WeightsError(ValueError):
    """An IDM directory whose weights or config are missing or do not fit together."""


def default_dir(scene: str = "classic") -> Path:
    """The shipped IDM of SimDROID's ``scene``: ``assets/idm`` (classic) or ``assets/idm_<scene>``."""
    if scene not in TRAINING_DATA:
        raise ValueError(f"unknown scene {scene!r}; expected one of {sorted(TRAINING_DATA)}")
    return DEFAULT_DIR if scene == "classic" else DEFAULT_DIR.with_name(f"idm_{scene}")


def train_command(scene: str = "classic", out: str | Path | None = None) -> str:
    """The command that trains the IDM of ``scene`` into ``out`` (None: the scene's :func:`default_dir`)."""
    cmd = "python -m benchmarks.common.idm" + ("" if scene == "classic" else f" --scene {scene}")
    return cmd if out is None or Path(out) == default_dir(scene) else f"{cmd} --out {out}"


@dataclass
class IDMConfig:
    """Shape of the network; saved as ``config.json`` beside ``model.safetensors``."""

    image_size: int = 64
    """Side of each view it reads."""
    views: int = 3
    """Views per frame (``neuralsim.episode.VIEW_NAMES`` order)."""
    width: int = 16
    """Channels of the first convolution (doubled twice)."""
    hidden: int = 256
    """Width of the MLP head."""
    downsample: int = 2
    """Views are average-pooled by this factor before the trunk (64x64 -> 32x32: a quarter of the compute)."""
    scene: str = "classic"
    """The SimDROID scene (``neuralsim.envs.scene.SCENES``) of the videos it was trained on and reads."""
    train: dict = field(default_factory=dict)
    """How the shipped weights were trained and their validation errors (filled by :func:`train`)."""

    def __post_init__(self):
        if self.downsample < 1 or self.image_size % (16 * self.downsample):
            raise ValueError(f"image_size must be a multiple of 16 x downsample; got image_size {self.image_size}, "
                             f"downsample {self.downsample}")
        if self.scene not in TRAINING_DATA:
            raise ValueError(f"unknown scene {self.scene!r}; expected one of {sorted(TRAINING_DATA)}")


def make_network(cfg: IDMConfig):
    """A fresh network: per view (a shared trunk on frame t, frame t+1 and their difference) -> MLP -> OUT_DIM."""
    import torch
    from torch import nn

    class InverseDynamics(nn.Module):
        """Frames (B, 2, V, S, S, 3) uint8 -> (B, OUT_DIM) raw outputs (see :func:`decode_outputs`)."""

        def __init__(self, config: IDMConfig):
            super().__init__()
            self.config = config
            w = config.width
            self.trunk = nn.Sequential(
                nn.Conv2d(9, w, 5, stride=2, padding=2), nn.GELU(),
                nn.Conv2d(w, 2 * w, 3, stride=2, padding=1), nn.GELU(),
                nn.Conv2d(2 * w, 2 * w, 3, stride=2, padding=1), nn.GELU(),
                nn.Conv2d(2 * w, 4 * w, 3, stride=2, padding=1), nn.GELU(),
                nn.Conv2d(4 * w, 32, 1))
            cells = (config.image_size // (16 * config.downsample)) ** 2
            self.head = nn.Sequential(nn.Linear(config.views * 32 * cells, config.hidden), nn.GELU(),
                                      nn.Linear(config.hidden, config.hidden), nn.GELU(),
                                      nn.Linear(config.hidden, OUT_DIM))

        def forward(self, frames):
            b, _, v, s, _, _ = frames.shape
            x = frames.float().div(255.0).permute(0, 2, 1, 5, 3, 4)  # (B, V, 2, 3, S, S)
            x = torch.cat([x[:, :, 0], x[:, :, 1], x[:, :, 1] - x[:, :, 0]], 2).reshape(b * v, 9, s, s)
            if self.config.downsample > 1:
                x = nn.functional.avg_pool2d(x, self.config.downsample)  # (B * V, 9, S / k, S / k)
            f = self.trunk(x).reshape(b, -1)  # (B, V * 32 * cells)
            return self.head(f)

        @classmethod
        def from_pretrained(cls, directory: str | Path = DEFAULT_DIR):
            return load(directory)

        def save_pretrained(self, directory: str | Path) -> Path:
            return save(self, directory)

    return InverseDynamics(cfg)


def save(model, directory: str | Path) -> Path:
    from safetensors.torch import save_file

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps(asdict(model.config), indent=2) + "\n")
    return d


def load(directory: str | Path = DEFAULT_DIR):
    """The IDM saved in ``directory`` (safetensors; nothing is unpickled).  :class:`WeightsError` names what is
    missing or mismatched."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    d = Path(directory)
    for name in ("config.json", "model.safetensors"):
        if not (d / name).is_file():
            scene = next((sc for sc in TRAINING_DATA if default_dir(sc) == d.resolve()), "classic")
            raise WeightsError(f"no {name} in {str(d)!r}; train an IDM with `{train_command(scene, d)}`")
    try:
        cfg = IDMConfig(**json.loads((d / "config.json").read_text()))
    except (TypeError, ValueError) as e:  # a JSONDecodeError is a ValueError
        raise WeightsError(f"{str(d / 'config.json')!r} is not an IDM config: {e}") from None
    model = make_network(cfg)
    try:
        state = load_file(str(d / "model.safetensors"))
    except (SafetensorError, OSError) as e:
        raise WeightsError(f"{str(d / 'model.safetensors')!r} is not a safetensors file: {e}") from None
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        raise WeightsError(f"weights in {str(d)!r} do not fit its config: {str(e).splitlines()[0]}") from None
    return model.eval()


# ---------------------------------------------------------------------------------------------- labels
def tool_poses(joint_position: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tool points (T, 3) and hand rotations (T, 3, 3) of joint states (T, 7)."""
    from neuralsim import kinematics as K

    return K.tool_pose(joint_position)


def labels(joint_position: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """(T-1, OUT_DIM) targets of each step t -> t+1 (scaled as the network outputs them; gripper in [0, 1])."""
    p, R = tool_poses(joint_position)
    dp = (p[1:] - p[:-1]) / DP_SCALE
    dr = rotvec(R[1:] @ np.swapaxes(R[:-1], -1, -2)) / DR_SCALE
    cols = R[1:, :, :2].transpose(0, 2, 1).reshape(-1, 6)
    grip = np.clip(actions[:-1, 7:8], 0.0, 1.0)
    return np.concatenate([dp, dr, p[1:], cols, grip], 1).astype(np.float32)


@dataclass
class Move:
    """One inferred step: what :func:`decode_outputs` makes of the network's outputs."""

    dp: np.ndarray  # (3,) [m]
    dr: np.ndarray  # (3,) rotation vector [rad]
    p: np.ndarray  # (3,) [m] tool point at t+1
    R: np.ndarray  # (3, 3) hand rotation at t+1
    gripper: float


def decode_outputs(y: np.ndarray) -> list[Move]:
    """Raw outputs (N, OUT_DIM) -> moves (rotation columns Gram-Schmidt orthonormalised, gripper through a
    sigmoid)."""
    out = []
    for row in np.asarray(y, np.float64):
        a, b = row[9:12], row[12:15]
        x = a / max(np.linalg.norm(a), 1e-9)
        yv = b - x * (x @ b)
        yv /= max(np.linalg.norm(yv), 1e-9)
        out.append(Move(row[:3] * DP_SCALE, row[3:6] * DR_SCALE, row[6:9], np.stack([x, yv, np.cross(x, yv)], 1),
                        float(1.0 / (1.0 + np.exp(-row[15])))))
    return out


# ---------------------------------------------------------------------------------------------- inference, control
def infer(model, frames: np.ndarray, batch: int = 128) -> np.ndarray:
    """Raw outputs (T-1, OUT_DIM) for every step of a video (T, V, S, S, 3) uint8."""
    import torch

    pairs = np.stack([frames[:-1], frames[1:]], 1)  # (T-1, 2, V, S, S, 3)
    with torch.inference_mode():
        return np.concatenate([model(torch.from_numpy(pairs[i:i + batch])).numpy()
                               for i in range(0, len(pairs), batch)]) if len(pairs) else np.zeros((0, OUT_DIM))


def controller_action(env, move: Move, absolute_gain: float = ABSOLUTE_GAIN) -> np.ndarray:
    """The DROID action (8,) that takes the SimDROID robot ``env`` (unwrapped) through ``move``: goal = its tool point
    + ``dp`` (rotation: ``dr`` applied to its hand), pulled ``absolute_gain`` of the way to the pose read from the
    frame, reached by a damped least-squares step on the tool point's Jacobian (the scripted expert's IK)."""
    import mujoco

    from neuralsim.envs import experts as E
    from neuralsim.envs import scene as S
    from neuralsim.envs.sim_droid import REALISED_STEP_PER_V

    m, d, h = env.model, env.data, env.h
    q = d.qpos[h.arm_qpos].copy()
    p_now, R_now = (x[0] for x in tool_poses(q[None]))
    p_goal = p_now + move.dp + absolute_gain * (move.p - (p_now + move.dp))
    R_int = rotation(move.dr) @ R_now
    R_goal = rotation(absolute_gain * rotvec(move.R @ R_int.T)) @ R_int
    jacp, jacr = np.zeros((3, m.nv)), np.zeros((3, m.nv))
    mujoco.mj_jacSite(m, d, jacp, jacr, h.tcp_site)
    J = np.vstack([jacp[:, h.arm_dof], jacr[:, h.arm_dof]])
    err = np.concatenate([p_goal - d.site_xpos[h.tcp_site], rotvec(R_goal @ R_now.T)])
    dq = J.T @ np.linalg.solve(J @ J.T + E.IK_DAMPING ** 2 * np.eye(6), err)
    null = np.eye(7) - np.linalg.pinv(J) @ J
    dq += null @ (E.NULLSPACE_GAIN * (S.K.RESET_JOINT_POSITION - q))
    v = dq / REALISED_STEP_PER_V
    v /= max(1.0, np.max(np.abs(v)))
    return np.append(v, move.gripper).astype(np.float32)


# ---------------------------------------------------------------------------------------------- training
def _augment(x, g):
    """Blur / brightness / noise on uint8 pairs (B, 2, V, S, S, 3) -> uint8, so decoded frames are not out of
    distribution (as the object probe's training)."""
    import torch

    from .object_probe import _augment as probe_augment

    b, two, v, s, _, c = x.shape
    f = x.permute(0, 1, 2, 5, 3, 4).reshape(b, two * v, c, s, s).float() / 255.0
    f = probe_augment(f, g)
    return (f * 255.0).round().clamp(0, 255).to(torch.uint8).reshape(b, two, v, c, s, s).permute(0, 1, 2, 4, 5, 3)


def load_training_data(root: str | Path, max_episodes: int | None = None, progress: bool = True):
    """Frames and labels of a SimDROID dataset: (list of (T, V, S, S, 3) uint8 videos, list of (T-1, OUT_DIM))."""
    from tqdm import tqdm

    from neuralsim.data.reader import list_episodes, load_episode

    videos, targets = [], []
    for rec in tqdm(list_episodes(root)[:max_episodes], desc="idm data", unit="ep", disable=not progress):
        ep = load_episode(root, rec)
        videos.append(np.ascontiguousarray(ep.frames))
        targets.append(labels(ep.joint_position, ep.actions))
    return videos, targets


def train(videos: Sequence[np.ndarray], targets: Sequence[np.ndarray], config: IDMConfig | None = None,
          steps: int = 2500, batch_size: int = 16, lr: float = 2e-3, seed: int = 0, val_fraction: float = 0.1,
          progress: bool = True, scene: str = "classic"):
    """Fit an IDM on videos of SimDROID's ``scene`` (recorded in the config it makes when ``config`` is None); the
    last ``val_fraction`` of the episodes are held out and their errors go into ``config.train``.  Loss: MSE on the
    scaled moves and poses, BCE on the gripper command."""
    import torch
    import torch.nn.functional as F
    from tqdm import tqdm

    cfg = config or IDMConfig(image_size=int(videos[0].shape[2]), views=int(videos[0].shape[1]), scene=scene)
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    model = make_network(cfg)
    n_val = max(1, int(round(val_fraction * len(videos))))
    train_eps = list(range(len(videos) - n_val))
    index = np.array([(e, t) for e in train_eps for t in range(len(targets[e]))])
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=max(steps, 1), pct_start=0.05)
    weights = torch.tensor([1.0] * 6 + [10.0] * 3 + [1.0] * 6)  # absolute position in metres: up-weighted
    model.train()
    losses, t0 = [], time.perf_counter()
    for _ in tqdm(range(steps), desc="idm training", unit="step", disable=not progress):
        pick = index[torch.randint(len(index), (batch_size,), generator=g).numpy()]
        x = torch.from_numpy(np.stack([videos[e][t:t + 2] for e, t in pick]))
        y = torch.from_numpy(np.stack([targets[e][t] for e, t in pick]))
        out = model(_augment(x, g))
        loss = (weights * (out[:, :15] - y[:, :15]) ** 2).mean() + \
            0.5 * F.binary_cross_entropy_with_logits(out[:, 15], y[:, 15])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    model.eval()
    cfg.train = {"steps": steps, "batch_size": batch_size, "lr": lr, "seed": seed, "episodes": len(videos),
                 "train_steps_of_data": int(len(index)), "final_loss": float(np.mean(losses[-50:])),
                 "seconds": round(time.perf_counter() - t0, 1),
                 "validation": step_errors(model, videos[-n_val:], targets[-n_val:])}
    return model


def step_errors(model, videos: Sequence[np.ndarray], targets: Sequence[np.ndarray]) -> dict[str, Any]:
    """Per-step errors of the inferred moves against the labels: tool-point move [mm], rotation [deg], position
    at t+1 [cm], gripper command (right side of 0.5)."""
    y = np.concatenate(targets)
    moves = decode_outputs(np.concatenate([infer(model, v) for v in videos]))
    dp = np.stack([m.dp for m in moves])
    p = np.stack([m.p for m in moves])
    dr = np.stack([m.dr for m in moves])
    grip = np.array([m.gripper for m in moves])
    true_dp, true_dr = y[:, :3] * DP_SCALE, y[:, 3:6] * DR_SCALE
    return {"steps": int(len(y)),
            "move_error_mm_mean": float(1000 * np.linalg.norm(dp - true_dp, axis=1).mean()),
            "move_size_mm_mean": float(1000 * np.linalg.norm(true_dp, axis=1).mean()),
            "rotation_error_deg_mean": float(np.degrees(np.linalg.norm(dr - true_dr, axis=1).mean())),
            "position_error_cm_mean": float(100 * np.linalg.norm(p - y[:, 6:9], axis=1).mean()),
            "gripper_accuracy": float(((grip > 0.5) == (y[:, 15] > 0.5)).mean())}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.common.idm", description=__doc__.split("\n\n")[0])
    p.add_argument("--scene", choices=sorted(TRAINING_DATA), default="classic",
                   help="SimDROID scene of the videos it learns to read: classic (SimDROID-v0, default) or legible "
                        "(SimDROID-v1)")
    p.add_argument("--data", default=None, help="SimDROID training data of that scene (default: data/classic for "
                                                "classic, data/legible for legible)")
    p.add_argument("--out", default=None, help="directory for model.safetensors + config.json (default: the scene's "
                                               "shipped IDM, benchmarks/common/assets/idm[_legible])")
    p.add_argument("--max-episodes", type=int, default=200, help="first N episodes (default %(default)s)")
    p.add_argument("--steps", type=int, default=2500, help="training steps (default %(default)s)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--threads", type=int, default=1, help="torch threads (default %(default)s)")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    from neuralsim.data.reader import list_episodes
    from neuralsim.world_model.batches import data_scene

    data = args.data or TRAINING_DATA[args.scene]
    out = args.out or str(default_dir(args.scene))
    try:
        found = list_episodes(data)
    except FileNotFoundError:
        found = []
    if not found:
        p.error(f"no SimDROID episodes in {data}; make them with `neuralsim data generate {data}"
                f"{'' if args.scene == 'classic' else f' --scene {args.scene}'}`")
    if data_scene(data) != args.scene:
        p.error(f"{data} holds {data_scene(data)}-scene episodes, not {args.scene} ones: pass --data of the "
                f"{args.scene} scene or --scene {data_scene(data)}")
    import torch

    torch.set_num_threads(args.threads)
    videos, targets = load_training_data(data, args.max_episodes, args.progress)
    model = train(videos, targets, steps=args.steps, batch_size=args.batch_size, progress=args.progress,
                  scene=args.scene)
    save(model, out)
    print(f"IDM of the {args.scene} scene saved to {out}: validation {json.dumps(model.config.train['validation'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
