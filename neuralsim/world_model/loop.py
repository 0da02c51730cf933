"""The optimisation loop every training stage runs: AdamW + EMA, a resumable checkpoint, logs, a stop on time.

:func:`optimise` takes what differs between the stages -- the trainable modules, the module a batch runs through
(wrapped in DDP under ``torchrun``, compiled with ``compile``) and ``batch_loss``, which turns one step's clip
indices and generators into a loss -- and does the rest: resuming from ``OUT/checkpoint``, the step's random draws
(a fixed function of seed, step and rank, so a resumed run continues the same loss curve), the learning-rate
schedule, the update and the EMA, ``metrics.jsonl``, checkpoints, sample videos, the recipe entry of the stage,
and stopping cleanly, checkpoint written, at ``deadline``.

On a CPU every step checks its loss before the update.  On a GPU nothing in a step reads a value back (a read
waits for the GPU and leaves it idle while the host assembles the next batch): the metrics stay tensors until a
log line, and a non-finite loss is remembered on the device and raised at the next log or checkpoint, before
anything is written, so no checkpoint on disk ever holds the bad weights.  On CUDA the loss runs under bf16
autocast.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from .checkpoint import keep_snapshot, load_checkpoint, save_checkpoint

log = logging.getLogger(__name__)


@dataclass
class Run:
    """One stage's run as :func:`~neuralsim.world_model.train.train` sets it up."""

    cfg: Any
    """The :class:`~neuralsim.world_model.train.TrainConfig`."""
    model: Any
    """The :class:`~neuralsim.world_model.model.WorldModel` being trained, on ``device``."""
    dataset: Any
    device: Any
    out: Path
    checkpoint: Path | None
    """The checkpoint this run resumes (None: a fresh run)."""
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    label: str = ""
    """The progress bar's name."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def rank_info() -> tuple[int, int, int]:
    """(rank, world size, local rank) as ``torchrun`` sets them (0, 1, 0 outside it)."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))


def step_generator(seed: int, step: int, rank: int, device="cpu"):
    """The generator of one step's random draws; a fixed function of (seed, step, rank), so a resumed run
    draws what an uninterrupted one would.  The trainer draws batch indices from a CPU one and, on a GPU,
    the noise from one on the GPU (a CPU draw of a large batch's noise costs host time every step): same seed
    and device, same run; a CPU run and a GPU run differ."""
    import torch

    return torch.Generator(device=device).manual_seed((seed * 1_000_003 + step) * 131 + rank)


def learning_rate(cfg, step: int, now: float | None = None) -> float:
    """Learning rate of optimiser step ``step`` (0-based): linear warmup, constant, then the decay phase;
    with ``cfg.cool_down_secs`` also the time-based cool-down at wall-clock time ``now`` (Unix seconds)."""
    lr = cfg.lr * min(1.0, (step + 1) / max(1, cfg.warmup))
    if cfg.decay_steps > 0:
        lr *= min(1.0, (cfg.steps - step) / cfg.decay_steps)
    if cfg.cool_down_secs > 0 and cfg.deadline is not None:
        now = time.time() if now is None else now
        lr *= min(1.0, max(0.0, (cfg.deadline - now) / cfg.cool_down_secs))
    return lr


def make_optimizer(params: list, cfg, device):
    """The trainer's AdamW over ``params``.  Fused on a GPU: one kernel for the whole update (the same state
    dict, so checkpoints move between devices); the CPU keeps the default implementation."""
    import torch

    return torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.99), eps=1e-8, weight_decay=cfg.weight_decay,
                             fused=True if device.type == "cuda" else None)


def update(loss, params: list, opt, ema: list, step: int, cfg):
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


def checks_every_step(device) -> bool:
    """Whether each step reads its loss back before the update (on a CPU a read costs nothing)."""
    return device.type == "cpu"


def scalars(metrics: dict) -> dict:
    """Metric values (floats or 0-dim tensors, possibly on a GPU) as floats, with one device read."""
    import torch

    keys = [k for k, v in metrics.items() if isinstance(v, torch.Tensor)]
    out = {k: float(v) for k, v in metrics.items() if k not in keys}
    if keys:
        out.update(zip(keys, torch.stack([metrics[k].detach().float().reshape(()) for k in keys]).cpu().tolist()))
    return {k: out[k] for k in metrics}


