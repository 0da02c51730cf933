"""Train the world model: ``neuralsim train --stage autoencoder|decoder|dit --data DIR --out DIR ...``.

Copy-paste recipe (SimDROID data in ``data/simdroid``; ``synthetic`` is a built-in toy source)::

    neuralsim train --stage autoencoder --data data/simdroid --out runs/ae --steps 3000
    neuralsim train --stage dit --objective diffusion_forcing --init-from runs/ae/model --data data/simdroid \\
        --out runs/df --steps 8000
    neuralsim train --stage dit --objective step_forcing --init-from runs/df/model --data data/simdroid \\
        --out runs/sf --steps 2000
    # optional: train the decoder further (the DiT untouched)
    neuralsim train --stage decoder --init-from runs/sf/model --data data/simdroid --out runs/dec --steps 3000
    neuralsim train --stage decoder --init-from runs/sf/model --decoder-layers-per-block 0 ...  # a faster decoder
    neuralsim train --stage decoder --init-from runs/sf/model --rollout-share 0.75 ...  # decode the DiT's own latents

Every stage writes into ``--out``:

* ``model/``        -- the EMA weights as a :class:`WorldModel` checkpoint (``from_pretrained``-able);
* ``checkpoint/``   -- resumable state: raw weights, EMA, optimiser, step, RNG (safetensors + JSON),
  replaced atomically every ``--checkpoint-every`` steps and on exit;
* ``metrics.jsonl`` -- one JSON line per logged step; ``samples/*.mp4`` -- GT | generated collages.

Re-running the same command resumes from ``checkpoint/`` (``--no-resume`` starts over).  Batches and
noise are drawn from generators seeded by (seed, step, rank) (the noise from one on the training device),
so a resumed run continues the very same loss curve on the same device.  ``--max-minutes`` (counted from
the first step) and ``--deadline`` (a wall-clock end; with ``--cool-down-secs`` the rate anneals towards it)
stop cleanly with a checkpoint.  On CUDA the loss runs under bf16
autocast; under ``torchrun`` (WORLD_SIZE > 1) the trained module is wrapped in DDP and rank 0 writes.

The DiT stage trains on frozen-autoencoder latents: on a dataset root it first encodes every episode
once into ``<data>/.latent_cache`` (:mod:`neuralsim.world_model.latents`; ~5 ms per view, reused by
every later DiT run with the same autoencoder) and keeps them all on the training device.

The optional ``decoder`` stage trains only the autoencoder's decoder (and its post-quantisation conv)
on the stored latents, with the encoder -- hence the latent space the DiT was trained in -- frozen:
more reconstruction training for the decoder without retraining the DiT.  It reads the same latent
store (the store's fingerprint covers the encoder only) and the dataset's frame cache.  With
``--decoder-layers-per-block N`` it first rebuilds the decoder at another depth
(:meth:`~neuralsim.world_model.model.WorldModel.with_decoder_layers`; 0 = one ResNet per level, the
faster decoder of world model v4.1) and trains that.  With ``--rollout-share P`` a share P of its pairs
take the latent the model itself generated for the frame in an open-loop rollout of the episode
(:mod:`neuralsim.world_model.rollouts`, made once per model and dataset) instead of the encoded one:
the decoder then learns to decode what the DiT writes, drift included.

Measured on the 2-core CPU (default config, batch 8 x 16 frames, 48 tokens/frame): ~0.9 s/step
Diffusion Forcing, ~1.1 s/step Step Forcing (more when other work shares the cores).
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import math
import os
import random
import shutil
import statistics
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

STAGES = ("autoencoder", "decoder", "dit")


@dataclass
class TrainConfig:
    """Options of one training run (parsed from the CLI)."""

    stage: str = "dit"
    """``autoencoder`` (per-view reconstruction), ``decoder`` (the decoder alone, on frozen-encoder latents)
    or ``dit`` (DiT on frozen autoencoder latents)."""
    objective: str = "diffusion_forcing"
    """DiT objective, see :data:`neuralsim.world_model.objectives.OBJECTIVES`."""
    data: str = "synthetic"
    """Dataset root for ``neuralsim.data.reader.ClipDataset``, several joined by commas (a
    ``ConcatClipDataset``: clips drawn uniformly over all of them), or ``synthetic[:N]``."""
    out: str = "runs/world_model"
    """Output directory (model/, checkpoint/, metrics.jsonl, samples/)."""
    init_from: str | None = None
    """A WorldModel checkpoint to start from (e.g. the autoencoder stage's or Diffusion Forcing's model/)."""
    config: str = "default"
    """Config preset used when not initialising from a checkpoint."""
    steps: int = 1000
    """Total optimiser steps of this stage (a resumed run continues up to this number)."""
    batch_size: int = 8
    """Clips per step per process."""
    lr: float = 3e-4
    warmup: int = 200
    decay_steps: int = 0
    """Warmup-stable-decay: the learning rate falls linearly to 0 over the last ``decay_steps`` steps of
    the budget (0: constant after warmup).  A run trained at a constant rate can be resumed with a larger
    ``steps`` and a ``decay_steps`` to anneal it."""
    weight_decay: float = 1e-3
    grad_clip: float = 1.0
    ema_decay: float = 0.999
    frames_per_clip: int = 4
    """Autoencoder stage: random frames taken from each clip."""
    seed: int = 0
    device: str = "cpu"
    resume: bool | None = None
    """None: resume if ``out/checkpoint`` exists; True: require it; False: start over."""
    max_minutes: float | None = None
    """Stop cleanly (checkpoint and model written) once this many minutes have passed since the first step."""
    deadline: float | None = None
    """Wall-clock end of the run, in Unix seconds.  A step starts only when it is expected (from the median of
    the last steps' times) to end before it; then the checkpoint and the model are written and the run stops,
    as with ``max_minutes``.  Unlike ``max_minutes`` it does not count the start-up (imports, the latent
    store), so a script can give several stages one common end.  A deadline already past runs no step."""
    cool_down_secs: float = 0.0
    """With ``deadline``: the learning rate falls linearly to 0 over the last ``cool_down_secs`` seconds before
    it (on top of the warmup and ``decay_steps``), so a run of unknown speed still ends annealed."""
    checkpoint_every: int = 200
    log_every: int = 10
    sample_every: int = 1000
    """Steps between sample videos (0: only at the end; -1: never)."""
    latent_cache_clips: int = 20000
    """DiT stage on a dataset without episodes (``synthetic``): clips memoised in memory (fp16)."""
    latent_disk_cache: bool = True
    """DiT stage on a dataset root: encode every episode once into ``<data>/.latent_cache`` first."""
    num_threads: int | None = None
    progress: bool = True
    decoder_layers_per_block: int | None = None
    """Decoder stage started from ``init_from``: rebuild the decoder with this many layers per block
    first (:meth:`~neuralsim.world_model.model.WorldModel.with_decoder_layers`; 0 = a faster decoder)."""
    rollout_share: float = 0.0
    """Decoder stage: the share of training pairs whose latent is the model's own open-loop prediction of the
    frame (:class:`~neuralsim.world_model.rollouts.RolloutLatents`, made once per model and dataset) instead of
    the encoded frame.  0: encoded frames only, as before."""
    rollout_seed: int | None = None
    """Decoder stage with ``rollout_share``: the noise seed of those rollouts (None: ``seed``).  The rollouts are
    cached per (DiT, seed), so fixing this lets runs with other ``seed`` values reuse one set of rollouts."""
    reference_head: int = 0
    """Decoder stage: train only the reference head (``AutoencoderConfig.reference_head_channels``), the decoder
    frozen; a model without one first gets a fresh head this wide (one with a head of another width is refused).
    0: train the decoder, and a head the model already has.
    Every decoder-stage pair then also carries its episode's first frame, the head's reference."""
    change_weight: float = 0.0
    """Decoder stage with a reference head: pixels that differ from the episode's first frame weigh 1 + this in
    the loss instead of 1 (``ViewAutoencoder.decoder_loss``), so the head learns not to paint what moved where
    it stood.  0: every pixel alike."""
    gripper_conditioning: str | None = None
    """DiT stage: train the DiT on this gripper signal (``WorldModelConfig.gripper_conditioning``: ``"measured"``
    or ``"command"``), switching an ``init_from`` model's to it; None keeps the model's (a fresh model: measured)."""
    arm_conditioning: str | None = None
    """DiT stage: train the DiT on this arm pose (``WorldModelConfig.arm_conditioning``: ``"measured"`` or
    ``"replay"``), switching an ``init_from`` model's to it; None keeps the model's (a fresh model: measured)."""
    compile: bool = False
    """Run the trained module through ``torch.compile`` (fewer, fused kernels; the first steps wait for
    the compilation).  The weights, checkpoints and EMA are the uncompiled module's, so a run can be
    resumed with or without it; the losses differ from an eager run's by float rounding."""


# ----------------------------------------------------------------------------- CLI
def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the ``neuralsim train`` options to ``parser``."""
    from .config import ARM_CONDITIONINGS, GRIPPER_CONDITIONINGS, PRESETS
    from .objectives import OBJECTIVES

    d = TrainConfig()
    parser.add_argument("--stage", choices=STAGES, default=d.stage,
                        help="autoencoder (reconstruction), decoder (the decoder alone on frozen-encoder latents) or "
                             "dit (the DiT on frozen latents); default %(default)s")
    parser.add_argument("--objective", choices=sorted(OBJECTIVES), default=d.objective,
                        help="the DiT's training objective (default %(default)s; the shipped model: diffusion_forcing, "
                             "then step_forcing)")
    parser.add_argument("--data", default=d.data,
                        help="dataset root, several roots joined by commas (their clips mixed, e.g. expert and "
                             "idle episodes), or 'synthetic[:N]'")
    parser.add_argument("--out", default=d.out, help="run directory: model/, checkpoint/, metrics.jsonl, samples/ "
                                                     "(default %(default)s)")
    parser.add_argument("--init-from", dest="init_from", default=None,
                        help="a world model directory (or hub id) to start from, e.g. the previous stage's model/")
    parser.add_argument("--config", choices=PRESETS, default=d.config,
                        help="architecture preset when not starting from --init-from (default %(default)s)")
    parser.add_argument("--steps", type=int, default=d.steps,
                        help="total optimiser steps of this stage; a resumed run continues up to it (default "
                             "%(default)s)")
    parser.add_argument("--batch-size", dest="batch_size", type=int, default=d.batch_size,
                        help="clips per step (default %(default)s)")
    parser.add_argument("--lr", type=float, default=d.lr, help="peak learning rate, AdamW (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=d.warmup, help="linear warm-up steps (default %(default)s)")
    parser.add_argument("--decay-steps", dest="decay_steps", type=int, default=d.decay_steps,
                        help="anneal the learning rate linearly to 0 over the last N steps of --steps (default 0: "
                             "constant after warmup); resume a run with a larger --steps and this to cool it down")
    parser.add_argument("--weight-decay", dest="weight_decay", type=float, default=d.weight_decay,
                        help="AdamW weight decay (default %(default)s)")
    parser.add_argument("--ema-decay", dest="ema_decay", type=float, default=d.ema_decay,
                        help="decay of the weights' moving average that model/ holds (default %(default)s)")
    parser.add_argument("--frames-per-clip", dest="frames_per_clip", type=int, default=d.frames_per_clip,
                        help="autoencoder stage: frames sampled per clip")
    parser.add_argument("--grad-clip", dest="grad_clip", type=float, default=d.grad_clip,
                        help="gradient norm clip (default %(default)s)")
    parser.add_argument("--seed", type=int, default=d.seed, help="seed of the initialisation, batches and noise "
                                                                "(default %(default)s)")
    parser.add_argument("--device", default=d.device, help="cpu, cuda, cuda:N")
    g = parser.add_mutually_exclusive_group()
    g.add_argument("--resume", dest="resume", action="store_true", default=None,
                   help="require OUT/checkpoint and continue it (default: continue it if it exists)")
    g.add_argument("--no-resume", dest="resume", action="store_false", help="start over even if OUT/checkpoint exists")
    parser.add_argument("--decoder-layers-per-block", dest="decoder_layers_per_block", type=int, default=None,
                        help="--stage decoder with --init-from: prune (or deepen) the decoder to this many layers "
                             "per block before training it (0: one ResNet per level, a faster decoder)")
    parser.add_argument("--max-minutes", dest="max_minutes", type=float, default=None,
                        help="stop cleanly, with a checkpoint, this many minutes after the first step")
    parser.add_argument("--deadline", type=parse_deadline, default=None,
                        help="stop cleanly, with a checkpoint, by this wall-clock time: Unix seconds or ISO 8601 "
                             "(e.g. 2026-11-26T09:30:00+00:00); start-up time counts against it")
    parser.add_argument("--cool-down-secs", dest="cool_down_secs", type=float, default=d.cool_down_secs,
                        help="with --deadline: anneal the learning rate linearly to 0 over its last N seconds")
    parser.add_argument("--checkpoint-every", dest="checkpoint_every", type=int, default=d.checkpoint_every,
                        help="steps between resumable checkpoints (default %(default)s)")
    parser.add_argument("--log-every", dest="log_every", type=int, default=d.log_every,
                        help="steps between metrics.jsonl lines (default %(default)s)")
    parser.add_argument("--sample-every", dest="sample_every", type=int, default=d.sample_every,
                        help="steps between sample videos (0: only at the end; -1: never; default %(default)s)")
    parser.add_argument("--latent-cache-clips", dest="latent_cache_clips", type=int, default=d.latent_cache_clips,
                        help="--data synthetic: clips memoised in memory (default %(default)s)")
    parser.add_argument("--no-latent-disk-cache", dest="latent_disk_cache", action="store_false",
                        help="encode clips as they are drawn instead of every episode up front")
    parser.add_argument("--num-threads", dest="num_threads", type=int, default=None,
                        help="torch CPU threads (default: torch's)")
    parser.add_argument("--no-progress", dest="progress", action="store_false")
    parser.add_argument("--rollout-share", dest="rollout_share", type=float, default=d.rollout_share,
                        help="--stage decoder: this share of the training pairs decode the model's own open-loop "
                             "latents of the frame (rolled out once per model and dataset, cached under "
                             "<data>/.rollout_cache) instead of the encoded frame (default 0)")
    parser.add_argument("--rollout-seed", dest="rollout_seed", type=int, default=d.rollout_seed,
                        help="with --rollout-share: the rollouts' noise seed (default: --seed). Rollouts are cached "
                             "per model and seed, so a fixed one lets runs with other --seed values reuse them")
    parser.add_argument("--reference-head", dest="reference_head", type=int, default=d.reference_head,
                        help="--stage decoder: train only the reference head (it refines each decoded view with the "
                             "episode's first, true view), adding a fresh one this many channels wide to a model "
                             "without one (default 0: none)")
    parser.add_argument("--change-weight", dest="change_weight", type=float, default=d.change_weight,
                        help="with a reference head: pixels that changed since the first frame weigh 1 + this in the "
                             "loss (default 0), so the head does not paint moved objects where they stood")
    parser.add_argument("--gripper-conditioning", dest="gripper_conditioning", choices=GRIPPER_CONDITIONINGS,
                        default=d.gripper_conditioning,
                        help="--stage dit: the gripper signal the DiT is conditioned on: 'measured' (the recorded "
                             "position, stopped by a grasped object) or 'command' (the gripper command through the "
                             "action adapter, what NeuralDROID gives it); default: the --init-from model's")
    parser.add_argument("--arm-conditioning", dest="arm_conditioning", choices=ARM_CONDITIONINGS,
                        default=d.arm_conditioning,
                        help="--stage dit: the arm pose the DiT is conditioned on: 'measured' (forward kinematics of "
                             "the recorded joints, held back by contacts) or 'replay' (of the action adapter's replay "
                             "of the recorded actions, what NeuralDROID gives it); default: the --init-from model's")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the trained module (fused kernels; minutes of compilation first)")


def parse_deadline(text: str) -> float:
    """``--deadline``'s value as Unix seconds: a number, or an ISO 8601 time (without a zone: local time)."""
    from datetime import datetime

    try:
        value = float(text)
    except ValueError:
        try:
            value = datetime.fromisoformat(text).timestamp()
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--deadline {text!r}: give Unix seconds or an ISO 8601 time such as 2026-11-26T09:30:00+00:00"
            ) from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"--deadline {text!r} is not a finite time")
    return value


