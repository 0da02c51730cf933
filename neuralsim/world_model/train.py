"""Train one stage of the world model: ``neuralsim train`` (a whole recipe: :mod:`neuralsim.world_model.recipe`).

    neuralsim train --recipe neuralsim/world_model/recipes/default.yaml --out runs/default   # the shipped model
    neuralsim train --stage autoencoder --data data/simdroid --out runs/ae --steps 3000            # one stage
    neuralsim train --stage dit --objective step_forcing --init-from runs/ae/model --data data/simdroid --out runs/sf

A recipe (:mod:`neuralsim.world_model.recipe`, docs/TRAINING.md) runs the stages below in order.  One stage:

* ``autoencoder`` -- the per-view autoencoder's reconstruction (its encoder and decoder);
* ``dit`` -- the DiT on the frozen autoencoder's latents, with an objective of
  :data:`~neuralsim.world_model.objectives.OBJECTIVES` (Diffusion Forcing, then Step Forcing);
* ``decoder`` -- the decoder (and the reference head) on frozen-encoder latents, the DiT untouched; with
  ``rollout_share`` also on the DiT's own open-loop latents (:mod:`neuralsim.world_model.rollouts`), with
  ``head_only`` the reference head alone.

Every stage writes into ``out``: ``model/`` (the EMA weights, a :class:`~neuralsim.world_model.model.WorldModel`
checkpoint), ``checkpoint/`` (the resumable state, :mod:`neuralsim.world_model.checkpoint`), ``metrics.jsonl``
and ``samples/*.mp4``.  Re-running the same command resumes; the loop is :func:`~neuralsim.world_model.loop.optimise`.
The DiT and decoder stages read latents encoded once per dataset root into ``<data>/.latent_cache``
(:mod:`neuralsim.world_model.latents`).  Changing a trained model's parts (a shallower decoder, a fresh reference
head, the conditioning, the inference window) is ``neuralsim model edit`` (:mod:`neuralsim.world_model.edit`).

The command line (``neuralsim train``, :mod:`neuralsim.cli`) chooses between a recipe and one stage; the recipe
drives this module, never the other way round.  Several GPUs: ``torchrun --nproc_per_node N -m neuralsim train ...
--device cuda`` (the trained module is wrapped in DDP; rank 0 writes; ``batch_size`` is per process).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from .batches import (  # noqa: F401  (the trainer's data helpers, importable from here)
    LatentMemo,
    data_scene,
    decoder_batch,
    decoder_references,
    fetch_clips,
    latent_source,
    open_dataset,
    rollout_source,
)
from .loop import Run, learning_rate, optimise, rank_info  # noqa: F401

log = logging.getLogger(__name__)

STAGES = ("autoencoder", "decoder", "dit")

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
_UNIT_SECS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_deadline(text: str | float) -> float:
    """A deadline as Unix seconds: Unix seconds, an ISO 8601 time (without a zone: local time) or a duration from
    now (``90s``, ``45m``, ``2.5h``, ``1d``)."""
    from datetime import datetime

    if isinstance(text, (int, float)):
        value = float(text)
    else:
        duration = _DURATION.match(text)
        try:
            if duration:
                value = time.time() + float(duration[1]) * _UNIT_SECS[duration[2]]
            else:
                try:
                    value = float(text)
                except ValueError:
                    value = datetime.fromisoformat(text).timestamp()
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"deadline {text!r}: give Unix seconds, an ISO 8601 time such as 2026-11-26T09:30:00+00:00, or a "
                "duration such as 90m or 2h") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"deadline {text!r} is not a finite time")
    return value


def parse_cli_deadline(text: str) -> float:
    """:func:`parse_deadline` for the command line, where a time already past is a mistake (a run given one would
    make its data and stop before its first step): refused, saying when it was."""
    from datetime import datetime

    value = parse_deadline(text)
    ago = time.time() - value
    if ago >= 0:
        when = datetime.fromtimestamp(value).astimezone().isoformat(timespec="minutes")
        raise argparse.ArgumentTypeError(
            f"deadline {text!r} is {ago / 60:.0f} min in the past ({when}); give a later time or a duration such as "
            "2h")
    return value


def _objectives() -> tuple[str, ...]:
    from .objectives import OBJECTIVES

    return tuple(sorted(OBJECTIVES))


@dataclass
class TrainConfig:
    """Options of one training stage.  Each is a ``neuralsim train`` option and a key of a recipe's stage."""

    stage: Literal["autoencoder", "decoder", "dit"] = "dit"
    """What trains: ``autoencoder`` (per-view reconstruction), ``dit`` (the DiT on frozen autoencoder latents) or
    ``decoder`` (the decoder alone on frozen-encoder latents, the DiT untouched)."""
    objective: str = field(default="diffusion_forcing", metadata={"choices": _objectives})
    """The DiT stage's objective: Diffusion Forcing, Step Forcing (RoboWorld's Algorithm 1) or an ablation of it
    (:mod:`neuralsim.world_model.objectives`)."""
    data: str = "synthetic"
    """A dataset root, several joined by commas (their clips mixed), or ``synthetic[:N[:K]]`` (a toy source of N
    clips, with K moving objects whose poses it records)."""
    out: str = "runs/world_model"
    """The run directory: model/, checkpoint/, metrics.jsonl, samples/."""
    init_from: str | None = None
    """A world-model checkpoint (directory or hub id) to start from, e.g. the previous stage's model/."""
    config: Literal["default", "tiny", "default_grounded", "tiny_grounded"] = "default"
    """The architecture preset of a model started from scratch (no ``init_from``); ``_grounded``: with the
    conditioning grounded in each view (``dit.grounding="projected"``)."""
    num_objects: int | None = field(default=None, metadata={"cli": False})
    """K object tokens per frame, each object's pose carried and predicted beside the image tokens
    (``dit.num_objects``; the data must record K objects' poses): a model started from scratch gets them, a model
    without object state gets fresh ones (as ``neuralsim model edit --objects K`` gives them), a model with another K
    is refused.  None: the model's own (from scratch: none)."""
    object_loss_weight: float = field(default=1.0, metadata={"cli": False})
    """DiT stage of a model with object state: the weight of the object loss (and of the object reader's) beside
    the image loss; ``loss`` = image + weight x (object + reader), each logged on its own."""
    steps: int = 1000
    """Total optimiser steps of this stage; a resumed run continues up to it."""
    batch_size: int = 8
    """Clips per step per process."""
    lr: float = 3e-4
    """Peak learning rate (AdamW)."""
    warmup: int = 200
    """Steps of linear learning-rate warm-up."""
    decay_steps: int = 0
    """The learning rate falls linearly to 0 over the last ``decay_steps`` steps of the budget (0: constant after
    the warm-up).  A run resumed with a larger ``steps`` and a ``decay_steps`` anneals."""
    weight_decay: float = field(default=1e-3, metadata={"cli": False})
    """AdamW weight decay."""
    grad_clip: float = field(default=1.0, metadata={"cli": False})
    """Gradient norm clip."""
    ema_decay: float = 0.999
    """Decay of the weights' moving average, which model/ holds."""
    frames_per_clip: int = 4
    """Autoencoder and decoder stages: frames drawn from each clip per step."""
    seed: int = 0
    """Seed of a fresh model's weights, the batches, the noise and a decoder stage's rollouts."""
    device: str = "cpu"
    """cpu, cuda or cuda:N."""
    resume: bool | None = None
    """Continue ``out``'s checkpoint: required (--resume), never (--no-resume); not given: if there is one."""
    deadline: float | None = field(default=None, metadata={"type": parse_cli_deadline, "metavar": "TIME"})
    """Stop cleanly, checkpoint and model written, by this time: Unix seconds, ISO 8601 or a duration from now
    (90m, 2h).  A step starts only when it is expected to end before it; a deadline already past runs none (on the
    command line it is refused)."""
    cool_down_secs: float = 0.0
    """With ``deadline``: the learning rate also falls linearly to 0 over its last ``cool_down_secs`` seconds, so a
    run of unknown speed still ends annealed."""
    checkpoint_every: int = 200
    """Steps between resumable checkpoints (one is also written at the end and at the deadline)."""
    snapshot_every: int = 0
    """Steps between kept copies of the exported model, ``OUT/snapshots/step_NNNNNNN/`` (0: none): the checkpoints a
    learning curve measures (``python -m benchmarks.fidelity.dynamics --curve OUT``).  A kept copy is the model's
    size."""
    log_every: int = 10
    """Steps between metrics.jsonl lines."""
    sample_every: int = 1000
    """Steps between sample videos (0: only at the end; -1: never)."""
    num_threads: int | None = None
    """torch CPU threads (not given: torch's default)."""
    progress: bool = True
    """Show a progress bar with an ETA."""
    rollout_share: float = 0.0
    """Decoder stage: the share of training pairs whose latent is the model's own open-loop prediction of the frame
    (cached once per model and dataset) instead of the encoded frame, so the decoder learns to decode what the DiT
    writes."""
    head_only: bool = False
    """Decoder stage: train only the model's reference head (``neuralsim model edit --reference-head W`` gives a
    model one), the decoder frozen."""
    change_weight: float = 0.0
    """Decoder stage with a reference head: pixels that differ from the episode's first frame weigh 1 + this in
    the loss, so the head does not paint what moved where it stood."""
    compile: bool = False
    """Run the trained module through torch.compile (fused kernels, after minutes of compilation); checkpoints
    are the plain module's, so a run resumes with or without it."""

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"unknown stage {self.stage!r}; choose one of {STAGES}")
        if self.stage == "dit" and self.objective not in _objectives():
            raise ValueError(f"unknown objective {self.objective!r}; choose one of {_objectives()}")
        if (self.num_objects is not None and self.num_objects < 0) or not (
                math.isfinite(self.object_loss_weight) and self.object_loss_weight >= 0):
            raise ValueError(f"need num_objects >= 0 and object_loss_weight >= 0, got {self.num_objects} and "
                             f"{self.object_loss_weight}")
        if self.steps < 0 or self.batch_size < 1 or self.decay_steps < 0 or self.warmup < 0:
            raise ValueError(f"need steps >= 0, batch_size >= 1, warmup >= 0 and decay_steps >= 0, got "
                             f"{self.steps}, {self.batch_size}, {self.warmup} and {self.decay_steps}")
        if self.snapshot_every < 0:
            raise ValueError(f"snapshot_every must be >= 0 (0: no snapshots), got {self.snapshot_every}")
        if min(self.frames_per_clip, self.checkpoint_every, self.log_every) < 1:
            raise ValueError(f"frames_per_clip, checkpoint_every and log_every must be >= 1, got "
                             f"{self.frames_per_clip}, {self.checkpoint_every} and {self.log_every}")
        if self.stage == "decoder" and not self.init_from:
            raise ValueError("the decoder stage trains the decoder of a trained model; give init_from")
        if not 0.0 <= self.rollout_share <= 1.0:
            raise ValueError(f"rollout_share must be in [0, 1], got {self.rollout_share}")
        if not (math.isfinite(self.change_weight) and self.change_weight >= 0):
            raise ValueError(f"change_weight must be >= 0, got {self.change_weight}")
        for name in ("rollout_share", "head_only", "change_weight"):
            if getattr(self, name) and self.stage != "decoder":
                raise ValueError(f"{name} is an option of the decoder stage, not of {self.stage!r}")
        if self.deadline is not None:
            self.deadline = parse_deadline(self.deadline)
        if not math.isfinite(self.cool_down_secs) or self.cool_down_secs < 0:
            raise ValueError(f"cool_down_secs must be >= 0, got {self.cool_down_secs}")
        if self.cool_down_secs > 0 and self.deadline is None:
            raise ValueError("cool_down_secs anneals towards the deadline; give a deadline too")

    @property
    def objective_name(self) -> str:
        """What the stage optimises, as the recipe records it (``reconstruction`` for the autoencoder stages)."""
        return self.objective if self.stage == "dit" else "reconstruction"


