"""The trainer's resumable checkpoint: ``OUT/checkpoint/`` beside the exported ``OUT/model/``.

``checkpoint/`` holds everything a stopped run needs to go on as if it never stopped, in safetensors and JSON (never
a pickle): ``raw/`` (the model's current weights, a :class:`~neuralsim.world_model.model.WorldModel` checkpoint),
``ema.safetensors`` (the weights' moving average), ``optimizer.safetensors`` (AdamW's moments; its scalars and
parameter groups in ``trainer.json``), ``rng.safetensors`` (torch's global RNG) and ``trainer.json`` (the step, the
run's options, the recipe so far, Python's and NumPy's RNG).  ``model/`` holds the EMA weights as a WorldModel
checkpoint, what later stages and the env load.  Both are replaced atomically: a run killed while writing leaves the
previous ``checkpoint/`` (or ``checkpoint.old/``) whole.
"""

from __future__ import annotations

import copy
import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

TRAINER_FILE = "trainer.json"


def atomic_dir_write(final: Path, write: Callable[[Path], None]) -> None:
    """Let ``write`` fill a fresh directory, then swap it in for ``final`` (the old one removed after the swap)."""
    tmp, old = final.with_name(final.name + ".tmp"), final.with_name(final.name + ".old")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write(tmp)
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def optimizer_to_safetensors(opt) -> tuple[dict, dict]:
    """An optimiser's state as (tensors for a safetensors file, JSON-able scalars and parameter groups)."""
    sd = opt.state_dict()
    tensors, scalars = {}, {}
    for idx, st in sd["state"].items():
        for k, v in st.items():
            if hasattr(v, "shape"):
                tensors[f"state.{idx}.{k}"] = v.detach().cpu().contiguous()
            else:
                scalars[f"{idx}.{k}"] = v
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def optimizer_from_safetensors(opt, tensors: dict, meta: dict) -> None:
    """Restore what :func:`optimizer_to_safetensors` wrote into ``opt``."""
    state: dict = {}
    for name, v in tensors.items():
        _, idx, k = name.split(".", 2)
        state.setdefault(int(idx), {})[k] = v
    for name, v in meta["scalars"].items():
        idx, k = name.split(".", 1)
        state.setdefault(int(idx), {})[k] = v
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


def save_checkpoint(out: Path, model, ema_params: dict, opt, step: int, train_config: dict, recipe: dict) -> None:
    """Write ``out/checkpoint`` (resumable) and ``out/model`` (the EMA weights) atomically."""
    import numpy as np
    import torch
    from safetensors.torch import save_file

    def write_ckpt(d: Path) -> None:
        model.config.recipe = recipe
        model.save_pretrained(d / "raw")
        save_file({k: v.detach().cpu().contiguous() for k, v in ema_params.items()}, str(d / "ema.safetensors"))
        opt_t, opt_meta = optimizer_to_safetensors(opt)
        save_file(opt_t, str(d / "optimizer.safetensors"))
        save_file({"torch_rng": torch.get_rng_state()}, str(d / "rng.safetensors"))
        np_state = np.random.get_state()
        trainer = {"step": step, "train_config": train_config, "optimizer": opt_meta, "recipe": recipe,
                   "python_rng": repr(random.getstate()),
                   "numpy_rng": [np_state[0], np_state[1].tolist(), *np_state[2:]]}
        (d / TRAINER_FILE).write_text(json.dumps(trainer, indent=1))

    atomic_dir_write(out / "checkpoint", write_ckpt)

    def write_model(d: Path) -> None:
        ema_model = copy.deepcopy(model)
        ema_model.load_state_dict({**model.state_dict(), **ema_params})
        ema_model.config.recipe = recipe
        ema_model.save_pretrained(d)

    atomic_dir_write(out / "model", write_model)


#: Where ``TrainConfig.snapshot_every`` keeps copies of the exported model: ``OUT/snapshots/step_NNNNNNN``.
SNAPSHOT_DIR = "snapshots"


def snapshot_dir(out: Path, step: int) -> Path:
    return Path(out) / SNAPSHOT_DIR / f"step_{int(step):07d}"


def keep_snapshot(out: Path, step: int) -> Path:
    """Copy ``out/model`` (just written) to :func:`snapshot_dir` atomically; returns that directory."""
    final = snapshot_dir(out, step)
    atomic_dir_write(final, lambda d: shutil.copytree(Path(out) / "model", d, dirs_exist_ok=True))
    return final


def list_snapshots(out: Path) -> list[tuple[int, Path]]:
    """(step, directory) of every snapshot a run kept, by step."""
    root = Path(out) / SNAPSHOT_DIR
    found = []
    for d in root.glob("step_*") if root.is_dir() else ():
        tail = d.name.removeprefix("step_")
        if tail.isdigit() and (d / "config.json").is_file():
            found.append((int(tail), d))
    return sorted(found)


def recorded_dit_steps(config: dict) -> int | None:
    """The DiT steps (Diffusion plus Step Forcing) a model's ``config.json`` (as a dict) records over its whole
    history; None when it records neither (a model whose DiT was never trained by a recorded stage)."""
    recipe = config.get("recipe") or {}
    parts = [recipe.get("dit_diffusion_forcing_steps"), recipe.get("dit_step_forcing_steps")]
    return None if all(p is None for p in parts) else sum(p or 0 for p in parts)


def find_checkpoint(out: Path) -> Path | None:
    """``out/checkpoint`` (or ``checkpoint.old``, left by a run killed mid-write) if it holds a trainer state."""
    for name in ("checkpoint", "checkpoint.old"):
        if (out / name / TRAINER_FILE).is_file():
            return out / name
    return None


def read_trainer(checkpoint: Path) -> dict[str, Any]:
    """``trainer.json`` of a checkpoint directory."""
    return json.loads((checkpoint / TRAINER_FILE).read_text())


@dataclass
class TrainerState:
    """What a checkpoint restores besides the model: the step reached, the EMA weights and the recipe so far."""

    step: int
    ema: dict
    recipe: dict
    train_config: dict


def load_checkpoint(checkpoint: Path, opt, params: dict, device) -> TrainerState:
    """Restore ``opt`` and torch's RNG from ``checkpoint``; returns the EMA of ``params`` (on ``device``) and the
    step and recipe it was written at."""
    import torch

    from .model import load_safetensors

    trainer = read_trainer(checkpoint)
    ema_t, _ = load_safetensors(checkpoint / "ema.safetensors")
    opt_t, _ = load_safetensors(checkpoint / "optimizer.safetensors")
    optimizer_from_safetensors(opt, opt_t, trainer["optimizer"])
    rng_t, _ = load_safetensors(checkpoint / "rng.safetensors")
    torch.set_rng_state(rng_t["torch_rng"])
    return TrainerState(step=int(trainer["step"]), ema={k: ema_t[k].to(device) for k in params},
                        recipe=trainer["recipe"], train_config=trainer["train_config"])