def run(args: argparse.Namespace) -> int:
    """Entry point used by ``neuralsim train``; returns a process exit code."""
    fields = TrainConfig.__dataclass_fields__
    cfg = TrainConfig(**{k: v for k, v in vars(args).items() if k in fields})
    train(cfg)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m neuralsim.world_model.train", description=__doc__.split("\n")[0])
    configure_parser(parser)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    return run(parser.parse_args(argv))


# ----------------------------------------------------------------------------- data
def open_dataset(spec: str, clip_length: int, image_size: int, seed: int = 0):
    """``synthetic[:N]`` -> :class:`SyntheticClipDataset`; ``a,b,...`` -> a ``ConcatClipDataset`` of the
    roots; anything else -> ``ClipDataset(spec, ...)``."""
    if spec == "synthetic" or spec.startswith("synthetic:"):
        from .synthetic import SyntheticClipDataset

        n = int(spec.split(":", 1)[1]) if ":" in spec else 64
        return SyntheticClipDataset(num_clips=n, clip_length=clip_length, image_size=image_size, seed=seed)
    if "," in spec:
        from neuralsim.data.reader import ConcatClipDataset

        roots = [r.strip() for r in spec.split(",")]
        if not all(roots) or any(r.startswith("synthetic") for r in roots):
            raise ValueError(f"--data {spec!r}: give dataset roots separated by commas, none empty or synthetic")
        return ConcatClipDataset([open_dataset(r, clip_length, image_size, seed) for r in roots])
    if not Path(spec).exists():
        raise FileNotFoundError(f"--data {spec!r} does not exist (give a dataset root or 'synthetic[:N]')")
    try:
        from neuralsim.data.reader import ClipDataset
    except ImportError as e:
        raise RuntimeError(f"cannot import neuralsim.data.reader.ClipDataset to read {spec!r}: {e}") from e
    return ClipDataset(spec, clip_length=clip_length, image_size=image_size)