#: Options of earlier trainers that changed the loss, with their off values: a checkpoint of a run that used one
#: cannot be resumed (its code is in git history, docs/EXPERIMENTS.md).
RETIRED_OPTIONS = {"focus_weight": 0.0, "self_rollout": 0}


def check_resumable(trainer: dict, cfg: TrainConfig, out: Path) -> None:
    """ValueError unless the run recorded in ``trainer`` (a checkpoint's trainer.json) can go on as ``cfg``."""
    old = trainer["train_config"]
    was = old["stage"] if old["stage"] != "dit" else f"dit/{old['objective']}"
    now = cfg.stage if cfg.stage != "dit" else f"dit/{cfg.objective}"
    if was != now:
        raise ValueError(f"{out} holds a {was} run; refusing to resume it as {now} (use another out)")
    for name, off in RETIRED_OPTIONS.items():
        if old.get(name, off) != off:
            raise ValueError(f"{out} holds a run with the retired option {name}={old[name]!r}; it cannot be resumed")
    # options a run keeps for its whole length (a trainer that predates one ran it at the default; an earlier
    # trainer's reference_head W trained the head alone, and its rollout_seed, if given, seeded the rollouts)
    held = {"rollout_share": old.get("rollout_share", 0.0),
            "head_only": old.get("head_only", bool(old.get("reference_head", 0)))}
    for name, value in held.items():
        if value != getattr(cfg, name):
            raise ValueError(f"{out} holds a run with {name} {value}; refusing to resume it with {getattr(cfg, name)} "
                             "(use the same, or another out)")
    rollout_seed = old["seed"] if old.get("rollout_seed") is None else old["rollout_seed"]
    if cfg.rollout_share and rollout_seed != cfg.seed:
        raise ValueError(f"{out} holds a run whose rollouts used seed {rollout_seed}; refusing to resume it with seed "
                         f"{cfg.seed} (use the same, or another out)")


