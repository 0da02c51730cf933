"""Flow-matching behaviour cloning of the flow policies on SimDROID demonstrations: ``neuralsim train-flow-policy``.

Usage:
    neuralsim data generate data/legible_demos --scene legible --episodes 1500 --seed 10000 --failure-share 0
    neuralsim data generate data/legible_recovery --scene legible --episodes 1500 --seed 30000 --failure-share 0 \
        --recovery-share 1
    neuralsim train-flow-policy --out runs/flow_legible --device cuda   # GPU: bf16, batch 256; the default data
    python -m policies.flow.train --data data/legible_demos --out runs/flow_legible   # the same, no entry point

The default data are the five legible datasets of the README's "Visuomotor baselines" (:data:`FLOW_DATA`): the
visuomotor recipe's three, ``data/legible_demos`` (clean demonstrations) and ``data/legible_recovery`` (recovery
demonstrations: each pick approaches with the hand's yaw 15-40 degrees off and turns it back above the cube), ~3,400
demonstrations in all.  Without the recovery ones a cloned policy misreads the cube's yaw from afar, holds the yaw
it chose and closes its fingers on the cube's top; with them it turns the hand above the cube (docs/EXPERIMENTS.md).

Every frame of the chosen episodes (the successful ones without an injected failure mode, unless told otherwise) is a
sample: the config's views and the joint and gripper state at that frame, the instruction's tokens, and as target
the next ``chunk_size`` actions as the Cartesian head defines them (:func:`policies.visuomotor.cartesian.tool_offsets`:
the tool's scaled offset and rotation after each action, by forward kinematics of the recorded joints) with each
action's gripper command, normalised by their mean and std (saved in the config).  Augmentation: each view shifted
by up to ``shift`` px (a random crop of the edge-padded image, robomimic / DrQ) and the joint state jittered, the
labels re-expressed from the jittered pose (:func:`policies.visuomotor.cartesian.reexpress`).  Loss: pi0's
rectified-flow objective, the squared error of the predicted velocity at a flow time drawn from Beta(1.5, 1)
(:mod:`policies.flow.model`).

``--snapshots NAME=STEP,...`` saves the EMA weights at those steps (``OUT/snapshots/NAME``, loadable with
``make_policy("flow:OUT/snapshots/NAME")``); ``--ship`` copies them into ``policies/flow/weights/NAME``, where
``make_policy(NAME)`` finds them.  Re-running the same command resumes from ``OUT/checkpoint.pt``; batches,
augmentation and flow noise come from generators seeded by (seed, step), so a resumed run continues the same curve.
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

from ..visuomotor.train import SHIPPED_DATA, learning_rate, parse_snapshots

#: The flow policies' default training data: the visuomotor recipe's three datasets, 1,500 clean demonstrations and
#: 1,500 recovery demonstrations.
FLOW_DATA = SHIPPED_DATA + ",data/legible_demos,data/legible_recovery"

if TYPE_CHECKING:  # torch is imported when training starts, so the CLI's --help stays instant
    import torch

log = logging.getLogger(__name__)

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
#: Snapshots of one run, meant to span the skill range once trained (the names say the step).
DEFAULT_SNAPSHOTS = "flow-s1000=1000,flow-s3000=3000,flow-s8000=8000,flow-s20000=20000"
#: Options that may change between the invocations of one resumed run.
RUN_ONLY = ("max_minutes", "stop_at", "checkpoint_every", "num_threads", "progress", "device")


@dataclass
class FlowTrainConfig:
    """Options of ``neuralsim train-flow-policy`` (one docstring per field; ``--help`` is generated from them)."""

    data: str = dataclasses.field(default=FLOW_DATA, metadata={"metavar": "DIR[,DIR...]"})
    """Dataset directories written by ``neuralsim data generate``, comma-separated."""
    out: str = "runs/flow_legible"
    """Run directory: checkpoint.pt (resumable state), metrics.jsonl, snapshots/NAME."""
    scene: str = dataclasses.field(default="legible", metadata={"choices": ("classic", "legible")})
    """SimDROID scene the data must come from (classic = SimDROID-v0, legible = SimDROID-v1)."""
    preset: str = dataclasses.field(default="default", metadata={"choices": ("default", "tiny")})
    """Network size (policies.flow.config.preset); the options below override single fields of it."""
    views: str | None = None
    """Camera views, comma-separated (the wrist view and at least one exterior view); None: the preset's."""
    width: int | None = None
    """Channels of the trunk's first stage (ResNet-18: 64); None: the preset's."""
    layers: int | None = None
    """Transformer layers of the flow head; None: the preset's."""
    flow_steps: int | None = None
    """Euler steps at inference, saved in the config; None: the preset's."""
    chunk_size: int | None = None
    """Actions per generated chunk; None: the preset's."""
    steps: int = 20000
    """Total optimiser steps (the run stops at the last snapshot if that is later)."""
    snapshots: str = DEFAULT_SNAPSHOTS
    """Checkpoints to save, NAME=STEP,... (EMA weights at that step)."""
    ship: bool = False
    """Copy the snapshots into policies/flow/weights/NAME (the package's shipped checkpoints)."""
    batch_size: int = 256
    """Samples per optimiser step."""
    lr: float = 3e-4
    """Peak AdamW learning rate (linear warm-up over 100 steps, cosine decay to 10% at --steps)."""
    weight_decay: float = 1e-4
    """AdamW weight decay."""
    ema: float = 0.999
    """Decay of the weights' exponential moving average that the snapshots hold."""
    shift: int = 4
    """Largest random shift of each view in pixels (a random crop of the edge-padded image; 0 = none)."""
    state_noise: float = 0.02
    """Std of the Gaussian jitter added to the joint positions the policy reads [rad]; the labels are re-expressed
    from the jittered tool pose, so they still point at the demonstration's poses."""
    successful_only: bool = True
    """Clone only the successful episodes (the demonstrations); --no-successful-only takes every episode."""
    include_failure_modes: bool = False
    """Also clone episodes that had a failure mode injected (when successful_only, only the successful ones)."""
    max_episodes: int | None = None
    """Use only the first N episodes (after filtering); None = all."""
    seed: int = 0
    """Seed of the initial weights, the batches, the augmentation and the flow noise."""
    checkpoint_every: int = 500
    """Steps between resumable checkpoints (and at every snapshot and at the end)."""
    num_threads: int = 1
    """torch CPU threads."""
    device: str = "cpu"
    """torch device: cpu, or cuda (bf16 autocast, the images kept on the GPU)."""
    max_minutes: float | None = None
    """Stop cleanly (checkpoint written, resumable) after this many minutes of training."""
    stop_at: int | None = None
    """Stop cleanly (checkpoint written, resumable) once this step is reached, before the end of the run."""
    progress: bool = True
    """Show a progress bar."""

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or self.checkpoint_every < 1:
            raise ValueError(f"--steps, --batch-size and --checkpoint-every must be >= 1, got {self.steps}, "
                             f"{self.batch_size}, {self.checkpoint_every}")
        if self.shift < 0 or self.state_noise < 0:
            raise ValueError(f"--shift and --state-noise must be >= 0, got {self.shift}, {self.state_noise}")
        if not (self.lr > 0 and 0 <= self.ema < 1 and self.weight_decay >= 0):
            raise ValueError(f"need --lr > 0, 0 <= --ema < 1, --weight-decay >= 0; got {self.lr}, {self.ema}, "
                             f"{self.weight_decay}")
        if not self.device.startswith(("cpu", "cuda")):
            raise ValueError(f"--device must be cpu or cuda[:N], got {self.device!r}")
        parse_snapshots(self.snapshots)
        self.model_config()  # refuses a bad architecture before any data is read

    def model_config(self, **fields):
        """The :class:`~policies.flow.config.FlowConfig` of this run (its preset with this run's overrides)."""
        from .config import preset

        base = dataclasses.asdict(preset(self.preset))
        given = {"width": self.width, "layers": self.layers, "flow_steps": self.flow_steps,
                 "chunk_size": self.chunk_size, "scene": self.scene,
                 "views": None if self.views is None else tuple(v.strip() for v in self.views.split(",") if v.strip())}
        base.update({k: v for k, v in given.items() if v is not None})
        from .config import FlowConfig

        return FlowConfig(**{**base, **fields})

    @property
    def data_roots(self) -> list[str]:
        return [d.strip() for d in self.data.split(",") if d.strip()]

    @property
    def total_steps(self) -> int:
        return max([self.steps, *parse_snapshots(self.snapshots).values()])


