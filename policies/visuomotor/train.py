"""Behaviour cloning of the visuomotor policies on SimDROID demonstrations: ``neuralsim train-policy``.

Usage:
    neuralsim data generate data/legible --scene legible --episodes 720 --seed 0 --noise 0 0.3 --failure-share 0.3
    neuralsim train-policy --out runs/visuomotor_legible --ship    # the shipped checkpoints (README for all the data)

The demonstrations are the successful episodes of datasets written by ``neuralsim data generate`` (expert and
noisy expert; episodes with a failure mode are left out unless ``--include-failure-modes``).  Every frame is a
sample: the chosen views and the joint and gripper state at that frame, the instruction's tokens, and as target
the next ``chunk_size`` actions (past the episode's end, its last action: a hold); with ``--action-mode tool_delta``
(the Cartesian head) the tool poses after those actions instead, by forward kinematics of the recorded joints.
Loss: L1 on the 7 joint commands (or the 6 scaled tool offsets), binary cross-entropy on the gripper, and an
auxiliary MSE on where the target cube (before it is touched) and the goal lie, from the episode's recorded poses.
Images are shifted by up to ``--shift`` px (DrQ) and the state jittered, so a policy does not need its arm exactly
on a demonstration to act (a Cartesian head's labels are re-expressed from the jittered pose, so they still point
at the demonstration's poses).

One training run gives every checkpoint: ``--snapshots NAME=STEP,...`` saves the EMA weights at those steps
(``runs/.../snapshots/NAME``); ``--ship`` also copies them into ``policies/visuomotor/weights/NAME``, where
``make_policy(NAME)`` finds them; the shipped checkpoints differ by training steps.  Re-running the same command
resumes from ``OUT/checkpoint.pt``; batches and augmentation come from a generator seeded by (seed, step), so a
resumed run continues the same curve, and the same seed gives the same weights on one machine.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch is imported when training starts, so the CLI's --help stays instant
    import torch

log = logging.getLogger(__name__)

#: The shipped checkpoints: name -> training step of the snapshot (all from one run).
SHIPPED_SNAPSHOTS = "visuomotor-s250=250,visuomotor-s750=750,visuomotor-s2000=2000,visuomotor-s4000=4000"
#: The datasets the shipped checkpoints learned from (README, "Visuomotor baselines", for the commands making them).
SHIPPED_DATA = "data/legible,data/legible_mix,data/legible_full"
WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
TRAIN_COMMAND = "neuralsim train-policy --data DATA --out runs/visuomotor_legible --ship"
#: Options that may change between the invocations of one resumed run.
RUN_ONLY = ("max_minutes", "stop_at", "checkpoint_every", "num_threads", "progress")


@dataclass
class TrainPolicyConfig:
    """Options of ``neuralsim train-policy`` (one docstring per field; ``--help`` is generated from them)."""

    data: str = dataclasses.field(default=SHIPPED_DATA, metadata={"metavar": "DIR[,DIR...]"})
    """Dataset directories written by ``neuralsim data generate``, comma-separated."""
    out: str = "runs/visuomotor_legible"
    """Run directory: checkpoint.pt (resumable state), metrics.jsonl, snapshots/NAME."""
    scene: str = dataclasses.field(default="legible", metadata={"choices": ("classic", "legible")})
    """SimDROID scene the data must come from (classic = SimDROID-v0, legible = SimDROID-v1); recorded in every
    checkpoint's config."""
    steps: int = 4000
    """Total optimiser steps (the run stops at the last snapshot if that is later)."""
    snapshots: str = SHIPPED_SNAPSHOTS
    """Checkpoints to save, NAME=STEP,... (EMA weights at that step)."""
    ship: bool = False
    """Copy the snapshots into policies/visuomotor/weights/NAME (the package's shipped checkpoints)."""
    views: str = "exterior_image_1_left,wrist_image_left"
    """Camera views the policy reads, comma-separated."""
    chunk_size: int = 12
    """Actions per predicted chunk (H)."""
    action_mode: str = dataclasses.field(default="joint_velocity", metadata={"choices": ("joint_velocity",
                                                                                          "tool_delta")})
    """What the network predicts per action: DROID's joint velocities (labels: the recorded actions) or the tool
    point's offset and rotation after it (labels: forward kinematics of the recorded joint positions; the policy's
    IK layer makes joint velocities of them, policies/visuomotor/cartesian.py)."""
    batch_size: int = 32
    """Samples per optimiser step."""
    lr: float = 1e-3
    """Peak AdamW learning rate (linear warm-up over 100 steps, cosine decay to 10% at --steps)."""
    ema: float = 0.995
    """Decay of the weights' exponential moving average that the snapshots hold."""
    aux_weight: float = 10.0
    """Weight of the auxiliary object-position loss."""
    pixel_weight: float = 1.0
    """Weight of the colour-match loss: cross-entropy of each exterior view's target- and base-colour match map
    (softmax over pixels) against the pixel the cube projects to."""
    wrist_pixels: bool = False
    """Also supervise the wrist view's colour-match maps, with where each cube projects through the wrist camera at
    that frame's joint state (while the cube is in view and untouched)."""
    gripper: str = dataclasses.field(default="probability", metadata={"choices": ("probability", "binary")})
    """How the checkpoint turns its gripper head into a command (recorded in its config): the probability as a
    position, or binary, the more likely of the demonstrations' open / closed."""
    state_noise: float = 0.02
    """Std of the Gaussian jitter added to the joint positions the policy reads [rad] (the action labels stay), so a
    policy does not need its arm exactly on a demonstration to act; at 0.02 rad it moves the tool point the policy
    computes by about a centimetre or two."""
    shift: int = 1
    """Largest random image shift in pixels (DrQ's augmentation; 0 = none). The exterior cameras are fixed, so a
    shift of s px moves every cube s px against its fixed table-position label: at about 1 cm per pixel, 4 px
    blurs the object head by centimetres."""
    max_episodes: int | None = None
    """Use only the first N demonstrations (after filtering); None = all."""
    include_failure_modes: bool = False
    """Also clone successful episodes that had a failure mode injected."""
    seed: int = 0
    """Seed of the initial weights, the batches and the augmentation."""
    checkpoint_every: int = 250
    """Steps between resumable checkpoints (and at every snapshot and at the end)."""
    num_threads: int = 1
    """torch CPU threads."""
    device: str = "cpu"
    """torch device (cpu or cuda)."""
    max_minutes: float | None = None
    """Stop cleanly (checkpoint written, resumable) after this many minutes of training."""
    stop_at: int | None = None
    """Stop cleanly (checkpoint written, resumable) once this step is reached, before the end of the run."""
    progress: bool = True
    """Show a progress bar."""

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"--steps must be >= 1, got {self.steps}")
        if self.batch_size < 1 or self.checkpoint_every < 1:
            raise ValueError(f"--batch-size and --checkpoint-every must be >= 1, got {self.batch_size}, "
                             f"{self.checkpoint_every}")
        if self.shift < 0 or self.state_noise < 0:
            raise ValueError(f"--shift and --state-noise must be >= 0, got {self.shift}, {self.state_noise}")
        parse_snapshots(self.snapshots)

    @property
    def view_list(self) -> tuple[str, ...]:
        return tuple(v.strip() for v in self.views.split(",") if v.strip())

    @property
    def data_roots(self) -> list[str]:
        return [d.strip() for d in self.data.split(",") if d.strip()]

    @property
    def total_steps(self) -> int:
        return max([self.steps, *parse_snapshots(self.snapshots).values()])


