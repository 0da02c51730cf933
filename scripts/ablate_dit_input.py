"""A copy of a world model with one of its DiT's optional inputs switched off: the input's embedding output zeroed,
every other weight kept, so a paired run against the original measures what the trained model takes from it.

    python scripts/ablate_dit_input.py runs/s63/dit_marks/model runs/s63/marks_off              # --input tcp_marks
    python scripts/ablate_dit_input.py MODEL OUT --input wrist_rays

It also prints how large the input's embedding is on held-out poses (``--data``, its first 20 episodes): its mean
norm per token, and how much of its spread is across frames (it moves with the pose) and across token positions.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from neuralsim.data.reader import list_episodes, read_simdroid_columns
from neuralsim.world_model.model import WorldModel

MODULES = {"tcp_marks": "tcp_embed", "wrist_rays": "ray_embed"}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("out")
    p.add_argument("--input", choices=sorted(MODULES), default="tcp_marks")
    p.add_argument("--data", default="data/simdroid_heldout", help="SimDROID episodes whose poses size the embedding")
    args = p.parse_args(argv)
    wm = WorldModel.from_pretrained(args.model)
    embed = getattr(wm.dit, MODULES[args.input])
    if embed is None:
        raise SystemExit(f"{args.model}: its DiT has no {args.input} input (DiTConfig.{args.input} is off)")
    with torch.no_grad():
        if Path(args.data).is_dir():
            conds = []
            for rec in list_episodes(args.data)[:20]:
                cols = read_simdroid_columns(args.data, rec, {"observation.state.cartesian_position": 6,
                                                              "observation.state.gripper_position": 1})
                conds.append(np.concatenate([cols["observation.state.cartesian_position"],
                                             cols["observation.state.gripper_position"]], 1))
            out = embed(torch.tensor(np.concatenate(conds), dtype=torch.float32))  # (frames, tokens, D)
            print(f"{args.input}: mean norm per token {out.norm(dim=-1).mean():.4f} (position embedding "
                  f"{wm.dit.pos_embed.norm(dim=-1).mean():.4f}); spread across frames "
                  f"{out.std(0).norm(dim=-1).mean():.4f}, across token positions {out.mean(0).std(0).norm():.4f}")
        embed.mlp[-1].weight.zero_()
        embed.mlp[-1].bias.zero_()
    wm.save_pretrained(args.out)
    print(f"wrote {args.out}: {args.model} with its {args.input} output zeroed")


if __name__ == "__main__":
    main()