def fetch_clips(dataset, indices: list[int], image_size: int, gripper: str = "measured", arm: str = "measured"):
    """Stack dataset items: uint8 frames (B, T, V, H, W, 3) and cond (B, T, 7).

    ``gripper="command"``: the gripper entry is the command through the adapter's lag, started from the clip's
    first measured gripper; ``arm="replay"``: the pose entries are the adapter's replay of the clip's actions from
    its first measured joints (:func:`~neuralsim.world_model.latents.env_cond`).  A clip starts its replay afresh,
    where the env's (and :class:`~neuralsim.world_model.latents.LatentStore`'s) runs from the episode's start."""
    import numpy as np
    import torch

    from .latents import env_cond

    frames, conds = [], []
    for i in indices:
        item = dataset[int(i)]
        f = torch.as_tensor(item["frames"])
        if f.dtype != torch.uint8 or f.ndim != 5 or f.shape[-3:] != (image_size, image_size, 3):
            raise ValueError(f"dataset item {i}: frames must be uint8 (T, V, {image_size}, {image_size}, 3) for "
                             f"this model, got {f.dtype} {tuple(f.shape)}")
        cart = torch.as_tensor(item["cartesian_position"], dtype=torch.float32)
        grip = torch.as_tensor(item["gripper_position"], dtype=torch.float32).reshape(len(cart), 1)
        frames.append(f)
        cond = torch.cat([cart, grip], dim=-1)
        if gripper != "measured" or arm != "measured":
            cond = torch.from_numpy(env_cond(cond.numpy(), np.asarray(item["joint_position"]),
                                             np.asarray(item["actions"]),
                                             gripper, arm))
        conds.append(cond)
    return torch.stack(frames), torch.stack(conds)


class LatentMemo:
    """Encode clips with the frozen autoencoder once; keep raw latents (fp16) for ``capacity`` clips."""

    def __init__(self, model, dataset, image_size: int, capacity: int):
        self.model, self.dataset, self.image_size, self.capacity = model, dataset, image_size, capacity
        self.store: dict[int, tuple[Any, Any]] = {}

    def get(self, indices: list[int], device):
        import torch

        batch = {i: self.store[i] for i in indices if i in self.store}
        todo = sorted({i for i in indices if i not in batch})
        if todo:
            frames, cond = fetch_clips(self.dataset, todo, self.image_size,
                                       getattr(self.model.config, "gripper_conditioning", "measured"),
                                       getattr(self.model.config, "arm_conditioning", "measured"))
            with torch.no_grad():
                z = self.model.autoencoder.encode(frames.to(device)).to("cpu").half()  # (b, T, V, C, h, w)
            for j, i in enumerate(todo):
                batch[i] = (z[j], cond[j])
                if len(self.store) < self.capacity:
                    self.store[i] = batch[i]
        zs = [batch[i][0].float() for i in indices]
        cs = [batch[i][1] for i in indices]
        return torch.stack(zs).to(device), torch.stack(cs).to(device)