def _records_scene(model_dir) -> bool:
    """Does the model at ``model_dir`` record its scene (configs written before the field existed do not, and
    read as classic)?"""
    path = Path(model_dir) / "config.json" if model_dir else None
    if path is None or not path.is_file():
        return True
    return "scene" in json.loads(path.read_text())


def build_model(cfg: TrainConfig, checkpoint: Path | None):
    """The model a stage starts from: the checkpoint's raw weights on a resume, else ``init_from`` (given fresh object
    state if ``num_objects`` asks for it), else a fresh model of preset ``config`` with ``num_objects`` (its weights
    drawn after seeding torch with ``seed``)."""
    import torch

    from .config import WorldModelConfig, preset
    from .model import WorldModel

    if checkpoint is not None or cfg.init_from:
        log.info("resuming from %s" if checkpoint is not None else "initialised from %s", checkpoint or cfg.init_from)
        model = WorldModel.from_pretrained(checkpoint / "raw" if checkpoint is not None else cfg.init_from)
        have = model.config.dit.num_objects
        if cfg.num_objects is None or cfg.num_objects == have:
            return model
        if have:
            raise ValueError(f"num_objects={cfg.num_objects}, but {checkpoint or cfg.init_from} carries {have} objects "
                             "(`neuralsim model edit --objects K` changes them)")
        from .edit import with_dit

        torch.manual_seed(cfg.seed)
        return with_dit(model, num_objects=cfg.num_objects)
    torch.manual_seed(cfg.seed)
    config = preset(cfg.config)
    if cfg.num_objects:  # None or 0: none
        d = config.to_dict()
        d["dit"]["num_objects"] = cfg.num_objects
        config = WorldModelConfig.from_dict(d)
    return WorldModel(config)


