"""World-model throughput: generated frames per second, KV cache vs recomputing the window.

Usage::

    python -m benchmarks.throughput --quick            # < 60 s on a laptop CPU
    python -m benchmarks.throughput --model runs/sf/model --batch-sizes 1 8 --steps 60
    python -m benchmarks.throughput --shipped --env    # the shipped model, plus env.step of NeuralDROID-v0

For each batch size it times (a) ``WorldModel.step`` (S denoising passes over the new frame reading the
KV cache + one commit pass + decoding the three views) and (b) the same frame produced by recomputing
the whole window from scratch on every denoising pass (no cache) + decoding.  A "frame" is one time
step of one environment (three views); ``frames_per_s = batch * time_steps / s``.  Warm-up steps fill
the window first so the timed steps run at full window.

``--env`` also times ``env.step`` of ``NeuralDROID-v0`` end to end (action checks, the action adapter,
forward kinematics, the world model, decoding, observation assembly; no reward function) at
N = 1 (``NeuralDROIDEnv``) and for each ``--batch-sizes`` N > 1 (``gym.make_vec``, one batched world
model), with smooth random actions, after the window has filled.  Every row is the median of
``--repeats`` timed blocks of ``--steps`` (each block's time is in the JSON too, with the share of CPU
time the hypervisor stole during it, ``steal_pct_blocks``, read from ``/proc/stat``): this shared VM's
speed drifts by tens of percent within minutes, and the steal share says when that was the machine.
JSON goes to ``benchmarks/results/throughput.json`` (``--quick``: ``throughput_quick.json``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import time
from pathlib import Path

from ..common.results_path import out_help, results_path


def _recompute_step(wm, history, hist_cond, cond, generator, window, reference=None):
    """One time step without a cache: every pass reruns the DiT over the last ``window`` frames."""
    import torch

    from neuralsim.world_model.sampler import euler_step, sample_noise

    d = wm.config.dit
    b = cond.shape[0]
    x = sample_noise((b, d.num_views, d.latent_channels, d.latent_size, d.latent_size), generator, wm.device)
    ts = [0.0] + list(wm.config.schedule)
    keep = slice(-(window - 1), None) if window > 1 else slice(0, 0)
    hist, hc = history[:, keep], hist_cond[:, keep]
    for k in range(len(ts) - 1, 0, -1):
        seq = torch.cat([hist, x[:, None]], 1)
        t = torch.zeros(seq.shape[:2])
        t[:, -1] = ts[k]
        v = wm.dit(seq, t, torch.cat([hc, cond[:, None]], 1))[:, -1]
        x = euler_step(x, v, ts[k], ts[k - 1])
    return x, wm.decode(x, reference)  # reference: the reset frame, for a model with a reference head


def cpu_times(stat_path: str = "/proc/stat") -> tuple[int, int] | None:
    """(steal, total) jiffies of all CPUs from Linux's ``/proc/stat``; None where it cannot be read.

    Steal time is what the hypervisor gave to other guests while this VM wanted to run: the share of
    it during a timed block says how much of that block's time was the machine, not the code.
    """
    try:
        with open(stat_path) as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return ticks[7], sum(ticks)


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """Percent of CPU time stolen by the hypervisor between two :func:`cpu_times` readings."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return round(100.0 * (after[0] - before[0]) / (after[1] - before[1]), 1)


def _median_time(fn, steps: int, repeats: int, block_end=None) -> tuple[float, list[float], list[float | None]]:
    """Seconds per call of ``fn``: the median over ``repeats`` blocks of ``steps`` calls, every block's
    ms per call, and the hypervisor's steal share (%) during each block (None off Linux).  On a shared
    VM whose speed drifts, a median of blocks resists a slow spell better than one long block.
    ``block_end`` runs before each block's clock stops (e.g. a GPU synchronisation)."""
    import statistics

    blocks, steal = [], []
    for _ in range(max(1, repeats)):
        c0, t0 = cpu_times(), time.perf_counter()
        for _ in range(steps):
            fn()
        if block_end is not None:
            block_end()
        blocks.append((time.perf_counter() - t0) / steps)
        steal.append(steal_share(c0, cpu_times()))
    return statistics.median(blocks), [round(1000 * b, 2) for b in blocks], steal