# ----------------------------------------------------------------------------- demonstrations
@dataclass
class FlowDemonstrations:
    """Every frame of the chosen episodes as training samples (N rows)."""

    images: "torch.Tensor"   # (N, V, 3, S, S) uint8
    state: "torch.Tensor"    # (N, 8) float32: joint positions, gripper
    joints: "torch.Tensor"   # (N, 7) float64: the same joints, for exact re-expression of the labels
    chunks: "torch.Tensor"   # (N, H, 7) float32: 6 scaled tool offsets and the gripper command per action
    tokens: "torch.Tensor"   # (N, 3) long
    episodes: int

    def __len__(self) -> int:
        return len(self.state)


def load_chunks(roots: list[str], views: tuple[str, ...], chunk_size: int, image_size: int, scene: str,
                successful_only: bool = True, include_failure_modes: bool = False, max_episodes: int | None = None,
                progress: bool = True) -> FlowDemonstrations:
    """Read the chosen episodes of ``roots`` into samples (module docstring); views of another size are resized
    (bilinear, antialiased).

    Raises:
        DatasetError: a root is not a SimDROID dataset of ``scene``, or no episode qualifies.
    """
    import torch
    import torch.nn.functional as F
    from tqdm.auto import tqdm

    from neuralsim.data.reader import DatasetError, detect_layout, list_episodes, load_episode
    from neuralsim.data.writer import read_info
    from neuralsim.episode import VIEW_NAMES

    from ..visuomotor.cartesian import tool_offsets
    from ..visuomotor.tokens import instruction_tokens

    chosen = []
    for root in roots:
        if detect_layout(root) != "simdroid":
            raise DatasetError(f"{root!r} is not a SimDROID dataset (write one with `neuralsim data generate`)")
        made_in = ((read_info(root) or {}).get("generation") or {}).get("scene", "classic")
        if made_in != scene:
            raise DatasetError(f"{root!r} was generated in the {made_in!r} scene, but --scene {scene} was asked; "
                               f"generate data with `neuralsim data generate DIR --scene {scene}` or pass --scene "
                               f"{made_in}")
        for rec in list_episodes(root):
            if (rec.get("success") or not successful_only) and (include_failure_modes or rec.get("failure") is None):
                chosen.append((root, rec))
    chosen = chosen[:max_episodes] if max_episodes is not None else chosen
    if not chosen:
        raise DatasetError(f"no episodes to clone in {roots} (successful_only={successful_only}, "
                           f"include_failure_modes={include_failure_modes})")
    idx = [VIEW_NAMES.index(v) for v in views]
    parts: dict[str, list] = {k: [] for k in ("images", "state", "joints", "chunks", "tokens")}
    for root, rec in tqdm(chosen, desc="reading episodes", unit="ep", disable=not progress):
        ep = load_episode(root, rec)
        t = len(ep)
        frames = torch.from_numpy(np.ascontiguousarray(ep.frames[:, idx])).permute(0, 1, 4, 2, 3)  # (T, V, 3, h, w)
        if frames.shape[-2:] != (image_size, image_size):
            small = F.interpolate(frames.flatten(0, 1).float(), size=(image_size, image_size), mode="bilinear",
                                  antialias=True, align_corners=False)
            frames = small.round().clamp(0, 255).to(torch.uint8).view(t, len(idx), 3, image_size, image_size)
        rows = np.minimum(np.arange(t)[:, None] + np.arange(chunk_size)[None], t - 1)  # (T, H): actions t .. t+H-1
        parts["images"].append(frames.contiguous())
        parts["state"].append(np.concatenate([ep.joint_position, ep.gripper_position], 1).astype(np.float32))
        parts["joints"].append(ep.joint_position.astype(np.float64))
        parts["chunks"].append(np.concatenate([tool_offsets(ep.joint_position, chunk_size),
                                               ep.actions[rows][..., 7:]], -1).astype(np.float32))
        parts["tokens"].append(np.tile(instruction_tokens(rec["instruction"]), (t, 1)))
    return FlowDemonstrations(images=torch.cat(parts["images"]),
                              state=torch.from_numpy(np.concatenate(parts["state"])),
                              joints=torch.from_numpy(np.concatenate(parts["joints"])),
                              chunks=torch.from_numpy(np.concatenate(parts["chunks"])),
                              tokens=torch.from_numpy(np.concatenate(parts["tokens"])).long(), episodes=len(chosen))


