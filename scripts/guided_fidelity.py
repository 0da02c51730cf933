"""Action guidance at inference, no training: the fidelity benchmark with each denoising pass pushed away from a
negative conditioning, ``v = v_neg + scale * (v - v_neg)`` (classifier-free guidance with a counterfactual action
in place of a dropped one).

    PYTHONPATH=. python scripts/guided_fidelity.py --scale 2 --negative open -- \
        --checkpoint neuralsim/assets/world_model --data data/simdroid_heldout --max-episodes 20 --out X.json

Negatives (the DiT was trained on both kinds of condition, so it can answer them as it is):

* ``open``: the same frame with the gripper command 0. Where the gripper is open anyway the two passes agree and
  nothing changes; in a grasp and a carry the guidance amplifies what closing the gripper does to the picture.
* ``still``: the previous frame's condition, i.e. the arm as if it had not moved; amplifies what the motion does.

Everything after ``--`` goes to ``benchmarks.fidelity``. Each guided pass costs a second DiT pass.
docs/fidelity_history.md, "Action guidance at inference", has what it measured.
"""

from __future__ import annotations

import argparse
import sys

import torch

from neuralsim.world_model import model as wm_model
from neuralsim.world_model.dit import CausalDiT

NEGATIVES = ("open", "still")


def guide(dit: CausalDiT, scale: float, negative: str) -> CausalDiT:
    """Make ``dit`` (in place) guide every denoising pass of :func:`sample_frame_with_pending` away from
    ``negative``. The fused first pass commits the pending frame before the negative pass runs, so both passes
    read the same context."""
    if negative not in NEGATIVES:
        raise ValueError(f"negative must be one of {NEGATIVES}, got {negative!r}")
    denoise, denoise_with_pending = dit.denoise, dit.denoise_with_pending
    previous: dict[str, torch.Tensor] = {}

    def counterfactual(cond: torch.Tensor) -> torch.Tensor:
        if negative == "still":
            return previous["cond"]
        neg = cond.clone()
        neg[:, 6] = 0.0
        return neg

    def mix(v, x, t, cond, context):
        return v if scale == 1.0 else torch.lerp(denoise(x, t, counterfactual(cond), context), v, scale)

    def guided_denoise(x, t, cond, context, conditioning=None):
        return mix(denoise(x, t, cond, context, conditioning), x, t, cond, context)

    def guided_denoise_with_pending(x, t, cond, pending, pending_cond, context, cache, conditioning=None,
                                    pending_conditioning=None):
        previous["cond"] = pending_cond
        v = denoise_with_pending(x, t, cond, pending, pending_cond, context, cache, conditioning, pending_conditioning)
        return mix(v, x, t, cond, context)

    dit.denoise, dit.denoise_with_pending = guided_denoise, guided_denoise_with_pending
    return dit


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ours, rest = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", type=float, default=2.0, help="guidance scale (1: none)")
    p.add_argument("--negative", choices=NEGATIVES, default="open")
    args = p.parse_args(ours)
    from_pretrained = wm_model.WorldModel.from_pretrained.__func__

    def guided_from_pretrained(cls, *a, **k):
        wm = from_pretrained(cls, *a, **k)
        guide(wm.dit, args.scale, args.negative)
        return wm

    wm_model.WorldModel.from_pretrained = classmethod(guided_from_pretrained)
    from benchmarks import fidelity

    return fidelity.main(rest)


if __name__ == "__main__":
    sys.exit(main())
