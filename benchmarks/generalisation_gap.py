"""Generalisation gap of a world model's DiT: its training objectives on training clips against held-out ones.

Usage::

    python -m benchmarks.generalisation_gap --checkpoint checkpoints/fine \\
        --train data/simdroid --heldout data/simdroid_heldout            # 192 clips x 2 noise draws, ~3 min

A falling training loss with flat fidelity numbers can mean the DiT memorises its training episodes.
This measures that directly: the same objectives the trainer minimises (Step Forcing and Diffusion
Forcing at the trained noise levels), with the weights frozen, on ``--clips`` random 16-frame clips of
each dataset, under the same noise draws, in all and per camera view (which view the error comes from).
Both datasets are read through the model's own latent store
(:class:`~neuralsim.world_model.latents.LatentStore`; the held-out split is encoded on first use).  The
gap is ``heldout / train - 1``; each mean comes with its standard error over the batches, so a gap
inside ~2 standard errors is noise.  JSON goes to ``benchmarks/results/generalisation_gap.json`` (``--quick``:
``generalisation_gap_quick.json``).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import time
from pathlib import Path

from .results_path import out_help, results_path

log = logging.getLogger(__name__)

OBJECTIVES = ("step_forcing", "diffusion_forcing_discrete")
#: Step Forcing with each clip's poses swapped for another clip's: how much the loss depends on the actions.
OTHER_POSES = "step_forcing_other_poses"


def objective_losses(wm, root: str | Path, clips: int, noise_draws: int, batch_size: int = 16, seed: int = 0,
                     objectives=OBJECTIVES, progress: bool = False) -> dict:
    """Mean loss (and its standard error over batches) of each objective on ``clips`` random clips of
    ``root``, ``noise_draws`` noise draws each; the clips and the noise depend only on ``seed``, so two models'
    ``batch_losses`` pair up batch by batch.  The clips are conditioned as the model was trained
    (``WorldModelConfig.gripper_conditioning`` / ``arm_conditioning``).
    ``OTHER_POSES`` is Step Forcing on the same clips and noise, conditioned on the next clip's poses: a
    model that follows its actions does much worse with them, one that ignores them does not."""
    import torch

    from neuralsim.data.reader import ClipDataset
    from neuralsim.world_model.latents import LatentStore
    from neuralsim.world_model.objectives import get_objective

    if not (Path(root) / "meta").is_dir():
        raise FileNotFoundError(f"{root}: not a SimDROID dataset (no meta/); make one with `neuralsim data generate`")
    ds = ClipDataset(root, clip_length=wm.config.clip_length, image_size=wm.config.autoencoder.image_size)
    # the conditioning the DiT was trained on (and the env feeds it): since v20 the gripper command, since v21
    # the replayed arm; the recorded signals would measure it on inputs it never saw
    store = LatentStore(wm.autoencoder, ds, wm.device, progress=progress,
                        gripper=getattr(wm.config, "gripper_conditioning", "measured"),
                        arm=getattr(wm.config, "arm_conditioning", "measured"))
    g = torch.Generator().manual_seed(seed)
    idx = torch.randperm(len(ds), generator=g)[:clips].tolist()
    out = {"dataset": str(root), "clips": len(idx), "noise_draws": noise_draws}
    if OTHER_POSES in objectives and len(idx) < 2:
        raise ValueError(f"{OTHER_POSES} swaps poses between clips: it needs at least 2 clips, got {len(idx)}")
    for name in objectives:
        fn, kw = get_objective("step_forcing" if name == OTHER_POSES else name)
        batch_losses, view_losses = [], {}
        for k in range(noise_draws):
            ng = torch.Generator().manual_seed(seed * 1000 + 1 + k)
            for i in range(0, len(idx), batch_size):
                z, cond = store.get(idx[i:i + batch_size], wm.device)
                if name == OTHER_POSES:  # clip j gets clip j+1's poses (the last one the first's)
                    _, cond = store.get([idx[(j + 1) % len(idx)] for j in range(i, i + len(cond))], wm.device)
                with torch.no_grad():
                    loss, metrics = fn(wm.dit, wm.normalise(z), cond, wm.config.schedule, generator=ng, **kw)
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"{name}: non-finite loss on {root} clips {idx[i:i + batch_size]}")
                batch_losses.append(float(loss))
                for v in range(z.shape[2]):
                    view_losses.setdefault(_view_name(v, z.shape[2]), []).append(float(metrics[f"loss_view{v}"]))
        n = len(batch_losses)
        sd = statistics.stdev(batch_losses) if n > 1 else float("nan")
        out[name] = {"mean": statistics.fmean(batch_losses), "stderr": sd / math.sqrt(n), "batches": n,
                     "per_view": {v: statistics.fmean(ls) for v, ls in view_losses.items()},
                     "batch_losses": batch_losses}  # in a fixed order: two models' lists pair up
    return out


def _view_name(i: int, n_views: int) -> str:
    from neuralsim.episode import VIEW_NAMES

    return VIEW_NAMES[i] if n_views == len(VIEW_NAMES) else f"view{i}"


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    """The options that fix which clips and noise :func:`objective_losses` scores, and the threads."""
    p.add_argument("--clips", type=int, default=192, help="random clips per dataset")
    p.add_argument("--noise-draws", type=int, default=2, help="noise draws per clip")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)


def start(p: argparse.ArgumentParser, args) -> None:
    """Refuse counts below 1 (through ``p.error``), then set up logging and torch's threads."""
    for name in ("clips", "noise_draws", "batch_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)


def write_report(path: str | Path, report: dict) -> None:
    """Write ``report`` as JSON to ``path`` (its folder made) and say where, with its ``seconds``."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(report, indent=1) + "\n")
    print(f"{report['seconds']} s; JSON: {path}")


def compare(train: dict, heldout: dict, objectives=OBJECTIVES) -> dict:
    """Per objective: held-out / train - 1, and that ratio's standard error (first order)."""
    gap = {}
    for name in objectives:
        a, b = train[name], heldout[name]
        rel = b["mean"] / a["mean"] - 1
        se = (b["mean"] / a["mean"]) * math.sqrt((a["stderr"] / a["mean"]) ** 2 + (b["stderr"] / b["mean"]) ** 2)
        gap[name] = {"relative_gap": rel, "stderr": se}
    return gap


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.generalisation_gap", description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", required=True, help="a WorldModel checkpoint directory (or hub id)")
    p.add_argument("--train", required=True, help="a dataset the model was trained on")
    p.add_argument("--heldout", required=True, help="a dataset of the same distribution it never saw")
    add_sampling_args(p)
    p.add_argument("--out", default=None, help=out_help("generalisation_gap"))
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.add_argument("--other-poses", action="store_true",
                   help=f"also {OTHER_POSES}: Step Forcing under another clip's poses, i.e. does the model follow "
                        "its actions (one more pass per batch)")
    p.add_argument("--quick", action="store_true", help="32 clips x 1 noise draw per dataset (~30 s once the "
                   "latent stores exist): a smoke run, its gap mostly noise")
    args = p.parse_args(argv)
    args.out = str(results_path("generalisation_gap", args.quick, args.out))
    if args.quick:
        args.clips, args.noise_draws = 32, 1
    start(p, args)

    import torch

    from neuralsim.world_model.model import WorldModel

    wm = WorldModel.from_pretrained(args.checkpoint).float().eval()
    t0 = time.time()
    objectives = OBJECTIVES + ((OTHER_POSES,) if args.other_poses else ())
    rows = {split: objective_losses(wm, root, args.clips, args.noise_draws, args.batch_size, args.seed,
                                    objectives=objectives, progress=args.progress)
            for split, root in (("train", args.train), ("heldout", args.heldout))}
    gap = compare(rows["train"], rows["heldout"], objectives)
    print(f"\n{'objective':28} {'train':>16} {'held-out':>16} {'gap':>14}")
    for name in objectives:
        a, b, d = rows["train"][name], rows["heldout"][name], gap[name]
        print(f"{name:28} {a['mean']:.5f}±{a['stderr']:.5f} {b['mean']:.5f}±{b['stderr']:.5f} "
              f"{100 * d['relative_gap']:+6.1f}±{100 * d['stderr']:.1f}%")
    print("\nper view (where the error comes from):")
    for name in objectives:
        for view in rows["train"][name]["per_view"]:
            a, b = rows["train"][name]["per_view"][view], rows["heldout"][name]["per_view"][view]
            print(f"  {name:28} {view:24} {a:.5f} {b:.5f} {100 * (b / a - 1):+6.1f}%")
    extra = {}
    if args.other_poses:
        own, other = rows["heldout"]["step_forcing"], rows["heldout"][OTHER_POSES]
        sensitivity = {view: other["per_view"][view] / own["per_view"][view] for view in own["per_view"]}
        print(f"\nfollows its actions: held-out Step Forcing loss under another clip's poses / under its own = "
              f"{other['mean'] / own['mean']:.1f}x (" + ", ".join(f"{v} {r:.1f}x" for v, r in sensitivity.items())
              + "); about 1x would mean the poses are ignored")
        extra["pose_sensitivity_heldout"] = {"all": other["mean"] / own["mean"], **sensitivity}
    report = {"checkpoint": args.checkpoint, "seed": args.seed, **rows, "gap": gap, **extra,
              "seconds": round(time.time() - t0, 1), "threads": torch.get_num_threads()}
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