# ----------------------------------------------------------------------------- batches and loss
def random_shift(images: "torch.Tensor", pad: int, generator: "torch.Generator") -> "torch.Tensor":
    """Each image (B, C, H, W) shifted by its own random offset in [-pad, pad] px (a random crop of the
    edge-replicated image), on the images' device; the offsets come from ``generator`` (CPU)."""
    import torch
    import torch.nn.functional as F

    if pad == 0:
        return images
    b, c, h, w = images.shape
    padded = F.pad(images, (pad,) * 4, mode="replicate")                          # (B, C, H + 2p, W + 2p)
    dx, dy = torch.randint(0, 2 * pad + 1, (2, b), generator=generator).to(images.device)
    rows = (dy[:, None] + torch.arange(h, device=images.device))[:, :, None]      # (B, H, 1)
    cols = (dx[:, None] + torch.arange(w, device=images.device))[:, None, :]      # (B, 1, W)
    batch = torch.arange(b, device=images.device)[:, None, None]
    return padded.permute(0, 2, 3, 1)[batch, rows, cols].permute(0, 3, 1, 2)     # (B, C, H, W)


def make_batch(demos: FlowDemonstrations, batch_size: int, generator: "torch.Generator", device: str,
               shift: int = 4, state_noise: float = 0.02) -> dict:
    """One batch drawn uniformly, augmented (views shifted, joints jittered with the labels re-expressed)."""
    import torch

    from ..visuomotor.cartesian import reexpress
    from ..visuomotor.model import tool_pose

    i = torch.randint(0, len(demos), (batch_size,), generator=generator)
    images = demos.images[i.to(demos.images.device)].to(device).float().div_(255)  # (B, V, 3, S, S)
    images = random_shift(images.flatten(0, 1), shift, generator).view_as(images)
    state, chunks = demos.state[i].clone(), demos.chunks[i]
    if state_noise > 0:
        true = demos.joints[i]
        seen = true + state_noise * torch.randn(true.shape, generator=generator, dtype=torch.float64)
        state[:, :7] = seen.float()
        chunks = torch.cat([torch.from_numpy(reexpress(chunks[..., :6].numpy(), true.numpy(), seen.numpy())),
                            chunks[..., 6:]], -1)
    tool = torch.from_numpy(tool_pose(state[:, :7].numpy().astype(np.float64)))
    return {"images": images, "state": state.to(device), "tool": tool.to(device), "chunks": chunks.to(device),
            "tokens": demos.tokens[i].to(device)}


