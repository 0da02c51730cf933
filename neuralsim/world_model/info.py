"""What a world-model checkpoint holds, read without building the model: ``neuralsim model info``.

:func:`checkpoint_info` reads ``config.json`` and ``model.safetensors`` without building the model.  It reports
the architecture, the parameter count per part, the training recipe stage by stage, and the checkpoint's
integrity as :meth:`WorldModel.from_pretrained` checks it: whether the weights were written with this config
(``config_sha256``), whether they still hash to the content hash saved with them (``weights_sha256``, see
:func:`~neuralsim.world_model.model.weights_digest`; checkpoints saved before it existed have none), and which
tensors hold NaN or inf values.  Hashing reads every tensor (a fraction of a second for the shipped 9 MB file).

Steps run per stage.  The trainer records ``steps_run`` in each stage; stages from older trainers only
have their budget (``steps``), which a ``--deadline`` run may end far short of.  For those the count is
derived from the recipe's running totals, exactly, where the recipe allows it:

* a later stage of the same kind (same ``<stage>_<objective>_steps`` count) that ``continues_from_step``
  ``c'`` means this stage ran ``c' - c`` steps (``c``: its own ``continues_from_step``, or 0);
* the last stage of its kind ran the recipe's total for that kind minus ``c``;
* otherwise (a stage whose successor restarted the count) it is unknown and shown as ``?``.
"""

from __future__ import annotations

import math
import os
from typing import Any

_PARTS = (("autoencoder.vae.encoder", "autoencoder encoder"), ("autoencoder.vae.quant_conv", "autoencoder encoder"),
          ("autoencoder.vae.decoder", "autoencoder decoder"), ("autoencoder.vae.post_quant_conv",
                                                               "autoencoder decoder"),
          ("autoencoder.ref_head", "reference head"), ("dit.", "DiT"), ("latent_", "latent stats"))


def count_key(stage: str, objective: str) -> str:
    """The recipe total a stage adds to, e.g. ``dit_step_forcing_steps``; the trainer names its counts with it."""
    return f"{stage}_{objective}_steps"


def _stage_key(stage: dict) -> str:
    return count_key(stage.get("stage"), stage.get("objective"))  # the trainer writes both into every stage


def stage_steps_run(recipe: dict) -> list[tuple[int | None, str]]:
    """For each recipe stage, the steps it ran and where that number comes from.

    Returns ``(steps, source)`` per stage, ``source`` one of ``"recorded"`` (the stage's ``steps_run``),
    ``"derived"`` (from the running totals, see the module docstring) or ``"unknown"`` (``steps`` None).
    """
    stages = list(recipe.get("stages", []))
    out: list[tuple[int | None, str]] = []
    for i, st in enumerate(stages):
        if "steps_run" in st:
            out.append((int(st["steps_run"]), "recorded"))
            continue
        key, start = _stage_key(st), int(st.get("continues_from_step", 0))
        later = [s for s in stages[i + 1:] if _stage_key(s) == key]
        if later and "continues_from_step" in later[0]:
            steps = int(later[0]["continues_from_step"]) - start
        elif not later and key in recipe:
            steps = int(recipe[key]) - start
        else:
            out.append((None, "unknown"))
            continue
        out.append((steps, "derived") if steps >= 0 else (None, "unknown"))
    return out


# a recipe stage's options as ``model info`` names them: (recipe key, words; ``{}`` takes the value)
_STAGE_OPTIONS = (("rollout_share", "rollouts {:g}"), ("reference_head", "reference head {}"),
                  ("head_only", "reference head only"), ("change_weight", "change weight {:g}"),
                  ("arm_conditioning", "arm: {}"), ("gripper_conditioning", "gripper: {}"))

# what every stage records, or what the table shows in its own columns: never listed as an option
_STAGE_FIELDS = {"stage", "objective", "data", "batch_size", "lr", "steps", "steps_run", "steps_run_source",
                 "decay_steps", "cool_down_secs", "continues_from_step", "decoder_layers_per_block", "rollout_seed",
                 "rollout_window"}


def stage_options(stage: dict, previous_decoder_depth: int | None = None) -> list[str]:
    """What a recipe stage did besides its objective, in words, in the order ``neuralsim model info`` prints them.

    The trainer records each option only when it was given (``--rollout-share``, ``--change-weight`` ...), so a
    plain stage gives ``[]``; an option this version does not name (recorded by an older trainer) is listed as
    ``key value``.  Every decoder stage records
    its decoder's depth; it is named only where it differs from ``previous_decoder_depth``, the depth before the
    stage (the previous decoder stage's, the encoder's before the first; None: unknown, as after a stage from
    before the trainer recorded it), i.e. where the stage pruned or deepened the decoder.
    """
    opts = [words.format(stage[key]) for key, words in _STAGE_OPTIONS if stage.get(key)]
    named = _STAGE_FIELDS | {key for key, _ in _STAGE_OPTIONS}
    # an option of an older trainer (a checkpoint's history keeps it): key and value
    opts += [f"{key} {value}" for key, value in stage.items() if key not in named and value not in (None, False, 0)]
    depth = stage.get("decoder_layers_per_block")
    if depth is not None and depth != previous_decoder_depth:
        opts.append(f"decoder {'' if previous_decoder_depth is None else f'{previous_decoder_depth} -> '}{depth} "
                    "layer(s) per block")
    return opts