# ----------------------------------------------------------------------------- checkpoint I/O
def _atomic_dir_write(final: Path, write) -> None:
    tmp, old = final.with_name(final.name + ".tmp"), final.with_name(final.name + ".old")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write(tmp)
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def _optimizer_to_safetensors(opt) -> tuple[dict, dict]:
    sd = opt.state_dict()
    tensors, scalars = {}, {}
    for idx, st in sd["state"].items():
        for k, v in st.items():
            if hasattr(v, "shape"):
                tensors[f"state.{idx}.{k}"] = v.detach().cpu().contiguous()
            else:
                scalars[f"{idx}.{k}"] = v
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def _optimizer_from_safetensors(opt, tensors: dict, meta: dict) -> None:
    state: dict = {}
    for name, v in tensors.items():
        _, idx, k = name.split(".", 2)
        state.setdefault(int(idx), {})[k] = v
    for name, v in meta["scalars"].items():
        idx, k = name.split(".", 1)
        state.setdefault(int(idx), {})[k] = v
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


def learning_rate(cfg: TrainConfig, step: int, now: float | None = None) -> float:
    """Learning rate of optimiser step ``step`` (0-based): linear warmup, constant, then the decay phase;
    with ``cfg.cool_down_secs`` also the time-based cool-down at wall-clock time ``now`` (Unix seconds)."""
    lr = cfg.lr * min(1.0, (step + 1) / max(1, cfg.warmup))
    if cfg.decay_steps > 0:
        lr *= min(1.0, (cfg.steps - step) / cfg.decay_steps)
    if cfg.cool_down_secs > 0 and cfg.deadline is not None:
        now = time.time() if now is None else now
        lr *= min(1.0, max(0.0, (cfg.deadline - now) / cfg.cool_down_secs))
    return lr


def save_checkpoint(out: Path, model, ema_params: dict, opt, step: int, cfg: TrainConfig, recipe: dict) -> None:
    """Write ``out/checkpoint`` (resumable) and ``out/model`` (EMA WorldModel) atomically."""
    import numpy as np
    import torch
    from safetensors.torch import save_file

    def write_ckpt(d: Path) -> None:
        model.config.recipe = recipe
        model.save_pretrained(d / "raw")
        save_file({k: v.detach().cpu().contiguous() for k, v in ema_params.items()}, str(d / "ema.safetensors"))
        opt_t, opt_meta = _optimizer_to_safetensors(opt)
        save_file(opt_t, str(d / "optimizer.safetensors"))
        save_file({"torch_rng": torch.get_rng_state()}, str(d / "rng.safetensors"))
        np_state = np.random.get_state()
        trainer = {"step": step, "train_config": asdict(cfg), "optimizer": opt_meta, "recipe": recipe,
                   "python_rng": repr(random.getstate()),
                   "numpy_rng": [np_state[0], np_state[1].tolist(), *np_state[2:]]}
        (d / "trainer.json").write_text(json.dumps(trainer, indent=1))

    _atomic_dir_write(out / "checkpoint", write_ckpt)

    def write_model(d: Path) -> None:
        ema_model = copy.deepcopy(model)
        ema_model.load_state_dict({**model.state_dict(), **ema_params})
        ema_model.config.recipe = recipe
        ema_model.save_pretrained(d)

    _atomic_dir_write(out / "model", write_model)


def find_checkpoint(out: Path) -> Path | None:
    for name in ("checkpoint", "checkpoint.old"):
        if (out / name / "trainer.json").is_file():
            return out / name
    return None


# ----------------------------------------------------------------------------- training
def _rank_info() -> tuple[int, int, int]:
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))


def _step_generator(seed: int, step: int, rank: int, device="cpu"):
    """The generator of one step's random draws; a fixed function of (seed, step, rank), so a resumed run
    draws what an uninterrupted one would.  The trainer draws batch indices from a CPU one and, on a GPU,
    the noise from one on the GPU (a CPU draw of a fine-latent batch's noise took ~70 ms of host time per
    step): same seed and device, same run; a CPU run and a GPU run differ."""
    import torch

    return torch.Generator(device=device).manual_seed((seed * 1_000_003 + step) * 131 + rank)