def train(cfg: TrainConfig, label: str | None = None) -> dict:
    """Run one training stage; returns a summary (final step, last metrics, the model's path, whether it stopped
    before its budget).  ``label``: the progress bar's name (default: the stage)."""
    import torch

    from .checkpoint import find_checkpoint, read_trainer

    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    rank, world, local_rank = rank_info()
    own_group = False
    if world > 1:
        import torch.distributed as dist

        if cfg.device.startswith("cuda"):
            torch.cuda.set_device(local_rank)
            cfg.device = f"cuda:{local_rank}"
        if not dist.is_initialized():  # a recipe keeps one group for all its stages
            dist.init_process_group("nccl" if cfg.device.startswith("cuda") else "gloo")
            own_group = True
    device, out = torch.device(cfg.device), Path(cfg.out)
    checkpoint = find_checkpoint(out)
    if cfg.resume is True and checkpoint is None:
        raise FileNotFoundError(f"resume asked for, but {out}/checkpoint has no trainer.json")
    if cfg.resume is False:
        checkpoint = None
    if checkpoint is not None:
        check_resumable(read_trainer(checkpoint), cfg, out)
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
    model = build_model(cfg, checkpoint).to(device)
    wm = model.config
    dataset = open_dataset(cfg.data, wm.clip_length, wm.autoencoder.image_size, seed=cfg.seed)
    if len(dataset) == 0:
        raise ValueError(f"dataset {cfg.data!r} is empty")
    scene = data_scene(cfg.data)
    if scene is not None and scene != wm.scene:
        if wm.recipe.get("stages") and _records_scene(checkpoint / "raw" if checkpoint else cfg.init_from):
            log.warning("%s was trained on the %s scene; this stage trains it on %s data, and it will be a %s model",
                        cfg.init_from or out, wm.scene, scene, scene)
        model.set_scene(scene)  # a grounded DiT also takes the scene's cameras
    run = Run(cfg=cfg, model=model, dataset=dataset, device=device, out=out, checkpoint=checkpoint, rank=rank,
              world=world, local_rank=local_rank, label=label or cfg.stage)
    summary = {"autoencoder": train_autoencoder, "decoder": train_decoder, "dit": train_dit}[cfg.stage](run)
    if world > 1:
        import torch.distributed as dist

        # Rank 0 may still be writing its last checkpoint; a gloo rank that tears its group down while a peer is
        # busy can abort ("terminate called without an active exception"), so every rank waits here first.
        dist.barrier()
        if own_group:
            dist.destroy_process_group()
    return summary


