"""Paired one-step loss of two world models on clips neither trained on: the same clips, the same noise.

Usage::

    python -m benchmarks.onestep_loss OLD_MODEL NEW_MODEL --data data/simdroid_heldout   # 192 clips x 2 draws

Two training runs' logged losses stop being comparable once their data, seeds or batch sizes differ (a GPU run
at batch 128 against a CPU run at batch 8, say).  This evaluates the objectives the trainer minimises (Step
Forcing and Diffusion Forcing at the trained noise levels), with the weights frozen, on ``--clips`` random
16-frame clips of ``--data`` under the same noise draws for both models
(:func:`benchmarks.generalisation_gap.objective_losses`).  Each batch is scored by both, so the difference is
paired batch by batch: ``B / A - 1`` with its standard error over the batches, and in how many batches B is
lower.  Both models must encode frames alike (the same autoencoder fingerprint); otherwise their latents, and so
their losses, measure different things.  Each model is conditioned as it was trained.  JSON goes to
``benchmarks/results/onestep_loss.json``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

from .generalisation_gap import OBJECTIVES, add_sampling_args, objective_losses, start, write_report


def paired(a: dict, b: dict, objectives=OBJECTIVES) -> dict:
    """Per objective: both means, ``B / A - 1`` and its paired standard error, and the batches where B is lower.

    ``a`` and ``b`` are :func:`objective_losses` results on the same dataset, clips, noise draws and seed."""
    out = {}
    for name in objectives:
        la, lb = a[name]["batch_losses"], b[name]["batch_losses"]
        if len(la) != len(lb) or a["clips"] != b["clips"] or a["noise_draws"] != b["noise_draws"]:
            raise ValueError(f"{name}: the two results are not on the same batches ({len(la)} against {len(lb)} "
                             "batches); run both with the same --clips, --noise-draws, --batch-size and --seed")
        d = [y - x for x, y in zip(la, lb)]
        mean_a = statistics.fmean(la)
        se = statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else float("nan")
        out[name] = {"a": mean_a, "b": statistics.fmean(lb), "relative": statistics.fmean(d) / mean_a,
                     "relative_stderr": se / mean_a, "b_lower": sum(x < 0 for x in d), "batches": len(d),
                     "per_view_relative": {v: b[name]["per_view"][v] / a[name]["per_view"][v] - 1
                                           for v in a[name]["per_view"]}}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.onestep_loss", description=__doc__.split("\n")[0])
    p.add_argument("a", help="the baseline WorldModel checkpoint (directory or hub id)")
    p.add_argument("b", help="the candidate checkpoint, scored against A")
    p.add_argument("--data", required=True, help="a SimDROID dataset neither model trained on")
    add_sampling_args(p)
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "onestep_loss.json"))
    p.add_argument("--no-progress", dest="progress", action="store_false")
    args = p.parse_args(argv)
    start(p, args)

    import torch

    from neuralsim.world_model.latents import autoencoder_fingerprint
    from neuralsim.world_model.model import WorldModel

    models = {k: WorldModel.from_pretrained(path).float().eval() for k, path in (("a", args.a), ("b", args.b))}
    prints = {k: autoencoder_fingerprint(m.autoencoder, m.config.autoencoder.image_size) for k, m in models.items()}
    if prints["a"] != prints["b"]:
        raise SystemExit(f"error: {args.a} and {args.b} encode frames differently (autoencoder fingerprints "
                         f"{prints['a']} and {prints['b']}): their latents, and so their losses, are not comparable")
    if models["a"].config.clip_length != models["b"].config.clip_length:
        raise SystemExit(f"error: clip lengths differ ({models['a'].config.clip_length} against "
                         f"{models['b'].config.clip_length}): the clips would not be the same")
    t0 = time.time()
    rows = {k: objective_losses(m, args.data, args.clips, args.noise_draws, args.batch_size, args.seed,
                                progress=args.progress) for k, m in models.items()}
    result = paired(rows["a"], rows["b"])
    print(f"\nA = {args.a}\nB = {args.b}\non {rows['a']['clips']} clips of {args.data}, "
          f"{args.noise_draws} noise draws each\n")
    print(f"{'objective':28} {'A':>9} {'B':>9} {'B / A - 1':>16} {'B lower':>10}")
    for name, r in result.items():
        print(f"{name:28} {r['a']:9.5f} {r['b']:9.5f} {100 * r['relative']:+7.2f} ± {100 * r['relative_stderr']:.2f}% "
              f"{r['b_lower']:>4} / {r['batches']}")
        print(" " * 30 + "per view: " + ", ".join(f"{v} {100 * x:+.1f}%" for v, x in r["per_view_relative"].items()))
    report = {"a": args.a, "b": args.b, "data": args.data, "seed": args.seed, "clips": rows["a"]["clips"],
              "noise_draws": args.noise_draws, "paired": result, "losses": rows,
              "seconds": round(time.time() - t0, 1), "threads": torch.get_num_threads()}
    print()
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