def parse_snapshots(text: str) -> dict[str, int]:
    """``"a=100,b=300"`` -> ``{"a": 100, "b": 300}``; ValueError quoting a bad item."""
    out = {}
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        name, sep, step = item.partition("=")
        try:
            n = int(step)
        except ValueError:
            n = -1
        if not sep or not name or n < 1 or "/" in name:
            raise ValueError(f"--snapshots item {item!r} is not NAME=STEP with a step >= 1")
        out[name] = n
    return out


# ----------------------------------------------------------------------------- demonstrations
@dataclass
class Demonstrations:
    """Every frame of the demonstrations as training samples (N rows)."""

    images: "torch.Tensor"    # (N, V, 3, S, S) uint8
    state: "torch.Tensor"     # (N, 8) float32: joint positions, gripper
    chunks: "torch.Tensor"    # (N, H, A + 1) float32: the next H actions' labels, then the gripper command
    tokens: "torch.Tensor"    # (N, 3) long
    aux: "torch.Tensor"       # (N, 4) float32: target xy, goal xy [m]
    aux_mask: "torch.Tensor"  # (N, 4) float32: 1 where the label holds (the target before it is touched)
    pixels: "torch.Tensor"    # (N, V, 2, 2) float32: target and base cube centre per view, (column, row) in [-1, 1]
    pixel_mask: "torch.Tensor"  # (N, V, 2) float32: 1 where that label holds (exterior view, cube untouched, in view)
    episodes: int

    def __len__(self) -> int:
        return len(self.state)