def iso(unix: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(unix, timezone.utc).isoformat(timespec="seconds")


def stage_entry(run: Run, objective: str, prior_steps: int, options: dict) -> dict:
    """The recipe entry of this stage: what it trained, on what, with which budget and options."""
    cfg = run.cfg
    return {"stage": cfg.stage, "objective": objective, "data": cfg.data, "batch_size": cfg.batch_size * run.world,
            "lr": cfg.lr, **budget(cfg), **({"continues_from_step": prior_steps} if prior_steps else {}), **options}


def budget(cfg) -> dict:
    """The step budget a stage entry records (a resumed run may bring a new one)."""
    return {"steps": cfg.steps, **({"decay_steps": cfg.decay_steps} if cfg.decay_steps else {}),
            **({"cool_down_secs": cfg.cool_down_secs} if cfg.cool_down_secs else {})}


def recipe_at(recipe: dict, count_key: str, prior_steps: int, step: int) -> dict:
    """The recipe a checkpoint taken after ``step`` steps of this stage holds: the stage's count over the model's
    history, and in the stage's own entry ``steps_run``, the steps it actually ran (its ``steps`` is the budget
    it was given, which a ``deadline`` may end far short of)."""
    stages = list(recipe.get("stages", []))
    if stages:
        stages[-1] = {**stages[-1], "steps_run": step}
    return {**recipe, count_key: prior_steps + step, "stages": stages}


class _NoAutocast:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def optimise(run: Run, trainable: dict, module, batch_loss: Callable, objective: str, options: dict,
             recipe: dict) -> dict:
    """Train ``trainable`` (state-dict prefix -> module) of ``run.model`` for the stage's steps.

    ``module`` is what a batch runs through; ``batch_loss(module, indices, generator, noise_generator)`` returns
    ``(loss, metrics)`` for the clips ``indices`` (drawn from the step's CPU generator; the noise generator is
    on the training device).  ``objective`` and ``options`` go into the stage's recipe entry; ``recipe`` is the
    model's training record so far.  Returns a summary: the final step, the last metrics, the model's path and
    whether the run stopped before its budget.
    """
    import torch

    from .info import count_key as recipe_count_key

    cfg, model, device, out = run.cfg, run.model, run.device, run.out
    model.requires_grad_(False).eval()
    for part in trainable.values():
        part.requires_grad_(True).train()
    params = {prefix + k: p for prefix, part in trainable.items() for k, p in part.named_parameters()}
    opt = make_optimizer(list(params.values()), cfg, device)
    key = recipe_count_key(cfg.stage, objective)
    if run.checkpoint is not None:
        state = load_checkpoint(run.checkpoint, opt, params, device)
        start_step, ema, recipe = state.step, state.ema, state.recipe
        stages = recipe.get("stages", [])
        prior_steps = int(stages[-1].get("continues_from_step", 0)) if stages else 0
        if stages:  # a resumed run may carry a new step budget: the recipe names the latest one
            last = {k: v for k, v in stages[-1].items() if k not in ("steps", "decay_steps", "cool_down_secs")}
            recipe["stages"] = [*stages[:-1], {**last, **budget(cfg)}]
    else:
        start_step, ema = 0, {k: p.detach().clone() for k, p in params.items()}
        # the recipe counts each stage's steps over the model's whole history: a run started from a model that
        # already had this stage (e.g. more Step Forcing on the shipped model) continues its count
        prior_steps = int(recipe.get(key, 0))
        recipe["stages"] = [*recipe.get("stages", []), stage_entry(run, objective, prior_steps, options)]

    if run.world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        module = DDP(module, device_ids=[run.local_rank] if device.type == "cuda" else None)
    if cfg.compile:
        # around DDP, as PyTorch advises; each new shape or grad mode compiles once (Step Forcing's two passes:
        # one without grad, one with); the parameters stay the module's own, so saving and the EMA see no change
        module = torch.compile(module)

    metrics_path = out / "metrics.jsonl"
    if run.is_main and metrics_path.exists():  # drop lines a crashed run wrote after its last checkpoint
        keep = [ln for ln in metrics_path.read_text().splitlines() if ln.strip()
                and json.loads(ln).get("step", 0) <= start_step]
        metrics_path.write_text("".join(k + "\n" for k in keep) if run.checkpoint is not None else "")

    from tqdm import tqdm

    bar = tqdm(total=cfg.steps, initial=start_step, disable=not (cfg.progress and run.is_main),
               desc=run.label or cfg.stage)
    t_start = time.time()
    last: dict = {}
    step = start_step
    stopped_early = False
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else _NoAutocast()
    check_every_step = checks_every_step(device)
    first_bad = torch.full((), -1, dtype=torch.long, device=device)  # first step with a non-finite loss, or -1
    t_log, step_log = time.time(), start_step
    param_list, ema_list = list(params.values()), [ema[k] for k in params]
    step_secs: deque[float] = deque(maxlen=20)  # the last steps' wall times: "will the next step fit the deadline?"
    train_config = asdict(cfg)
    if run.world > 1:
        import torch.distributed as dist
    if cfg.deadline is not None and time.time() >= cfg.deadline:
        log.warning("the deadline %s has passed before the first step; no step run", iso(cfg.deadline))
        stopped_early = True
    while step < cfg.steps and not stopped_early:
        t_step = time.time()
        if run.world > 1 and cfg.cool_down_secs > 0:  # one clock for the time-based rate, or the ranks' weights part
            t = torch.tensor([t_step], dtype=torch.float64, device=device)
            dist.broadcast(t, 0)
            t_step = float(t.item())
        gen = step_generator(cfg.seed, step, run.rank)
        noise_gen = gen if device.type == "cpu" else step_generator(cfg.seed, step, run.rank, device)
        idx = torch.randint(len(run.dataset), (cfg.batch_size,), generator=gen).tolist()
        lr = learning_rate(cfg, step, t_step)
        for g in opt.param_groups:
            g["lr"] = lr
        with autocast:
            loss, metrics = batch_loss(module, idx, gen, noise_gen)
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
        out_of_time = past_deadline
        if run.world > 1 and cfg.deadline is not None:
            # every rank stops at the same step, or the rest hang in DDP
            flag = torch.tensor([float(out_of_time)], device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            out_of_time = bool(flag.item())
        log_now = step % cfg.log_every == 0 or step == cfg.steps or out_of_time
        save_now = run.is_main and (step % cfg.checkpoint_every == 0 or step == cfg.steps or out_of_time)
        if log_now or save_now:  # the only place a step waits for the device
            if not check_every_step and int(first_bad) >= 0:
                raise FloatingPointError(f"non-finite loss at step {int(first_bad)}; the last checkpoint in {out} "
                                         "is from before it")
            values = scalars({**metrics, "grad_norm": gnorm})
            now = time.time()
            last = {"step": step, **values, "lr": lr, "s_per_step": (now - t_log) / (step - step_log)}
            t_log, step_log = now, step
            bar.set_postfix(loss=f"{values['loss'] if 'loss' in values else float(loss.detach()):.4f}")
            if run.is_main and log_now:
                with metrics_path.open("a") as f:
                    f.write(json.dumps(last) + "\n")
        if save_now:
            save_checkpoint(out, model, ema, opt, step, train_config, recipe_at(recipe, key, prior_steps, step))
        if run.is_main and cfg.snapshot_every > 0 and step % cfg.snapshot_every == 0:
            if not save_now:  # a snapshot copies the exported model, so it is written first
                save_checkpoint(out, model, ema, opt, step, train_config, recipe_at(recipe, key, prior_steps, step))
            keep_snapshot(out, step)
        if run.is_main and cfg.sample_every > 0 and step % cfg.sample_every == 0 and step != cfg.steps:
            write_sample(run, step)
        if out_of_time:
            bar.total = step  # the deadline's run ends here: the bar closes at n/n, not at its last estimate
            bar.refresh()
            log.info("deadline %s reached at step %d; checkpoint written", iso(cfg.deadline), step)
            stopped_early = True
            break
    bar.close()
    if run.is_main and step == start_step and run.checkpoint is None:
        save_checkpoint(out, model, ema, opt, step, train_config, recipe_at(recipe, key, prior_steps, step))
    if run.is_main and cfg.sample_every >= 0 and not stopped_early and step > start_step:
        write_sample(run, step)
    log.debug("%s: %d steps in %.0f s", out, step - start_step, time.time() - t_start)
    return {"step": step, "last": last, "model": str(out / "model"), "stopped_early": stopped_early}


def write_sample(run: Run, step: int) -> None:
    """Roll the exported EMA model out on clip 0 with its true conditioning; a GT | generated collage mp4 in
    ``OUT/samples`` and its PSNR per view in ``metrics.jsonl``."""
    import numpy as np
    import torch

    from ..episode import collage, write_video
    from .autoencoder import psnr, uint8_to_unit
    from .batches import fetch_clips
    from .model import WorldModel

    cfg, out = run.cfg, run.out
    try:
        wm = WorldModel.from_pretrained(out / "model", device=cfg.device)
        frames, cond = fetch_clips(run.dataset, [0], wm.config.autoencoder.image_size,
                                   wm.config.gripper_conditioning, wm.config.arm_conditioning)  # (1, T, V, H, W, 3)
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