def measure(wm, batch: int, steps: int, window: int, seed: int = 0, repeats: int = 3) -> dict:
    import torch

    s = wm.config.autoencoder.image_size
    g = torch.Generator().manual_seed(seed)
    views = torch.randint(0, 256, (batch, 3, s, s, 3), dtype=torch.uint8, generator=g)
    cond = torch.zeros(batch, 7)
    warm = window  # fill the window first
    state = wm.new_state(batch, window=window)
    wm.reset(state, None, views, cond)
    frames = [wm.encode(views)]
    with torch.inference_mode():
        for _ in range(warm):
            frames.append(wm.step_latents(state, cond, g))
            wm.decode(frames[-1], state.reference())
    per_step, blocks, steal = _median_time(lambda: wm.step(state, cond, g), steps, repeats)

    with torch.inference_mode():  # recompute from the same full window the cached run had
        hist, hc = torch.stack(frames[-window:], 1), cond[:, None].expand(-1, min(window, len(frames)), -1)
        n_re = max(2, steps // 4)
        t0 = time.perf_counter()
        for _ in range(n_re):
            x, _ = _recompute_step(wm, hist, hc, cond, g, window, state.reference())
            hist, hc = torch.cat([hist, x[:, None]], 1)[:, -window:], torch.cat([hc, cond[:, None]], 1)[:, -window:]
        recompute = (time.perf_counter() - t0) / n_re
    return {
        "batch_size": batch,
        "window": window,
        "cached_ms_per_step_blocks": blocks,
        "steal_pct_blocks": steal,
        "cached_time_steps_per_s": 1.0 / per_step,
        "cached_frames_per_s": batch / per_step,
        "recompute_time_steps_per_s": 1.0 / recompute,
        "recompute_frames_per_s": batch / recompute,
        "cache_speedup": recompute / per_step,
        "cache_memory_mb": state.cache.memory_bytes() / 2**20,
    }


def measure_env(checkpoint, num_envs: int, steps: int, warmup: int, seed: int = 0, repeats: int = 3,
                denoising_steps: int | None = None) -> dict:
    """``env.step`` calls per second (and env steps per second) of NeuralDROID-v0 with ``num_envs`` rows."""
    import gymnasium as gym
    import numpy as np

    import neuralsim  # noqa: F401  (registers NeuralDROID-v0)
    from neuralsim.envs.neural_droid import NeuralDROIDEnv

    if num_envs == 1:
        env = NeuralDROIDEnv(checkpoint=checkpoint, reward_fn=None, max_episode_steps=None,
                             denoising_steps=denoising_steps)
    else:
        env = gym.make_vec("NeuralDROID-v0", num_envs=num_envs, checkpoint=checkpoint, reward_fn=None,
                           max_episode_steps=None, denoising_steps=denoising_steps)
    rng = np.random.default_rng(seed)
    shape = (8,) if num_envs == 1 else (num_envs, 8)
    v = np.zeros(shape, np.float32)

    def action():
        v[..., :7] = np.clip(0.9 * v[..., :7] + 0.1 * rng.uniform(-1, 1, shape[:-1] + (7,)), -1, 1)
        v[..., 7] = 0.0
        return v.copy()

    env.reset(seed=seed)
    for _ in range(warmup):
        env.step(action())
    dt, blocks, steal = _median_time(lambda: env.step(action()), steps, repeats)
    env.close()
    return {"num_envs": num_envs, "step_calls_per_s": 1.0 / dt, "env_steps_per_s": num_envs / dt,
            "ms_per_call": 1000 * dt, "ms_per_call_blocks": blocks, "steal_pct_blocks": steal}


def _steal_note(row: dict) -> str:
    known = [x for x in row["steal_pct_blocks"] if x is not None]
    return f"; steal {min(known):.0f}-{max(known):.0f}%" if known else ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.throughput", description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help="WorldModel checkpoint dir (default: untrained default config)")
    p.add_argument("--shipped", action="store_true", help="time the shipped default checkpoint")
    p.add_argument("--env", action="store_true", help="also time env.step of NeuralDROID-v0 (N = 1 and batch sizes)")
    p.add_argument("--config", default="default", help="preset when --model is not given")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    p.add_argument("--steps", type=int, default=60, help="timed time steps per batch size")
    p.add_argument("--window", type=int, default=None)
    p.add_argument("--denoising-steps", dest="denoising_steps", type=int, default=None,
                   help="denoising passes per frame, 1..S on the trained levels (default: the model's "
                        "config.denoising_steps, else all S)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                   help="torch thread counts to time, each in turn (default 1 2; 0 = torch's default). Time on an "
                        "idle machine: with 2 threads, small-batch inference collapses when another process holds a "
                        "core (OpenMP threads wait on a descheduled peer)")
    p.add_argument("--repeats", type=int, default=3,
                   help="timed blocks of --steps per row; the row reports their median (default 3)")
    p.add_argument("--quick", action="store_true", help="fewer steps (< 60 s)")
    p.add_argument("--out", default=None, help=out_help("throughput"))
    args = p.parse_args(argv)
    args.out = str(results_path("throughput", args.quick, args.out))

    import torch

    from neuralsim.world_model.config import preset
    from neuralsim.world_model.model import WorldModel

    if any(t < 0 for t in args.threads):
        raise SystemExit(f"--threads must be >= 0, got {args.threads}")
    default_threads = torch.get_num_threads()
    if args.shipped:
        from neuralsim.envs.neural_droid import DEFAULT_CHECKPOINT

        args.model = str(DEFAULT_CHECKPOINT)
    if args.model:
        wm = WorldModel.from_pretrained(args.model)
    else:
        torch.manual_seed(0)
        wm = WorldModel(preset(args.config)).eval()
        with torch.no_grad():  # untrained AdaLN-Zero weights would skip work; use random ones
            for prm in wm.dit.parameters():
                prm.normal_(0, 0.02)
    window = args.window or wm.config.window
    from neuralsim.envs.neural_droid import inference_schedule

    try:  # the passes the env will run: --denoising-steps, else the model's default
        schedule = inference_schedule(wm.config, args.denoising_steps)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    wm.config = dataclasses.replace(wm.config, schedule=schedule, denoising_steps=None)
    steps = 10 if args.quick else args.steps
    repeats = 1 if args.quick else args.repeats
    if steps < 1 or repeats < 1:
        raise SystemExit(f"--steps and --repeats must be >= 1, got {steps}, {repeats}")
    results, env_results = [], []
    for threads in args.threads:
        torch.set_num_threads(threads or default_threads)
        n_threads = torch.get_num_threads()
        for b in args.batch_sizes:
            r = {"threads": n_threads, **measure(wm, b, steps, window, repeats=repeats)}
            results.append(r)
            print(f"{n_threads} thread(s), batch {b:3d}: cached {r['cached_frames_per_s']:7.1f} frames/s "
                  f"({r['cached_time_steps_per_s']:.1f} steps/s), recompute {r['recompute_frames_per_s']:7.1f} "
                  f"frames/s, speedup x{r['cache_speedup']:.1f}, cache {r['cache_memory_mb']:.2f} MiB{_steal_note(r)}")
        if args.env:
            for n in sorted({1, *args.batch_sizes}):
                r = {"threads": n_threads, **measure_env(args.model, n, steps, warmup=window, repeats=repeats,
                                                            denoising_steps=args.denoising_steps)}
                env_results.append(r)
                print(f"{n_threads} thread(s), NeuralDROID-v0 N={n:3d}: {r['step_calls_per_s']:6.1f} env.step calls/s "
                      f"= {r['env_steps_per_s']:6.1f} env steps/s ({r['ms_per_call']:.0f} ms per call){_steal_note(r)}")
    out = {
        "model": args.model or f"untrained preset '{args.config}'",
        "dit_params": sum(q.numel() for q in wm.dit.parameters()),
        "autoencoder_params": sum(q.numel() for q in wm.autoencoder.parameters()),
        "tokens_per_frame": wm.config.dit.tokens_per_frame,
        "denoising_steps": wm.config.num_steps,
        "schedule": list(wm.config.schedule),
        "threads": sorted({r["threads"] for r in results}),
        "cpu_count": os.cpu_count(),
        "machine": platform.processor() or platform.machine(),
        "quick": args.quick,
        "steps_per_block": steps,
        "repeats": repeats,
        "results": results,
        "env": env_results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