def _goal_xy(record: dict) -> list[float]:
    poses = record["initial_poses"]
    key = {"put_in_bowl": "bowl", "push_to_pad": "pad"}.get(record["family"], record.get("base"))
    return [float(v) for v in poses[key][:2]]


def load_demonstrations(roots: list[str], views: tuple[str, ...], chunk_size: int, scene: str = "classic",
                        include_failure_modes: bool = False, max_episodes: int | None = None,
                        progress: bool = True, action_mode: str = "joint_velocity",
                        wrist_pixels: bool = False) -> Demonstrations:
    """Read the successful episodes of ``roots`` into training samples (see the module docstring).

    Raises:
        DatasetError: a root is not a SimDROID dataset of ``scene``, or no episode qualifies.
    """
    import pyarrow.parquet as pq
    import torch
    from tqdm.auto import tqdm

    from neuralsim.data.reader import DatasetError, detect_layout, list_episodes, load_episode
    from neuralsim.data.writer import DATA_PATH, read_info
    from neuralsim.envs.scene import get_scene, project_exterior, project_wrist

    from .cartesian import tool_offsets
    from .model import VIEW_NAMES
    from .tokens import instruction_tokens

    env_id = get_scene(scene).env_id
    chosen = []
    for root in roots:
        if detect_layout(root) != "simdroid":
            raise DatasetError(f"{root!r} is not a SimDROID dataset (write one with `neuralsim data generate`)")
        info = read_info(root) or {}
        source = info.get("source")
        made_in = (info.get("generation") or {}).get("scene", "classic")  # no generation record: a classic set
        if made_in != scene:
            raise DatasetError(f"{root!r} was generated in the {made_in!r} scene ({source}), but --scene {scene} "
                               f"trains on {env_id}; "
                               f"generate data with `neuralsim data generate DIR --scene {scene}` or pass the "
                               "dataset's scene")
        for rec in list_episodes(root):
            if rec.get("success") and (include_failure_modes or rec.get("failure") is None):
                chosen.append((root, rec))
    if max_episodes is not None:
        chosen = chosen[:max_episodes]
    if not chosen:
        raise DatasetError(f"no successful demonstrations in {roots}")
    idx = [VIEW_NAMES.index(v) for v in views]
    exterior = np.array([i < 2 for i in idx])  # views 0 and 1 are the fixed exterior cameras
    parts: dict[str, list] = {k: [] for k in ("images", "state", "chunks", "tokens", "aux", "aux_mask", "pixels",
                                              "pixel_mask")}
    for root, rec in tqdm(chosen, desc="reading demonstrations", unit="ep", disable=not progress):
        ep = load_episode(root, rec, image_size=64)
        t = len(ep)
        frames = ep.frames[:, idx].transpose(0, 1, 4, 2, 3)  # (T, V, 3, S, S)
        rows = np.minimum(np.arange(t)[:, None] + np.arange(chunk_size)[None], t - 1)  # (T, H)
        levels = pq.read_table(Path(root) / DATA_PATH.format(episode_index=int(rec["episode_index"])),
                               columns=["ground_truth.rubric_level"]).column(0).to_numpy()[:t]
        touched = np.maximum.accumulate(levels >= 4)
        target = [float(v) for v in rec["initial_poses"][rec["target"]][:2]]
        parts["images"].append(np.ascontiguousarray(frames))
        parts["state"].append(np.concatenate([ep.joint_position, ep.gripper_position], 1))
        if action_mode == "joint_velocity":
            parts["chunks"].append(ep.actions[rows])
        else:  # the tool's offsets after each action, by forward kinematics of the recorded joints
            parts["chunks"].append(np.concatenate([tool_offsets(ep.joint_position, chunk_size),
                                                   ep.actions[rows][..., 7:]], -1))
        parts["tokens"].append(np.tile(instruction_tokens(rec["instruction"]), (t, 1)))
        parts["aux"].append(np.tile(target + _goal_xy(rec), (t, 1)))
        parts["aux_mask"].append(np.stack([~touched, ~touched, np.ones(t, bool), np.ones(t, bool)], 1))
        base = rec.get("base") if rec["family"] == "stack" else None
        centres = np.array([rec["initial_poses"][k][:3] for k in (rec["target"], base or rec["target"])])
        uv = project_exterior(centres, scene).transpose(1, 0, 2)[[min(i, 1) for i in idx]]  # (V, 2 cubes, 2)
        seen = exterior[:, None] & (np.abs(uv).max(-1) < 1) & np.array([True, base is not None])[None]  # (V, 2)
        pixels = np.tile(uv[None].astype(np.float32), (t, 1, 1, 1))                       # (T, V, 2, 2)
        untouched = np.stack([~touched, np.ones(t, bool)], 1)                              # (T, 2 cubes)
        mask = seen[None] & untouched[:, None, :]                                          # (T, V, 2)
        if wrist_pixels and 2 in idx:  # the wrist camera moves with the hand: a label per frame
            w = idx.index(2)
            uvw, ahead = project_wrist(centres, ep.joint_position)                         # (T, 2, 2), (T, 2)
            pixels[:, w] = uvw
            mask[:, w] = ahead & (np.abs(uvw).max(-1) < 1) & untouched & np.array([True, base is not None])
        parts["pixels"].append(pixels)
        parts["pixel_mask"].append(mask)
    cat = {k: np.concatenate(v) for k, v in parts.items()}
    return Demonstrations(
        images=torch.from_numpy(cat["images"]), state=torch.from_numpy(cat["state"].astype(np.float32)),
        chunks=torch.from_numpy(cat["chunks"].astype(np.float32)), tokens=torch.from_numpy(cat["tokens"]).long(),
        aux=torch.from_numpy(cat["aux"].astype(np.float32)),
        aux_mask=torch.from_numpy(cat["aux_mask"].astype(np.float32)), pixels=torch.from_numpy(cat["pixels"]),
        pixel_mask=torch.from_numpy(cat["pixel_mask"].astype(np.float32)), episodes=len(chosen))