def label_stats(demos: FlowDemonstrations, state_noise: float, generator: "torch.Generator", rows: int = 8192
                ) -> tuple[list[float], list[float]]:
    """Mean and std (floored at 0.01) of each action number over up to ``rows`` labels as training sees them (the
    joint jitter re-expresses the labels, which widens the rotation numbers most)."""
    import torch

    from ..visuomotor.cartesian import reexpress

    i = torch.randperm(len(demos), generator=generator)[:rows]
    chunks = demos.chunks[i]
    if state_noise > 0:
        true = demos.joints[i]
        seen = true + state_noise * torch.randn(true.shape, generator=generator, dtype=torch.float64)
        chunks = torch.cat([torch.from_numpy(reexpress(chunks[..., :6].numpy(), true.numpy(), seen.numpy())),
                            chunks[..., 6:]], -1)
    flat = chunks.flatten(0, 1).double()
    return flat.mean(0).tolist(), flat.std(0).clamp(min=1e-2).tolist()


def flow_loss(model, batch: dict, generator: "torch.Generator") -> tuple["torch.Tensor", dict]:
    """pi0's rectified-flow loss of a batch: mean squared error of the velocity at a noisy normalised chunk."""
    import torch

    from .model import flow_target, sample_times

    cfg = model.config
    mean = torch.tensor(cfg.action_mean, device=batch["chunks"].device)
    std = torch.tensor(cfg.action_std, device=batch["chunks"].device)
    actions = (batch["chunks"] - mean) / std                                     # (B, H, 7)
    noise = torch.randn(actions.shape, generator=generator).to(actions.device)
    t = sample_times(len(actions), generator).to(actions.device)
    x_t, target = flow_target(actions, noise, t)
    cuda = actions.device.type == "cuda"
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
        memory = model.encode(batch["images"], batch["state"], batch["tool"], batch["tokens"])
        v = model.velocity(x_t, t, model.context(memory))
    err = (v.float() - target) ** 2                                              # (B, H, 7)
    loss = err.mean()
    return loss, {"loss": loss.item(), "arm_mse": err[..., :6].mean().item(), "gripper_mse": err[..., 6].mean().item()}