def checkpoint_info(checkpoint: str | os.PathLike | None = None) -> dict[str, Any]:
    """A summary of a checkpoint directory, hub id or ``None`` (the shipped model), as plain data.

    Raises ``CheckpointError`` (a ValueError) when a file is missing, the config is invalid or the weights
    file is not a readable safetensors file.  What ``WorldModel.from_pretrained`` would refuse is *reported*, not
    raised -- this is the tool for finding out what is wrong: a config hash that does not match the weights
    (``"config_matches_weights": False``), weights that no longer match their saved content hash
    (``"weights_hash": "mismatch"``; ``"match"``, or ``"not recorded"`` for a checkpoint saved before the hash
    existed) and tensors holding NaN/inf (``"nonfinite_tensors"``: name -> count).
    """
    from safetensors import safe_open

    from ..envs.neural_droid import resolve_checkpoint
    from .model import (
        FORMAT_TAG,
        WEIGHTS_HASH_KEY,
        CheckpointError,
        config_digest,
        nonfinite_tensors,
        read_checkpoint_config,
        weights_digest,
    )

    d = resolve_checkpoint(checkpoint)
    cfg_path, w_path, cfg_json, config = read_checkpoint_config(d)
    params: dict[str, int] = {}
    dtypes: dict[str, int] = {}
    try:
        with safe_open(str(w_path), framework="pt") as f:
            meta = dict(f.metadata() or {})
            tensors = {}
            for name in f.keys():
                sl = f.get_slice(name)
                part = next((label for prefix, label in _PARTS if name.startswith(prefix)), "other")
                params[part] = params.get(part, 0) + math.prod(sl.get_shape())
                dtypes[sl.get_dtype()] = dtypes.get(sl.get_dtype(), 0) + 1
                tensors[name] = f.get_tensor(name)
    except Exception as e:  # SafetensorError / OSError on a corrupt or foreign file
        raise CheckpointError(f"cannot read {w_path}: corrupt or not a safetensors file ({e})") from e
    recipe = dict(config.recipe)
    runs = stage_steps_run(recipe)
    stages = [{**st, "steps_run": n, "steps_run_source": src} for st, (n, src) in zip(recipe.pop("stages", []), runs)]
    ae, dit = config.autoencoder, config.dit
    return {
        "path": str(d),
        "file_bytes": {p.name: p.stat().st_size for p in (cfg_path, w_path)},
        "format": meta.get("format"),
        "is_neuralsim_world_model": meta.get("format") == FORMAT_TAG,
        "config_matches_weights": meta.get("config_sha256") == config_digest(cfg_json),
        "weights_hash": ("not recorded" if WEIGHTS_HASH_KEY not in meta
                         else "match" if meta[WEIGHTS_HASH_KEY] == weights_digest(tensors) else "mismatch"),
        "nonfinite_tensors": nonfinite_tensors(tensors),
        "weight_dtypes": dtypes,
        "parameters": {**params, "total": sum(params.values())},
        "architecture": {
            "image_size": ae.image_size, "views": dit.num_views, "latent": [ae.latent_size, ae.latent_size,
                                                                            ae.latent_channels],
            "encoder_layers_per_block": ae.layers_per_block, "decoder_layers_per_block": ae.decoder_depth,
            "reference_head_channels": ae.reference_head_channels,
            "dit_depth": dit.depth, "dit_dim": dit.dim,
            "dit_heads": dit.num_heads, "patch_size": dit.patch_size, "cond_dim": dit.cond_dim,
            "gripper_conditioning": config.gripper_conditioning,
            "arm_conditioning": config.arm_conditioning,
            "grounding": dit.grounding if dit.geometry is None else f"{dit.grounding} ({dit.geometry.get('scene')} "
                                                                    "cameras)",
            "num_objects": dit.num_objects,
        },
        "inference": {"clip_length": config.clip_length, "window": config.window, "num_sink": config.num_sink,
                      "schedule": list(config.schedule)},
        "recipe_totals": recipe,  # what is left of the recipe once its stages are popped above
        "stages": stages,
    }


def checkpoint_is_loadable(info: dict[str, Any]) -> bool:
    """Whether :meth:`WorldModel.from_pretrained` would accept the checkpoint :func:`checkpoint_info` describes."""
    return bool(info["is_neuralsim_world_model"] and info["config_matches_weights"]
                and info["weights_hash"] != "mismatch" and not info["nonfinite_tensors"])