def train(cfg: TrainConfig) -> dict:
    """Run one training stage; returns a summary dict (final step, last metrics, paths)."""
    import torch

    from .config import ARM_CONDITIONINGS, GRIPPER_CONDITIONINGS, preset
    from .info import count_key as recipe_count_key
    from .model import DECODER_PREFIXES, WorldModel, load_safetensors
    from .objectives import get_objective

    if cfg.stage not in STAGES:
        raise ValueError(f"unknown stage {cfg.stage!r}; choose one of {STAGES}")
    if cfg.steps < 0 or cfg.batch_size < 1 or cfg.decay_steps < 0:
        raise ValueError(f"need steps >= 0, batch_size >= 1 and decay_steps >= 0, got {cfg.steps}, {cfg.batch_size}, "
                         f"{cfg.decay_steps}")
    if cfg.decoder_layers_per_block is not None and (cfg.stage != "decoder" or not cfg.init_from):
        raise ValueError("--decoder-layers-per-block rebuilds the decoder of an --init-from model; it needs "
                         f"--stage decoder and --init-from (got stage {cfg.stage!r}, init_from {cfg.init_from!r})")
    if not 0.0 <= cfg.rollout_share <= 1.0:
        raise ValueError(f"--rollout-share must be in [0, 1], got {cfg.rollout_share}")
    if cfg.rollout_share and cfg.stage != "decoder":
        raise ValueError(f"--rollout-share trains the decoder on the DiT's rollouts; it needs --stage decoder "
                         f"(got {cfg.stage!r})")
    if cfg.rollout_seed is not None and not cfg.rollout_share:
        raise ValueError(f"--rollout-seed seeds the rollouts of --rollout-share; it needs a share > 0 "
                         f"(got --rollout-share {cfg.rollout_share})")
    if cfg.rollout_seed is not None and cfg.rollout_seed < 0:
        raise ValueError(f"--rollout-seed must be >= 0, got {cfg.rollout_seed}")
    if cfg.reference_head < 0:
        raise ValueError(f"--reference-head is a width in channels (0: none), got {cfg.reference_head}")
    if cfg.reference_head and (cfg.stage != "decoder" or not cfg.init_from):
        raise ValueError("--reference-head adds a head to the decoder of a trained model; it needs --stage decoder "
                         f"and --init-from (got stage {cfg.stage!r}, init_from {cfg.init_from!r})")
    if not (math.isfinite(cfg.change_weight) and cfg.change_weight >= 0):
        raise ValueError(f"--change-weight must be >= 0, got {cfg.change_weight}")
    if cfg.change_weight and cfg.stage != "decoder":
        raise ValueError("--change-weight weighs the reference head's loss; it needs --stage decoder (got "
                         f"{cfg.stage!r})")
    # the conditioning switches: (TrainConfig / WorldModelConfig field, its values, what it conditions)
    conditionings = (("gripper_conditioning", GRIPPER_CONDITIONINGS, "gripper"),
                     ("arm_conditioning", ARM_CONDITIONINGS, "arm"))
    for field_name, values, _ in conditionings:
        asked, flag = getattr(cfg, field_name), "--" + field_name.replace("_", "-")
        if asked is not None and asked not in values:
            raise ValueError(f"{flag} must be one of {values}, got {asked!r}")
        if asked is not None and cfg.stage != "dit":
            raise ValueError(f"{flag} changes what the DiT reads; it needs --stage dit (got {cfg.stage!r})")
    if cfg.deadline is not None and not math.isfinite(cfg.deadline):
        raise ValueError(f"deadline must be a finite Unix time, got {cfg.deadline}")
    if not math.isfinite(cfg.cool_down_secs) or cfg.cool_down_secs < 0:
        raise ValueError(f"cool_down_secs must be >= 0, got {cfg.cool_down_secs}")
    if cfg.cool_down_secs > 0 and cfg.deadline is None:
        raise ValueError("--cool-down-secs anneals towards --deadline; give a --deadline too")
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    rank, world, local_rank = _rank_info()
    if world > 1:
        import torch.distributed as dist

        if cfg.device.startswith("cuda"):
            torch.cuda.set_device(local_rank)
            cfg.device = f"cuda:{local_rank}"
        dist.init_process_group("nccl" if cfg.device.startswith("cuda") else "gloo")
    device = torch.device(cfg.device)
    out = Path(cfg.out)
    is_main = rank == 0
    if is_main:
        out.mkdir(parents=True, exist_ok=True)

    ckpt = find_checkpoint(out)
    if cfg.resume is True and ckpt is None:
        raise FileNotFoundError(f"--resume given but {out}/checkpoint has no trainer.json")
    if cfg.resume is False:
        ckpt = None

    # --- model -------------------------------------------------------------------
    if ckpt is not None:
        model = WorldModel.from_pretrained(ckpt / "raw")
        log.info("resuming from %s", ckpt)
        for field_name, _, what in conditionings:
            asked, held = getattr(cfg, field_name), getattr(model.config, field_name)
            if asked is not None and asked != held:
                raise ValueError(f"{out} holds a run conditioned on the {held} {what}; refusing to resume it with "
                                 f"--{field_name.replace('_', '-')} {asked} (use another --out)")
    elif cfg.init_from:
        model = WorldModel.from_pretrained(cfg.init_from)
        log.info("initialised from %s (its config wins over --config)", cfg.init_from)
        depth = cfg.decoder_layers_per_block
        if depth is not None and depth != model.config.autoencoder.decoder_depth:
            model = model.with_decoder_layers(depth)
            log.info("decoder rebuilt with %d layers per block (%d ResNets per level)", depth, depth + 1)
        has = model.config.autoencoder.reference_head_channels
        if cfg.reference_head and has and has != cfg.reference_head:
            raise ValueError(f"{cfg.init_from} already has a reference head {has} wide; --reference-head "
                             f"{cfg.reference_head} would need a fresh one (train it from a model without a head, or "
                             f"pass {has})")
        if cfg.reference_head and has:
            log.info("training the model's own reference head (%d channels wide); only it trains", has)
        elif cfg.reference_head:
            torch.manual_seed(cfg.seed)
            model.autoencoder.set_reference_head(cfg.reference_head)
            log.info("a fresh reference head, %d channels wide; only it trains", cfg.reference_head)
    else:
        torch.manual_seed(cfg.seed)
        model = WorldModel(preset(cfg.config))
    for field_name, _, what in conditionings:
        asked, held = getattr(cfg, field_name), getattr(model.config, field_name)
        if ckpt is None and asked is not None and asked != held:
            log.info("the DiT's %s conditioning: %s -> %s", what, held, asked)
            setattr(model.config, field_name, asked)
    model.to(device)
    if cfg.change_weight and model.autoencoder.ref_head is None:
        raise ValueError("--change-weight weighs the reference head's loss, and this model has none; add one with "
                         "--reference-head W")
    wm_cfg = model.config
    recipe = dict(wm_cfg.recipe)
    trainable = {"autoencoder": {"autoencoder.": model.autoencoder},
                 "decoder": ({"autoencoder.ref_head.": model.autoencoder.ref_head} if cfg.reference_head else
                             {prefix: model.get_submodule(prefix.rstrip(".")) for prefix in DECODER_PREFIXES
                              if prefix != "autoencoder.ref_head." or model.autoencoder.ref_head is not None}),
                 "dit": {"dit.": model.dit}}[cfg.stage]
    model.requires_grad_(False).eval()
    for module in trainable.values():
        module.requires_grad_(True).train()
    params = {prefix + k: p for prefix, module in trainable.items() for k, p in module.named_parameters()}

    opt = make_optimizer(list(params.values()), cfg, device)
    start_step = 0
    if ckpt is not None:
        ema_t, _ = load_safetensors(ckpt / "ema.safetensors")
        ema = {k: ema_t[k].to(device) for k in params}
        trainer = json.loads((ckpt / "trainer.json").read_text())
        opt_t, _ = load_safetensors(ckpt / "optimizer.safetensors")
        _optimizer_from_safetensors(opt, opt_t, trainer["optimizer"])
        rng_t, _ = load_safetensors(ckpt / "rng.safetensors")
        torch.set_rng_state(rng_t["torch_rng"])
        start_step = int(trainer["step"])
        recipe = trainer["recipe"]
        if trainer["train_config"]["stage"] != cfg.stage or trainer["train_config"]["objective"] != cfg.objective:
            raise ValueError(f"{out} holds a {trainer['train_config']['stage']}/{trainer['train_config']['objective']} "
                             f"run; refusing to resume it as {cfg.stage}/{cfg.objective} (use another --out)")
        old = trainer["train_config"]
        # options a run keeps for its whole length (their values before the option existed: the defaults)
        for field_name, before in (("reference_head", 0), ("rollout_share", 0.0)):
            held, asked = old.get(field_name, before), getattr(cfg, field_name)
            if held != asked:
                flag = "--" + field_name.replace("_", "-")
                raise ValueError(f"{out} holds a run with {flag} {held}; refusing to resume it with {asked} "
                                 "(use the same, or another --out)")
        old_rollout_seed = old.get("rollout_seed") if old.get("rollout_seed") is not None else old.get("seed", 0)
        if cfg.rollout_share and old_rollout_seed != _rollout_seed(cfg):
            raise ValueError(f"{out} holds a run whose rollouts used seed {old_rollout_seed}; refusing to resume it "
                             f"with rollout seed {_rollout_seed(cfg)} (use the same --rollout-seed, or another --out)")
    else:
        ema = {k: p.detach().clone() for k, p in params.items()}

    dataset = open_dataset(cfg.data, wm_cfg.clip_length, wm_cfg.autoencoder.image_size, seed=cfg.seed)
    if len(dataset) == 0:
        raise ValueError(f"dataset {cfg.data!r} is empty")
    image_size = wm_cfg.autoencoder.image_size
    memo = None
    if cfg.stage in ("dit", "decoder"):
        if cfg.latent_disk_cache and hasattr(dataset, "parts"):
            from .latents import ConcatLatents, LatentStore

            memo = ConcatLatents(dataset, [LatentStore(model.autoencoder, part, device,
                                                       progress=cfg.progress and is_main,
                                                       gripper=wm_cfg.gripper_conditioning, arm=wm_cfg.arm_conditioning)
                                           for part in dataset.parts])
        elif cfg.latent_disk_cache and hasattr(dataset, "windows") and hasattr(dataset, "records"):
            from .latents import LatentStore

            memo = LatentStore(model.autoencoder, dataset, device, progress=cfg.progress and is_main,
                               gripper=wm_cfg.gripper_conditioning, arm=wm_cfg.arm_conditioning)
        else:
            memo = LatentMemo(model, dataset, image_size, cfg.latent_cache_clips)

    rollouts = None
    if cfg.rollout_share:
        rollouts = rollout_latents(model, memo, dataset, cfg, progress=cfg.progress and is_main)

    if cfg.stage == "dit" and ckpt is None and not recipe.get("latent_stats_fitted"):
        z, _ = memo.get(list(range(min(len(dataset), 32))), device)
        model.set_latent_stats(z)
        recipe["latent_stats_fitted"] = True
        log.info("latent stats: mean %s std %s", model.latent_mean.tolist(), model.latent_std.tolist())

    run_module = {"dit": model.dit, "autoencoder": _loss_module(model.autoencoder, "loss"),
                  "decoder": _loss_module(model.autoencoder, "decoder_loss")}[cfg.stage]
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        run_module = DDP(run_module, device_ids=[local_rank] if device.type == "cuda" else None)
    if cfg.compile:
        # around DDP, as PyTorch advises; each new shape or grad mode compiles once (Step Forcing's two passes:
        # one without grad, one with); the parameters stay the module's own, so saving and the EMA see no change
        run_module = torch.compile(run_module)

    if cfg.stage == "dit":
        loss_fn, loss_kwargs = get_objective(cfg.objective)
    stage_obj = cfg.objective if cfg.stage == "dit" else "reconstruction"
    budget = {"steps": cfg.steps, **({"decay_steps": cfg.decay_steps} if cfg.decay_steps else {}),
              **({"cool_down_secs": cfg.cool_down_secs} if cfg.cool_down_secs else {})}
    # The recipe counts each stage's steps over the model's whole history: a run started from a model that
    # already had this stage (e.g. more Step Forcing on the shipped model) continues its count.
    count_key = recipe_count_key(cfg.stage, stage_obj)
    if ckpt is None:
        prior_steps = int(recipe.get(count_key, 0))
        recipe["stages"] = list(recipe.get("stages", [])) + [{
            "stage": cfg.stage, "objective": stage_obj,
            "data": cfg.data, "batch_size": cfg.batch_size * world, "lr": cfg.lr, **budget,
            **({"continues_from_step": prior_steps} if prior_steps else {}),
            **({"decoder_layers_per_block": model.config.autoencoder.decoder_depth} if cfg.stage == "decoder" else {}),
            **{f: getattr(cfg, f) for f, _, _ in conditionings if getattr(cfg, f)},
            **({"rollout_share": cfg.rollout_share, "rollout_seed": _rollout_seed(cfg), "rollout_window": wm_cfg.window}
               if cfg.rollout_share else {}),
            **({"reference_head": cfg.reference_head} if cfg.reference_head else {}),
            **({"change_weight": cfg.change_weight} if cfg.change_weight else {}),
            }]
    else:
        prior_steps = int(recipe["stages"][-1].get("continues_from_step", 0)) if recipe.get("stages") else 0
        if recipe.get("stages"):  # a resumed run may carry a new step budget: the recipe names the latest one
            last = {k: v for k, v in recipe["stages"][-1].items()
                    if k not in ("steps", "decay_steps", "cool_down_secs")}
            recipe["stages"] = [*recipe["stages"][:-1], {**last, **budget}]

    metrics_path = out / "metrics.jsonl"
    if is_main and metrics_path.exists():  # drop lines a crashed run wrote after its last checkpoint
        keep = [ln for ln in metrics_path.read_text().splitlines() if ln.strip()
                and json.loads(ln).get("step", 0) <= start_step]
        metrics_path.write_text("".join(k + "\n" for k in keep) if ckpt is not None else "")

    from tqdm import tqdm

    bar = tqdm(total=cfg.steps, initial=start_step, disable=not (cfg.progress and is_main), desc=f"{cfg.stage}")
    t_start = time.time()
    last: dict = {}
    step = start_step
    stopped_early = False
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else _null()
    # On a CPU every step checks its loss before the update. On a GPU nothing in a step reads a value back
    # (a read waits for the GPU and leaves it idle while the host assembles the next batch): the metrics stay
    # tensors until a log line, and a non-finite loss is remembered on the device and raised at the next log
    # or checkpoint, before anything is written, so no checkpoint on disk ever holds the bad weights.
    check_every_step = _checks_every_step(device)
    first_bad = torch.full((), -1, dtype=torch.long, device=device)  # first step with a non-finite loss, or -1
    t_log, step_log = time.time(), start_step
    param_list, ema_list = list(params.values()), [ema[k] for k in params]
    step_secs: deque[float] = deque(maxlen=20)  # the last steps' wall times: "will the next step fit the deadline?"
    if cfg.deadline is not None and time.time() >= cfg.deadline:
        log.warning("--deadline %s has passed before the first step; no step run", _iso(cfg.deadline))
        stopped_early = True
    while step < cfg.steps and not stopped_early:
        t_step = time.time()
        if world > 1 and cfg.cool_down_secs > 0:  # one clock for the time-based rate, or the ranks' weights part
            t = torch.tensor([t_step], dtype=torch.float64, device=device)
            dist.broadcast(t, 0)
            t_step = float(t.item())
        gen = _step_generator(cfg.seed, step, rank)
        noise_gen = gen if device.type == "cpu" else _step_generator(cfg.seed, step, rank, device)
        idx = torch.randint(len(dataset), (cfg.batch_size,), generator=gen).tolist()
        lr = learning_rate(cfg, step, t_step)
        for g in opt.param_groups:
            g["lr"] = lr
        with autocast:
            if cfg.stage == "autoencoder":
                frames, _ = fetch_clips(dataset, idx, image_size)  # (B, T, V, H, W, 3)
                fi = torch.randint(frames.shape[1], (cfg.batch_size, cfg.frames_per_clip), generator=gen)
                images = frames[torch.arange(cfg.batch_size)[:, None], fi].flatten(0, 1).to(device)  # (B*F, V, H, W, 3)
                loss, metrics = run_module(images, noise_gen)
            elif cfg.stage == "decoder":
                latents, images = decoder_batch(memo, dataset, idx, image_size, cfg.frames_per_clip, gen, device,
                                                rollouts, cfg.rollout_share)
                if model.autoencoder.ref_head is not None:
                    refs = decoder_references(model, dataset, idx, cfg.frames_per_clip, image_size, device)
                    loss, metrics = run_module(latents, images, *refs, cfg.change_weight)
                else:
                    loss, metrics = run_module(latents, images)
            else:
                z, cond = memo.get(idx, device)
                x = model.normalise(z)
                loss, metrics = loss_fn(run_module, x, cond, wm_cfg.schedule, generator=noise_gen, **loss_kwargs)
        if check_every_step:
            if not torch.isfinite(loss):
                raise FloatingPointError(f"non-finite loss {float(loss.detach())} at step {step}")
        else:
            first_bad = torch.where((first_bad < 0) & ~torch.isfinite(loss.detach()), step, first_bad)
        step += 1
        gnorm = update(loss, param_list, opt, ema_list, step, cfg)
        bar.update(1)
        now = time.time()
        step_secs.append(now - t_step)
        past_deadline = False
        if cfg.deadline is not None:
            step_time = statistics.median_high(step_secs)
            past_deadline = now + step_time >= cfg.deadline
            # the bar's total: the steps the deadline leaves room for, re-estimated every 10 steps and whenever
            # the run outpaces the estimate (tqdm drops a total the count has passed and shows a bare "Nit")
            if step % 10 == 0 or step >= (bar.total or 0):
                bar.total = min(cfg.steps, max(step + 1, step + int(max(0.0, cfg.deadline - now) / step_time)))
                bar.refresh()
        out_of_time = cfg.max_minutes is not None and (now - t_start) / 60 >= cfg.max_minutes
        out_of_time = out_of_time or past_deadline
        if world > 1 and (cfg.max_minutes is not None or cfg.deadline is not None):
            # every rank stops at the same step, or the rest hang in DDP
            flag = torch.tensor([float(out_of_time)], device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            out_of_time = bool(flag.item())
        log_now = step % cfg.log_every == 0 or step == cfg.steps or out_of_time
        save_now = is_main and (step % cfg.checkpoint_every == 0 or step == cfg.steps or out_of_time)
        if log_now or save_now:  # the only place a step waits for the device
            if not check_every_step and int(first_bad) >= 0:
                raise FloatingPointError(f"non-finite loss at step {int(first_bad)}; the last checkpoint in {out} "
                                         "is from before it")
            values = _scalars({**metrics, "grad_norm": gnorm})
            now = time.time()
            last = {"step": step, **values, "lr": lr, "s_per_step": (now - t_log) / (step - step_log)}
            t_log, step_log = now, step
            bar.set_postfix(loss=f"{values['loss'] if 'loss' in values else float(loss.detach()):.4f}")
            if is_main and log_now:
                with metrics_path.open("a") as f:
                    f.write(json.dumps(last) + "\n")
        if save_now:
            save_checkpoint(out, model, ema, opt, step, cfg, _recipe_at(recipe, count_key, prior_steps, step))
        if is_main and cfg.sample_every > 0 and step % cfg.sample_every == 0 and step != cfg.steps:
            _write_sample(out, cfg, dataset, step)
        if out_of_time:
            if past_deadline:
                bar.total = step  # the deadline's run ends here: the bar closes at n/n, not at its last estimate
                bar.refresh()
                log.info("--deadline %s reached at step %d; checkpoint written", _iso(cfg.deadline), step)
            else:
                log.info("time budget reached at step %d; checkpoint written", step)
            stopped_early = True
            break
    bar.close()
    if is_main and step == start_step and ckpt is None:
        save_checkpoint(out, model, ema, opt, step, cfg, _recipe_at(recipe, count_key, prior_steps, step))
    if is_main and cfg.sample_every >= 0 and not stopped_early and step > start_step:
        _write_sample(out, cfg, dataset, step)
    if world > 1:
        import torch.distributed as dist

        # Rank 0 may still be writing its last checkpoint; a gloo rank that tears its group down while a peer is
        # busy can abort ("terminate called without an active exception"), so every rank waits here first.
        dist.barrier()
        dist.destroy_process_group()
    return {"step": step, "last": last, "model": str(out / "model"), "stopped_early": stopped_early}


def _recipe_at(recipe: dict, count_key: str, prior_steps: int, step: int) -> dict:
    """The recipe a checkpoint taken after ``step`` steps of this stage holds: the stage's count over the model's
    history, and in the stage's own entry ``steps_run``, the steps it actually ran (its ``steps`` is the budget
    it was given, which a ``--deadline`` or ``--max-minutes`` run may end far short of)."""
    stages = list(recipe.get("stages", []))
    if stages:
        stages[-1] = {**stages[-1], "steps_run": step}
    return {**recipe, count_key: prior_steps + step, "stages": stages}


def _iso(unix: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(unix, timezone.utc).isoformat(timespec="seconds")


def make_optimizer(params: list, cfg: TrainConfig, device):
    """The trainer's AdamW over ``params``.  Fused on a GPU: one kernel for the whole update (the same state
    dict, so checkpoints move between devices); the CPU keeps the default implementation, and its runs stay
    bit-identical to earlier ones."""
    import torch

    return torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.99), eps=1e-8, weight_decay=cfg.weight_decay,
                             fused=True if device.type == "cuda" else None)