def _seeded(seed: int, step: int) -> "torch.Generator":
    import torch

    return torch.Generator().manual_seed(int(seed) * 1_000_003 + int(step))


# ----------------------------------------------------------------------------- training
def train(cfg: FlowTrainConfig) -> dict:
    """Run (or resume) one training run; returns a summary (steps, losses, snapshot paths, wall time)."""
    import torch
    from tqdm.auto import tqdm

    from .model import FlowNet

    torch.set_num_threads(cfg.num_threads)
    if cfg.device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise RuntimeError(f"--device {cfg.device} but torch sees no CUDA device (torch {torch.__version__})")
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    snapshots = parse_snapshots(cfg.snapshots)
    total = cfg.total_steps
    shape = cfg.model_config()
    demos = load_chunks(cfg.data_roots, shape.views, shape.chunk_size, shape.image_size, cfg.scene,
                        cfg.successful_only, cfg.include_failure_modes, cfg.max_episodes, cfg.progress)
    if cfg.device.startswith("cuda"):
        demos.images = demos.images.to(cfg.device)  # uint8 views on the GPU: batches need no host copies
    action_mean, action_std = label_stats(demos, cfg.state_noise, _seeded(cfg.seed, -1))
    options = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("progress", "ship", "out")}
    mcfg = cfg.model_config(state_mean=demos.state.mean(0).tolist(),
                            state_std=demos.state.std(0).clamp(min=1e-2).tolist(),
                            action_mean=action_mean, action_std=action_std,
                            training={"options": options, "episodes": demos.episodes, "samples": len(demos)})
    torch.manual_seed(cfg.seed)
    model = FlowNet(mcfg).to(cfg.device)
    ema = FlowNet(mcfg).to(cfg.device)
    ema.load_state_dict(model.state_dict())
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    fixed = {k: v for k, v in options.items() if k not in RUN_ONLY}
    step, ckpt = 0, out / "checkpoint.pt"
    if ckpt.is_file():
        state = torch.load(ckpt, map_location=cfg.device, weights_only=True)
        if state["options"] != fixed:
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
                    "step": step, "options": fixed}, tmp)
        tmp.replace(ckpt)

    t0 = time.perf_counter()
    bar = tqdm(total=total, initial=step, desc="train-flow-policy", unit="step", disable=not cfg.progress)
    losses: list[float] = []
    stopped_early = False
    with (out / "metrics.jsonl").open("a") as metrics:
        while step < total:
            if (cfg.max_minutes is not None and time.perf_counter() - t0 > 60 * cfg.max_minutes) or (
                    cfg.stop_at is not None and step >= cfg.stop_at):
                stopped_early = True
                break
            model.train()
            lr = learning_rate(step, cfg.steps, cfg.lr)
            for group in opt.param_groups:
                group["lr"] = lr
            generator = _seeded(cfg.seed, step)
            batch = make_batch(demos, cfg.batch_size, generator, cfg.device, cfg.shift, cfg.state_noise)
            # oneDNN's CPU kernels crash this model's backward pass on some CPUs (a segfault with torch 2.13 on an
            # AMD EPYC), so training takes torch's own CPU convolutions; inference keeps oneDNN
            with torch.backends.mkldnn.flags(enabled=False):
                loss, parts = flow_loss(model, batch, generator)
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
            losses.append(parts["loss"])
            bar.update()
            if step % 25 == 0 or step == total:
                bar.set_postfix(loss=f"{parts['loss']:.3f}", arm=f"{parts['arm_mse']:.3f}")
                metrics.write(json.dumps({"step": step, "lr": lr, **parts,
                                          "seconds": round(time.perf_counter() - t0, 1)}) + "\n")
                metrics.flush()
            for name, at in snapshots.items():
                if at == step:
                    ema.config.training = {**mcfg.training, "step": step}
                    ema.save_pretrained(out / "snapshots" / name)
            if step % cfg.checkpoint_every == 0 or step in snapshots.values() or step == total:
                save_checkpoint()
    bar.close()
    save_checkpoint()
    shipped = []
    if cfg.ship and not stopped_early:
        for name in snapshots:
            src, dst = out / "snapshots" / name, WEIGHTS_DIR / name
            if dst.exists():
                shutil.rmtree(dst)
            shutil.copytree(src, dst)
            shipped.append(str(dst))
    k = max(1, min(10, len(losses) // 2))
    return {"steps": step, "total": total, "stopped_early": stopped_early, "episodes": demos.episodes,
            "samples": len(demos), "seconds": round(time.perf_counter() - t0, 1),
            "loss_first": float(np.mean(losses[:k])) if losses else None,
            "loss_last": float(np.mean(losses[-k:])) if losses else None,
            "parameters": sum(p.numel() for p in model.parameters()),
            "snapshots": {n: str(out / "snapshots" / n) for n, s in snapshots.items() if s <= step},
            "shipped": shipped}


# ----------------------------------------------------------------------------- command line
EPILOG = """example:
  neuralsim data generate data/legible --scene legible --episodes 720
  neuralsim train-flow-policy --data data/legible --out runs/flow_legible --device cuda
  neuralsim train-flow-policy --data data/legible --out runs/flow_legible --device cuda   # again: resumes
  neuralsim train-flow-policy --data data/legible --out runs/flow_tiny --preset tiny --steps 50 --batch-size 16"""


def build_parser(subparsers=None):
    """The ``train-flow-policy`` parser, as a ``neuralsim`` subcommand or standalone (``python -m``)."""
    import argparse

    from neuralsim.world_model.arguments import add_arguments

    kw = dict(description="Flow-matching behaviour cloning of the flow policies (a ResNet-18-style trunk per view, "
                          "pi0's rectified-flow head over Cartesian action chunks) on SimDROID datasets: one run, "
                          "snapshots at given steps, resumable (re-run the same command), seeded.",
              formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    if subparsers is None:
        p = argparse.ArgumentParser(prog="python -m policies.flow.train", **kw)
    else:
        p = subparsers.add_parser("train-flow-policy", help="train the flow-matching policies (resumable)", **kw)
    add_arguments(p, FlowTrainConfig)
    p.set_defaults(func=run_command)
    return p


def register_command(subparsers) -> None:
    """Add ``train-flow-policy`` to the ``neuralsim`` command line (the ``neuralsim.commands`` entry point)."""
    build_parser(subparsers)


def run_command(args) -> int:
    from neuralsim.world_model.arguments import given

    summary = train(FlowTrainConfig(**given(args, FlowTrainConfig)))
    print(json.dumps(summary, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    return run_command(build_parser().parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