def train_autoencoder(run: Run) -> dict:
    """The autoencoder stage: ``frames_per_clip`` random frames of each clip, encoded and decoded (MSE + L1 + KL);
    the encoder and decoder train, a reference head does not (it is the decoder stage's)."""
    import torch

    cfg, model = run.cfg, run.model
    size = model.config.autoencoder.image_size

    def batch_loss(module, idx, gen, noise_gen):
        frames, _ = fetch_clips(run.dataset, idx, size)  # (B, T, V, H, W, 3)
        fi = torch.randint(frames.shape[1], (cfg.batch_size, cfg.frames_per_clip), generator=gen)
        images = frames[torch.arange(cfg.batch_size)[:, None], fi].flatten(0, 1).to(run.device)  # (B*F, V, H, W, 3)
        return module(images, noise_gen)

    return optimise(run, {"autoencoder.vae.": model.autoencoder.vae}, _method_module(model.autoencoder, "loss"),
                    batch_loss, "reconstruction", {}, dict(model.config.recipe))


def train_decoder(run: Run) -> dict:
    """The decoder stage: stored latents (a ``rollout_share`` of them the DiT's own) paired with the frames they
    stand for; the decoder and the reference head train (``head_only``: the head alone), each pair carrying its
    episode's first frame as the head's reference."""
    from .model import DECODER_PREFIXES

    cfg, model = run.cfg, run.model
    head = model.autoencoder.ref_head
    if head is None and (cfg.head_only or cfg.change_weight):
        raise ValueError(f"{'head_only' if cfg.head_only else 'change_weight'} needs a model with a reference head, "
                         "and this one has none; give it one with `neuralsim model edit --reference-head W`")
    progress = cfg.progress and run.is_main
    memo = latent_source(model, run.dataset, run.device, progress)
    rollouts = rollout_source(model, memo, run.dataset, cfg.seed, progress) if cfg.rollout_share else None
    size = model.config.autoencoder.image_size
    trainable = ({"autoencoder.ref_head.": head} if cfg.head_only else
                 {prefix: model.get_submodule(prefix.rstrip(".")) for prefix in DECODER_PREFIXES
                  if prefix != "autoencoder.ref_head." or head is not None})

    def batch_loss(module, idx, gen, noise_gen):
        latents, images = decoder_batch(memo, run.dataset, idx, size, cfg.frames_per_clip, gen, run.device, rollouts,
                                        cfg.rollout_share)
        if head is None:
            return module(latents, images)
        refs = decoder_references(model, run.dataset, idx, cfg.frames_per_clip, size, run.device)
        return module(latents, images, *refs, cfg.change_weight)

    options = {"decoder_layers_per_block": model.config.autoencoder.decoder_depth,
               **({"rollout_share": cfg.rollout_share, "rollout_seed": cfg.seed, "rollout_window": model.config.window}
                  if cfg.rollout_share else {}),
               **({"head_only": True} if cfg.head_only else {}),
               **({"change_weight": cfg.change_weight} if cfg.change_weight else {})}
    return optimise(run, trainable, _method_module(model.autoencoder, "decoder_loss"), batch_loss, "reconstruction",
                    options, dict(model.config.recipe))