def update(loss, params: list, opt, ema: list, step: int, cfg: TrainConfig):
    """One optimiser update from ``loss``: backward, gradient clipping to ``cfg.grad_clip``, the optimiser's
    step, then the EMA of ``params`` after step ``step`` (1-based).  Returns the gradient norm before
    clipping (a tensor: reading it would wait for the device)."""
    import torch

    opt.zero_grad(set_to_none=True)
    loss.backward()
    gnorm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
    opt.step()
    ema_update(ema, params, step, cfg.ema_decay)
    return gnorm


def ema_update(ema: list, params: list, step: int, ema_decay: float) -> None:
    """Move the EMA tensors towards ``params`` after optimiser step ``step`` (1-based), with the decay warming
    up as ``(1 + step) / (10 + step)`` to ``ema_decay``; one fused update, not a kernel per parameter."""
    import torch

    decay = min(ema_decay, (1 + step) / (10 + step))
    with torch.no_grad():
        torch._foreach_lerp_(ema, [p.detach() for p in params], 1 - decay)


def _checks_every_step(device) -> bool:
    """Whether each step reads its loss back before the update (on a CPU a read costs nothing)."""
    return device.type == "cpu"


def _scalars(metrics: dict) -> dict:
    """Metric values (floats or 0-dim tensors, possibly on a GPU) as floats, with one device read."""
    import torch

    keys = [k for k, v in metrics.items() if isinstance(v, torch.Tensor)]
    out = {k: float(v) for k, v in metrics.items() if k not in keys}
    if keys:
        out.update(zip(keys, torch.stack([metrics[k].detach().float().reshape(()) for k in keys]).cpu().tolist()))
    return {k: out[k] for k in metrics}


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _loss_module(autoencoder, method: str):
    """``autoencoder.<method>`` (``loss`` or ``decoder_loss``) as a module ``forward``, so DDP sees the computation."""
    import torch

    class AELoss(torch.nn.Module):
        def __init__(self, ae):
            super().__init__()
            self.ae = ae

        def forward(self, *args):
            return getattr(self.ae, method)(*args)

    return AELoss(autoencoder)