# ----------------------------------------------------------------------------- training
def random_shift(images: "torch.Tensor", pad: int, generator: "torch.Generator"
                 ) -> tuple["torch.Tensor", "torch.Tensor"]:
    """Shift each image by a random integer offset in [-pad, pad] (edges replicated), DrQ's augmentation.

    Returns the shifted images and each one's offset (B, 2) as (columns, rows) the content moved by."""
    import torch
    import torch.nn.functional as F

    b, c, h, w = images.shape
    padded = F.pad(images, (pad,) * 4, mode="replicate")
    dx = torch.randint(0, 2 * pad + 1, (b,), generator=generator)
    dy = torch.randint(0, 2 * pad + 1, (b,), generator=generator)
    rows = (dy[:, None] + torch.arange(h)[None])[:, None, :, None].expand(b, c, h, w)  # (B, C, H, W)
    cols = (dx[:, None] + torch.arange(w)[None])[:, None, None, :].expand(b, c, h, w)
    flat = padded.flatten(2)  # (B, C, (H + 2p) * (W + 2p))
    moved = torch.stack([pad - dx, pad - dy], dim=1)
    return flat.gather(2, (rows * (w + 2 * pad) + cols).flatten(2)).view(b, c, h, w), moved


def make_batch(demos: Demonstrations, batch_size: int, generator: "torch.Generator", device: str,
               augment: bool = True, shift: int = 1, state_noise: float = 0.02, action_mode: str = "joint_velocity"
               ) -> dict:
    """One batch of samples drawn uniformly (with the augmentation when ``augment``: images shifted by up to
    ``shift`` px, joint states jittered; for ``tool_delta`` labels the targets stay where they are in the world, so
    the offsets are re-expressed from the jittered tool pose)."""
    import torch

    i = torch.randint(0, len(demos), (batch_size,), generator=generator)
    images = demos.images[i].float().div_(255)  # (B, V, 3, S, S)
    state = demos.state[i].clone()
    chunks = demos.chunks[i]
    pixels = demos.pixels[i].clone()  # (B, V, 2, 2)
    if augment:
        b, v = images.shape[:2]
        if shift > 0:
            shifted, moved = random_shift(images.flatten(0, 1), shift, generator)
            images = shifted.view_as(images)
            pixels += (2.0 / images.shape[-1]) * moved.view(b, v, 1, 2).float()
        if state_noise > 0:
            true = state[:, :7].clone()
            state[:, :7] += state_noise * torch.randn(b, 7, generator=generator)
            if action_mode == "tool_delta":
                from .cartesian import reexpress

                chunks = torch.cat([torch.from_numpy(reexpress(chunks[..., :6].numpy(), true.numpy(),
                                                               state[:, :7].numpy())), chunks[..., 6:]], -1)
    from .model import tool_pose

    return {"images": images.to(device), "state": state.to(device), "tool": tool_pose(state[:, :7]).to(device),
            "chunks": chunks.to(device),
            "tokens": demos.tokens[i].to(device), "aux": demos.aux[i].to(device),
            "aux_mask": demos.aux_mask[i].to(device), "pixels": pixels.to(device),
            "pixel_mask": demos.pixel_mask[i].to(device)}


