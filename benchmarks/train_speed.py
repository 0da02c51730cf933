"""DiT training speed: seconds per optimiser step, eager against ``torch.compile``, on any device.

Usage::

    python -m benchmarks.train_speed --quick                                    # tiny DiT, CPU, < 2 min
    python -m benchmarks.train_speed --config fine --batch-size 8 --threads 2   # the CPU's fine-line step
    python -m benchmarks.train_speed --config fine --batch-size 64 --device cuda --profile   # a lent GPU
    python -m benchmarks.train_speed --config default --patch-size 2 --modes eager --threads 2   # finer tokens

Each mode (``eager``, ``compile``) runs the step of ``neuralsim.world_model.train``'s DiT stage on
random latents of ``--config``'s shape: the batch gathered from an fp16 latent store on the device (one
``index_select``, as :class:`~neuralsim.world_model.latents.LatentStore` does), the objective's loss
(bf16 autocast on CUDA), backward, gradient clipping, AdamW (fused on CUDA) and the fused EMA update.
Speed does not depend on the weights, so the DiT is freshly initialised.  ``--warmup`` steps come first
(for ``compile`` they include the compilation, reported as ``first_steps_s``); then the median of
``--repeats`` blocks of ``--steps`` steps, each block ending with a device synchronisation.  With
``--profile`` one more block runs under ``torch.profiler`` and the ops with the most self time are
printed: on a GPU, a device total far under the wall time means the host (Python, kernel launches)
sets the pace.  JSON goes to ``benchmarks/results/train_speed.json`` (``--quick``:
``train_speed_quick.json``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import platform
import time
from pathlib import Path

from .results_path import out_help, results_path
from .throughput import _median_time

log = logging.getLogger(__name__)

MODES = ("eager", "compile")


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_step(config: str, batch_size: int, objective: str, device, compiled: bool, seed: int = 0,
              store_frames: int = 4096, patch_size: int | None = None):
    """A closure running one training step of a fresh DiT of preset ``config`` (its latent patch side
    ``patch_size`` if given, as ``neuralsim train --dit-patch-size``); returns (step, the DiT)."""
    import torch

    from neuralsim.world_model.config import preset
    from neuralsim.world_model.dit import CausalDiT
    from neuralsim.world_model.objectives import get_objective
    from neuralsim.world_model.train import TrainConfig, make_optimizer, update

    cfg = preset(config)
    if patch_size is not None:
        cfg.dit = dataclasses.replace(cfg.dit, patch_size=patch_size)
    d = cfg.dit
    torch.manual_seed(seed)
    dit = CausalDiT(d).to(device).train()
    params = list(dit.parameters())
    ema = [p.detach().clone() for p in params]
    tc = TrainConfig()  # the trainer's defaults: learning rate, weight decay, clipping, EMA decay
    opt = make_optimizer(params, tc, device)
    run = torch.compile(dit) if compiled else dit
    loss_fn, kwargs = get_objective(objective)
    T = cfg.clip_length
    gen = torch.Generator().manual_seed(seed)
    store = torch.randn((store_frames, d.num_views, d.latent_channels, d.latent_size, d.latent_size),
                        generator=gen).half().to(device)
    cond_store = torch.randn((store_frames, 7), generator=gen).to(device)
    noise_gen = torch.Generator(device=device).manual_seed(seed)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast(
        "cpu", enabled=False)
    state = {"step": 0}

    def step():
        first = torch.randint(store_frames - T, (batch_size,), generator=gen)
        rows = (first[:, None] + torch.arange(T)).flatten().to(device)
        x = store.index_select(0, rows).float().view(batch_size, T, *store.shape[1:])
        cond = cond_store.index_select(0, rows).view(batch_size, T, 7)
        with autocast:
            loss, _ = loss_fn(run, x, cond, cfg.schedule, generator=noise_gen, **kwargs)
        state["step"] += 1
        update(loss, params, opt, ema, state["step"], tc)

    return step, dit


def time_mode(mode: str, args, device) -> dict:
    """Warm-up, then the median seconds per step over ``args.repeats`` blocks (and a profile if asked)."""
    step, dit = make_step(args.config, args.batch_size, args.objective, device, mode == "compile", args.seed,
                          patch_size=args.patch_size)
    n_params = sum(p.numel() for p in dit.parameters())
    t0 = time.perf_counter()
    for _ in range(args.warmup):
        step()
    _sync(device)
    first = time.perf_counter() - t0
    s, blocks_ms, steal = _median_time(step, args.steps, args.repeats, block_end=lambda: _sync(device))
    row = {"mode": mode, "config": args.config, "patch_size": dit.config.patch_size,
           "tokens_per_frame": dit.config.tokens_per_frame, "objective": args.objective, "batch_size": args.batch_size,
           "device": str(device), "params": n_params, "first_steps": args.warmup, "first_steps_s": round(first, 2),
           "s_per_step": round(s, 5), "ms_per_step_blocks": blocks_ms, "steal_pct_blocks": steal,
           "clips_per_s": round(args.batch_size / s, 2)}
    if device.type == "cuda":
        import torch

        row["peak_gpu_mem_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    if args.profile:
        row["profile"] = profile_block(step, args.steps, device)
    return row


def profile_block(step, steps: int, device, top: int = 12) -> dict:
    """One block of ``steps`` steps under ``torch.profiler``: wall and busy time, and the top ops by self time."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        _sync(device)
        wall = time.perf_counter() - t0
    events = prof.key_averages()
    on_dev = device.type == "cuda"

    def self_us(e):
        return (getattr(e, "self_device_time_total", 0) or 0) if on_dev else e.self_cpu_time_total

    ranked = sorted(events, key=self_us, reverse=True)[:top]
    # device busy time: the kernels' and copies' own events (an aten op's device time repeats its kernels')
    busy = sum(self_us(e) for e in events if not on_dev or e.device_type != DeviceType.CPU) / 1e6
    print(events.table(sort_by="self_device_time_total" if on_dev else "self_cpu_time_total", row_limit=top))
    return {"wall_s_per_step": round(wall / steps, 5),
            ("device_busy_s_per_step" if on_dev else "cpu_self_s_per_step"): round(busy / steps, 5),
            "top_ops": [{"name": e.key, "calls_per_step": round(e.count / steps, 1),
                         "self_ms_per_step": round(self_us(e) / 1e3 / steps, 3)} for e in ranked]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.train_speed", description=__doc__.split("\n")[0])
    p.add_argument("--config", default="fine", help="world-model preset whose DiT is timed (tiny, small, default, fine)")
    p.add_argument("--patch-size", type=int, default=None, help="the DiT's latent patch side (default: the preset's)")
    p.add_argument("--objective", default="step_forcing")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--device", default="cpu")
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (they include compilation)")
    p.add_argument("--steps", type=int, default=10, help="steps per timed block")
    p.add_argument("--repeats", type=int, default=3, help="timed blocks; the median is reported")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--profile", action="store_true", help="profile one more block and print the top ops")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="tiny DiT, batch 2, 3 + 2 x 3 steps")
    p.add_argument("--out", default=None, help=out_help("train_speed"))
    args = p.parse_args(argv)
    args.out = str(results_path("train_speed", args.quick, args.out))
    if args.quick:
        args.config, args.batch_size, args.warmup, args.steps, args.repeats = "tiny", 2, 3, 3, 2
    for name in ("batch_size", "steps", "repeats"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.warmup < 0:
        p.error(f"--warmup must be >= 0, got {args.warmup}")

    import torch

    from neuralsim.world_model.config import PRESETS
    from neuralsim.world_model.objectives import OBJECTIVES

    if args.config not in PRESETS:
        p.error(f"--config {args.config!r}: choose one of {PRESETS}")
    if args.objective not in OBJECTIVES:
        p.error(f"--objective {args.objective!r}: choose one of {sorted(OBJECTIVES)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error(f"--device {args.device}: CUDA is not available here")

    rows = []
    for m in args.modes:
        try:
            rows.append(time_mode(m, args, device))
        except Exception as e:  # e.g. no compiler toolchain for torch.compile: keep the other modes' rows
            log.error("mode %s failed: %r", m, e)
            rows.append({"mode": m, "config": args.config, "batch_size": args.batch_size, "device": str(device),
                         "error": repr(e)})
    print(f"\n{'mode':8} {'config':8} {'batch':>5} {'device':8} {'first steps (s)':>15} {'s/step':>9} {'clips/s':>9}")
    for r in rows:
        if "error" in r:
            print(f"{r['mode']:8} {r['config']:8} {r['batch_size']:5d} {r['device']:8} failed: {r['error'][:80]}")
            continue
        print(f"{r['mode']:8} {r['config']:8} {r['batch_size']:5d} {r['device']:8} {r['first_steps_s']:15.1f} "
              f"{r['s_per_step']:9.4f} {r['clips_per_s']:9.1f}")
    timed = {r["mode"]: r["s_per_step"] for r in rows if "s_per_step" in r}
    if len(timed) == 2:
        print(f"compile / eager time per step: {timed['compile'] / timed['eager']:.2f}")
    report = {"rows": rows, "threads": torch.get_num_threads(), "torch": torch.__version__,
              "machine": platform.processor() or platform.machine(),
              "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