def decoder_batch(memo, dataset, idx: list[int], image_size: int, frames_per_clip: int, gen, device,
                  rollouts=None, rollout_share: float = 0.0):
    """Training pairs of the decoder stage: stored latents and the frames they encode.

    Picks ``frames_per_clip`` random time steps of each clip ``idx``; returns latents (N, V, C, h, w)
    (the store's fp16, as float) and uint8 frames (N, V, H, W, 3), N = len(idx) * frames_per_clip.
    With ``rollouts`` (:class:`~neuralsim.world_model.rollouts.RolloutLatents`, indexed like ``memo``), each
    pair takes the model's generated latent of its time step instead with probability ``rollout_share``
    (drawn from ``gen`` after the time steps, so a run without rollouts draws exactly what it always did).
    """
    import torch

    z, _ = memo.get(idx, device)  # (B, T, V, C, h, w)
    frames, _ = fetch_clips(dataset, idx, image_size)  # (B, T, V, H, W, 3)
    b = len(idx)
    fi = torch.randint(frames.shape[1], (b, frames_per_clip), generator=gen)
    rows = torch.arange(b)[:, None]
    picked = z[rows, fi.to(z.device)]
    if rollouts is not None:
        generated = rollouts.get(idx, device)[0][rows, fi.to(z.device)]
        use = (torch.rand(b, frames_per_clip, generator=gen) < rollout_share).to(z.device)
        picked = torch.where(use[..., None, None, None, None], generated, picked)
    return picked.flatten(0, 1).float(), frames[rows, fi].flatten(0, 1).to(device)