def pixel_index(uv: "torch.Tensor", height: int, width: int) -> "torch.Tensor":
    """(..., 2) (column, row) in [-1, 1] -> (...) long: the index of the cell of a (height, width) map it falls in."""
    import torch

    col = ((uv[..., 0] + 1) * (width / 2)).floor().clamp(0, width - 1)
    row = ((uv[..., 1] + 1) * (height / 2)).floor().clamp(0, height - 1)
    return (row * width + col).to(torch.long)


def bc_loss(model, batch: dict, aux_weight: float = 1.0, pixel_weight: float = 1.0) -> tuple["torch.Tensor", dict]:
    """Behaviour-cloning loss of a batch and its parts (detached floats)."""
    import torch
    import torch.nn.functional as F

    from .model import POSITION_CENTRE, POSITION_SCALE

    arm, grip_logits, positions, match = model(batch["images"], batch["state"], batch["tool"], batch["tokens"])
    target = batch["chunks"]
    labels = target[..., :-1]
    arm_loss = F.l1_loss(arm, labels.clamp(-1, 1) if model.config.action_mode == "joint_velocity" else labels)
    grip_loss = F.binary_cross_entropy_with_logits(grip_logits, target[..., -1].clamp(0, 1))
    centre = torch.tensor(POSITION_CENTRE, device=positions.device)
    err = (positions - (batch["aux"] - centre) * POSITION_SCALE) ** 2 * batch["aux_mask"]
    aux_loss = err.sum() / batch["aux_mask"].sum().clamp(min=1)
    h, w = match.shape[-2:]
    ce = F.cross_entropy(match.flatten(3).flatten(0, 2), pixel_index(batch["pixels"], h, w).flatten(),
                         reduction="none")  # (B * V * 2,)
    mask = batch["pixel_mask"].flatten()
    pixel_loss = (ce * mask).sum() / mask.sum().clamp(min=1)
    loss = arm_loss + grip_loss + aux_weight * aux_loss + pixel_weight * pixel_loss
    return loss, {"loss": loss.item(), "arm_l1": arm_loss.item(), "gripper_bce": grip_loss.item(),
                  "aux_mse": aux_loss.item(), "pixel_ce": pixel_loss.item()}