def train_dit(run: Run) -> dict:
    """The DiT stage: clips of stored latents and their conditioning through the objective; a fresh DiT's latent
    statistics are fitted first, on up to 32 clips.  A model with object state also trains on the clips' recorded
    object poses (their statistics fitted the first time, like the latents'), and its object reader on each clip's
    first frame (:func:`~neuralsim.world_model.objectives.object_reader_loss`)."""
    from .objectives import get_objective, object_reader_loss

    cfg, model = run.cfg, run.model
    k = model.config.dit.num_objects
    memo = latent_source(model, run.dataset, run.device, cfg.progress and run.is_main, objects=bool(k))
    recipe = dict(model.config.recipe)
    first = list(range(min(len(run.dataset), 32)))
    fresh = run.checkpoint is None
    fit_latents = fresh and not recipe.get("latent_stats_fitted")
    fit_condition = (fresh and model.config.dit.condition_features != "raw"
                     and not recipe.get("condition_stats_fitted"))
    if fit_latents or fit_condition:
        z, cond = memo.get(first, run.device)  # the first clips, read once for every statistic fitted on them
    if fit_latents:
        model.set_latent_stats(z)
        recipe["latent_stats_fitted"] = True
        log.info("latent stats: mean %s std %s", model.latent_mean.tolist(), model.latent_std.tolist())
    if fit_condition:
        model.set_condition_stats(cond)
        recipe["condition_stats_fitted"] = True
        log.info("condition stats: mean %s std %s", model.dit.cond_embed.mean.tolist(),
                 model.dit.cond_embed.std.tolist())
    if k and run.checkpoint is None and not recipe.get("object_stats_fitted"):
        model.set_object_stats(memo.get_objects(first, run.device))
        recipe["object_stats_fitted"] = True
        log.info("object stats: mean %s std %s", model.object_mean.tolist(), model.object_std.tolist())
    loss_fn, loss_kwargs = get_objective(cfg.objective)
    schedule = model.config.schedule
    weight = cfg.object_loss_weight

    def batch_loss(module, idx, gen, noise_gen):
        z, cond = memo.get(idx, run.device)
        if not k:
            return loss_fn(module, model.normalise(z), cond, schedule, generator=noise_gen, **loss_kwargs)
        x, objects = model.normalise(z), model.normalise_objects(memo.get_objects(idx, run.device))
        loss, metrics = loss_fn(module, x, cond, schedule, generator=noise_gen, objects=objects,
                                object_loss_weight=weight, **loss_kwargs)
        # the reader runs outside the DDP module's forward; its gradients join the same backward
        reader = object_reader_loss(model.dit.object_reader, x[:, 0], objects[:, 0])
        loss = loss + weight * reader
        return loss, {**metrics, "loss": loss.detach(), "loss_object_reader": reader.detach()}

    options = {"num_objects": k, "object_loss_weight": weight} if k else {}
    return optimise(run, {"dit.": model.dit}, model.dit, batch_loss, cfg.objective, options, recipe)


def _method_module(autoencoder, method: str):
    """``autoencoder.<method>`` (``loss`` or ``decoder_loss``) as a module's ``forward``, so DDP sees the
    computation."""
    import torch

    class AutoencoderLoss(torch.nn.Module):
        def __init__(self, ae):
            super().__init__()
            self.ae = ae

        def forward(self, *args):
            return getattr(self.ae, method)(*args)

    return AutoencoderLoss(autoencoder)