def decoder_references(model, dataset, idx: list[int], frames_per_clip: int, image_size: int, device):
    """The reference head's inputs for :func:`decoder_batch`'s pairs: the first frame of each clip's episode
    (uint8 (N, V, H, W, 3), N = len(idx) * frames_per_clip, clip-major like the pairs) and its raw latents,
    encoded now by the frozen encoder as the env's reset encodes them."""
    import numpy as np
    import torch

    first = []
    for i in idx:
        part, local = dataset.locate(int(i)) if hasattr(dataset, "locate") else (None, int(i))
        ds = dataset.parts[part] if part is not None else dataset
        if not hasattr(ds, "windows"):
            raise ValueError("the reference head trains on episodes (a dataset root), not on synthetic clips")
        pos, _ = ds.windows[local]
        frame0 = np.asarray(ds.episode(pos).frames[0])
        if frame0.shape[-3:] != (image_size, image_size, 3):
            raise ValueError(f"episode frames are {frame0.shape[-3:]}, the model wants ({image_size}, {image_size}, 3)")
        first.append(torch.from_numpy(np.array(frame0)))
    views = torch.stack(first).to(device)  # (B, V, H, W, 3)
    with torch.no_grad():
        latents = model.autoencoder.encode(views)  # (B, V, C, h, w) raw
    rep = lambda t: t.repeat_interleave(frames_per_clip, dim=0)  # noqa: E731  (N, ...), clip-major
    return rep(views), rep(latents)


def _rollout_seed(cfg: TrainConfig) -> int:
    """The noise seed of ``--rollout-share``'s rollouts: ``--rollout-seed``, else the run's ``--seed``."""
    return cfg.seed if cfg.rollout_seed is None else cfg.rollout_seed


def rollout_latents(model, memo, dataset, cfg: TrainConfig, progress: bool):
    """The model's open-loop latents over ``dataset``, indexed like ``memo`` (one set per dataset root)."""
    from .info import count_key
    from .latents import ConcatLatents, LatentStore
    from .rollouts import RolloutLatents

    stores = memo.stores if isinstance(memo, ConcatLatents) else [memo]
    if not all(isinstance(st, LatentStore) for st in stores):
        raise ValueError(f"--rollout-share needs episodes to roll out: a dataset root with the latent disk cache, "
                         f"not {cfg.data!r}" + (" with --no-latent-disk-cache" if not cfg.latent_disk_cache else ""))
    if not any(model.config.recipe.get(count_key("dit", o)) for o in ("step_forcing", "diffusion_forcing")):
        log.warning("this model's recipe records no DiT training: its rollouts are noise, and a decoder trained on "
                    "them learns little")
    parts = [RolloutLatents(model, st, seed=_rollout_seed(cfg), progress=progress) for st in stores]
    return ConcatLatents(dataset, parts) if isinstance(memo, ConcatLatents) else parts[0]


def _write_sample(out: Path, cfg: TrainConfig, dataset, step: int) -> None:
    """Roll the exported EMA model out on clip 0 with its true conditioning; GT | generated collage mp4."""
    import numpy as np
    import torch

    from ..episode import collage, write_video
    from .autoencoder import psnr, uint8_to_unit
    from .model import WorldModel

    try:
        wm = WorldModel.from_pretrained(out / "model", device=cfg.device)
        frames, cond = fetch_clips(dataset, [0], wm.config.autoencoder.image_size)  # (1, T, V, H, W, 3)
        frames, cond = frames.to(wm.device), cond.to(wm.device)
        if cfg.stage in ("autoencoder", "decoder"):
            z = wm.encode(frames[0])
            # clip 0 opens its episode: its frame 0 is a reference head's reference (ignored without a head)
            gen = wm.decode(z, (frames[0, :1].expand_as(frames[0]), z[:1].expand_as(z)))  # (T, V, H, W, 3)
        else:
            state = wm.new_state(1)
            wm.reset(state, [0], frames[:, 0], cond[:, 0])
            g = torch.Generator().manual_seed(cfg.seed)
            gen = torch.stack([frames[0, 0]] + [wm.step(state, cond[:, i], g)[0] for i in range(1, frames.shape[1])])
        p = psnr(uint8_to_unit(gen[1:].cpu()), uint8_to_unit(frames[0, 1:].cpu()), dims=(0, 2, 3, 4))
        gt_c = collage(*(frames[0, :, v].cpu().numpy() for v in range(3)))
        gen_c = collage(*(gen[:, v].cpu().numpy() for v in range(3)))
        (out / "samples").mkdir(exist_ok=True)
        write_video(str(out / "samples" / f"step_{step:07d}.mp4"), np.concatenate([gt_c, gen_c], axis=2))
        with (out / "metrics.jsonl").open("a") as f:
            f.write(json.dumps({"step": step, "sample_psnr_per_view": [float(x) for x in p]}) + "\n")
    except Exception as e:  # a sample video must never kill a long run
        log.warning("sample video at step %d failed: %s", step, e)


if __name__ == "__main__":
    raise SystemExit(main())