def learning_rate(step: int, total: int, peak: float) -> float:
    """Linear warm-up over 100 steps, then cosine decay to 10% of ``peak`` at ``total``."""
    if step < 100:
        return peak * (step + 1) / 100
    frac = min(1.0, (step - 100) / max(1, total - 100))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def _seeded(seed: int, step: int) -> "torch.Generator":
    import torch

    return torch.Generator().manual_seed(int(seed) * 1_000_003 + int(step))


def train(cfg: TrainPolicyConfig) -> dict:
    """Run (or resume) one training run; returns a summary (steps run, snapshot paths, wall time)."""
    import torch
    from tqdm.auto import tqdm

    from .model import VisuomotorConfig, VisuomotorNet

    torch.set_num_threads(cfg.num_threads)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    snapshots = parse_snapshots(cfg.snapshots)
    total = cfg.total_steps
    demos = load_demonstrations(cfg.data_roots, cfg.view_list, cfg.chunk_size, cfg.scene,
                                cfg.include_failure_modes, cfg.max_episodes, cfg.progress, cfg.action_mode,
                                cfg.wrist_pixels)
    mean = demos.state.mean(0)
    std = demos.state.std(0).clamp(min=1e-2)
    options = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("progress", "ship", "device", "out")}
    mcfg = VisuomotorConfig(views=cfg.view_list, chunk_size=cfg.chunk_size, scene=cfg.scene,
                            action_mode=cfg.action_mode, gripper=cfg.gripper,
                            state_mean=mean.tolist(), state_std=std.tolist(),
                            training={"options": options, "episodes": demos.episodes, "samples": len(demos)})
    torch.manual_seed(cfg.seed)
    model = VisuomotorNet(mcfg).to(cfg.device)
    ema = VisuomotorNet(mcfg).to(cfg.device)
    ema.load_state_dict(model.state_dict())
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=1e-4)
    step = 0
    ckpt = out / "checkpoint.pt"
    if ckpt.is_file():
        state = torch.load(ckpt, map_location=cfg.device, weights_only=True)
        if state["options"] != {k: v for k, v in options.items() if k not in RUN_ONLY}:
            raise ValueError(f"{str(ckpt)!r} was written with other options; use a new --out or the same options "
                             f"(it has {state['options']})")
        model.load_state_dict(state["model"])
        ema.load_state_dict(state["ema"])
        opt.load_state_dict(state["optimizer"])
        step = int(state["step"])
        log.info("resuming %s at step %d", ckpt, step)

    def save_checkpoint() -> None:
        tmp = ckpt.with_suffix(".tmp")
        torch.save({"model": model.state_dict(), "ema": ema.state_dict(), "optimizer": opt.state_dict(),
                    "step": step, "options": {k: v for k, v in options.items() if k not in RUN_ONLY}}, tmp)
        tmp.replace(ckpt)

    def save_snapshot(name: str) -> Path:
        ema.config.training = {**mcfg.training, "step": step}
        path = ema.save_pretrained(out / "snapshots" / name)
        return path

    t0 = time.perf_counter()
    bar = tqdm(total=total, initial=step, desc="train-policy", unit="step", disable=not cfg.progress)
    metrics = (out / "metrics.jsonl").open("a")
    stopped_early = False
    while step < total:
        if (cfg.max_minutes is not None and time.perf_counter() - t0 > 60 * cfg.max_minutes) or (
                cfg.stop_at is not None and step >= cfg.stop_at):
            stopped_early = True
            break
        model.train()
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, cfg.steps, cfg.lr)
        batch = make_batch(demos, cfg.batch_size, _seeded(cfg.seed, step), cfg.device, shift=cfg.shift,
                           state_noise=cfg.state_noise, action_mode=cfg.action_mode)
        loss, parts = bc_loss(model, batch, cfg.aux_weight, cfg.pixel_weight)
        if not math.isfinite(parts["loss"]):
            raise RuntimeError(f"non-finite loss at step {step}: {parts}")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        decay = min(cfg.ema, (1 + step) / (10 + step))
        with torch.no_grad():
            for pe, pm in zip(ema.parameters(), model.parameters()):
                pe.lerp_(pm, 1 - decay)
        step += 1
        bar.update()
        if step % 25 == 0 or step == total:
            bar.set_postfix(loss=f"{parts['loss']:.3f}", arm=f"{parts['arm_l1']:.3f}")
            metrics.write(json.dumps({"step": step, "lr": group["lr"], **parts,
                                      "seconds": round(time.perf_counter() - t0, 1)}) + "\n")
            metrics.flush()
        for name, at in snapshots.items():
            if at == step:
                save_snapshot(name)
        if step % cfg.checkpoint_every == 0 or step in snapshots.values() or step == total:
            save_checkpoint()
    bar.close()
    metrics.close()
    save_checkpoint()
    shipped = []
    if cfg.ship and not stopped_early:
        for name in snapshots:
            src, dst = out / "snapshots" / name, WEIGHTS_DIR / name
            if dst.exists():
                shutil.rmtree(dst)
            shutil.copytree(src, dst)
            shipped.append(str(dst))
    return {"steps": step, "total": total, "stopped_early": stopped_early, "episodes": demos.episodes,
            "samples": len(demos), "seconds": round(time.perf_counter() - t0, 1),
            "snapshots": {n: str(out / "snapshots" / n) for n, s in snapshots.items() if s <= step},
            "shipped": shipped}