def format_checkpoint_info(info: dict[str, Any]) -> str:
    """The summary of :func:`checkpoint_info` as text for a terminal."""
    a, inf, p = info["architecture"], info["inference"], info["parameters"]
    files = ", ".join(f"{name} {_size(n)}" for name, n in info["file_bytes"].items())
    dtypes = ", ".join(f"{k} x{v}" for k, v in sorted(info["weight_dtypes"].items()))
    problems = []
    if not info["is_neuralsim_world_model"]:
        problems.append(f"NOT a neuralsim world model (format tag {info['format']!r})")
    elif not info["config_matches_weights"]:
        problems.append("config hash MISMATCH: config.json is not the one these weights were saved with")
    if info["weights_hash"] == "mismatch":
        problems.append("weights hash MISMATCH: the weights changed after they were saved (a damaged or edited file)")
    bad = info["nonfinite_tensors"]
    if bad:
        problems.append(f"{len(bad)} tensor(s) hold NaN/inf: " + ", ".join(f"{k} ({n})" for k,
                                                                           n in list(bad.items())[:5])
                        + (", ..." if len(bad) > 5 else ""))
    if problems:
        integrity = "; ".join(problems) + "; WorldModel.from_pretrained will refuse it"
    elif info["weights_hash"] == "match":
        integrity = "format, config hash and weights hash OK"
    else:
        integrity = "format and config hash OK, no NaN/inf; no weights hash recorded (saved before weights were hashed)"
    lines = [
        f"{info['path']}: {files}",
        f"  weights: {dtypes}; {integrity}",
        "  parameters: " + ", ".join(f"{k} {_count(v)}" for k, v in p.items() if k != "total")
        + f"; total {_count(p['total'])}",
        f"  views: {a['views']} x {a['image_size']}x{a['image_size']} -> latents "
        f"{'x'.join(str(x) for x in a['latent'])}"
        + f"; decoder {a['decoder_layers_per_block']} layer(s) per block"
        + (f" + a reference head {a['reference_head_channels']} wide (refines views against the episode's first)"
           if a.get("reference_head_channels") else ""),
        f"  DiT: depth {a['dit_depth']}, width {a['dit_dim']}, {a['dit_heads']} heads, patch {a['patch_size']}, "
        f"pose conditioning {a['cond_dim']}-d (arm: {a.get('arm_conditioning', 'measured')}, "
        f"gripper: {a.get('gripper_conditioning', 'measured')})"
        + (f", grounded in the views: {a['grounding']}" if a.get("grounding", "none") != "none" else "")
        + (f", object state: {a['num_objects']} object tokens per frame" if a.get("num_objects") else ""),
        f"  inference: window {inf['window']} frames ({inf['num_sink']} sink), training clip {inf['clip_length']}, "
        f"noise levels {', '.join(f'{t:g}' for t in inf['schedule'])}",
    ]
    totals = {k: v for k, v in info["recipe_totals"].items() if k.endswith("_steps")}
    if totals:
        lines.append("  trained steps: " + ", ".join(f"{k[:-6].replace('_', ' ')} {v:,}" for k, v in totals.items()))
    others = {k: v for k, v in info["recipe_totals"].items() if not k.endswith("_steps")}
    if others:
        lines.append("  recipe: " + ", ".join(f"{k}={v}" for k, v in others.items()))
    if info["stages"]:
        lines.append(f"  {len(info['stages'])} training stages (steps run: * derived from the recipe's totals, "
                     "? unknown):")
        header = ("#", "stage", "objective", "data", "batch", "lr", "budget", "steps run")
        rows = []
        decoder_depth = a.get("encoder_layers_per_block")  # what a decoder has unless a stage pruned or deepened it
        for i, st in enumerate(info["stages"], 1):
            run = st["steps_run"]
            mark = {"derived": "*", "unknown": "?"}.get(st["steps_run_source"], "")
            options = stage_options(st, previous_decoder_depth=decoder_depth)
            if st.get("stage") == "decoder":  # one that did not record its depth leaves the next one's prior unknown
                decoder_depth = st.get("decoder_layers_per_block")
            objective = str(st.get("objective", "")) + (" + " + ", ".join(options) if options else "")
            rows.append((str(i), str(st.get("stage", "")), objective, str(st.get("data", "")),
                         str(st.get("batch_size", "")), f"{st['lr']:g}" if "lr" in st else "",
                         f"{st['steps']:,}" if "steps" in st else "",
                         (f"{run:,}" if run is not None else "") + mark))
        widths = [max(len(r[c]) for r in rows + [header]) for c in range(len(header))]
        for r in [header, *rows]:
            lines.append("    " + "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    return "\n".join(lines)


def _size(n: int) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def _count(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 10_000 else f"{n:,}"