# ----------------------------------------------------------------------------- command line
def register_command(subparsers) -> None:
    """Add ``train-policy`` to the ``neuralsim`` command line (the ``neuralsim.commands`` entry point)."""
    import argparse

    from neuralsim.world_model.arguments import add_arguments

    p = subparsers.add_parser("train-policy", help="train the visuomotor policies (behaviour cloning, resumable)",
                              description="Behaviour cloning of the visuomotor policies on the successful episodes of "
                                          "SimDROID datasets (neuralsim data generate): one run, snapshots at "
                                          "given steps, resumable (re-run the same command), seeded.",
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog="example:\n  neuralsim data generate data/legible --scene legible --episodes 720\n"
                                     "  neuralsim train-policy --data data/legible --out runs/visuomotor_legible\n"
                                     "  neuralsim train-policy --out runs/visuomotor_legible --ship   # the shipped "
                                     "recipe\n  neuralsim train-policy --scene classic --data data/bc_classic --out "
                                     "runs/visuomotor_classic")
    add_arguments(p, TrainPolicyConfig)
    p.set_defaults(func=run_command)


def run_command(args) -> int:
    from neuralsim.world_model.arguments import given

    cfg = TrainPolicyConfig(**given(args, TrainPolicyConfig))
    summary = train(cfg)
    print(json.dumps(summary, indent=2))
    return 0
