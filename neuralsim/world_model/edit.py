"""Change a trained world model's parts and write it as a new checkpoint: ``neuralsim model edit``.

    neuralsim model edit runs/sf/model --out runs/sf_head --reference-head 32       # a fresh reference head
    neuralsim model edit runs/sf/model --out runs/ship --decoder-from runs/dec/model --window 32 --float16

Each edit keeps every weight it does not name bit for bit, so the DiT's latents keep their meaning:

* ``fresh_dit`` -- a freshly initialised DiT on the trained autoencoder (what the objective diagnostic,
  ``scripts/objective_diagnostic.sh``, trains every objective from); the recipe forgets the DiT's stages;
  ``patch_size`` gives the fresh DiT another token size (2 on a 16 x 16 latent: 64 tokens a view instead of 16);
* ``decoder_from`` -- the decoder (and its reference head) of another run of the same encoder
  (:meth:`~neuralsim.world_model.model.WorldModel.take_decoder_from`);
* ``decoder_layers_per_block`` -- a shallower or deeper decoder
  (:meth:`~neuralsim.world_model.model.WorldModel.with_decoder_layers`), for a decoder stage to train on;
* ``reference_head`` -- a fresh reference head of this width (0 removes the head), for ``--head-only`` training;
* ``grounding`` -- ``projected`` adds geometry-grounded conditioning (the model's scene's cameras) with its last
  layer at zero, so the model computes what it did until a DiT stage trains it; ``none`` removes it;
* ``condition_features`` -- what the DiT's condition MLP reads (``raw``, ``normalised``, ``fourier``): its first
  layer is drawn fresh and the next DiT stage fits the standardisation (a pilot arm from ``--fresh-dit``);
* ``objects`` -- K object tokens per frame (``dit.num_objects``), fresh, with their velocity head and the image
  tokens' gate on them at zero: the image predictions stay what they were until a DiT stage (on data recording the
  objects' poses, whose statistics it fits) trains them; 0 removes them;
* ``gripper_conditioning``, ``arm_conditioning`` -- the signals the next DiT stage trains on;
* ``window``, ``denoising_steps`` -- the inference defaults NeuralDROID uses.

The edits are applied in that order and recorded in the recipe's ``edits`` list; ``float16`` stores the weights at
half precision (what the package ships; loading casts them back to float32).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

log = logging.getLogger(__name__)


@dataclass
class EditConfig:
    """Options of ``neuralsim model edit``."""

    checkpoint: str = field(metadata={"positional": True})
    """The world-model checkpoint to edit (a directory or hub id)."""
    out: str = field(metadata={"metavar": "DIR"})
    """Where the edited checkpoint goes (a new directory, or the source itself)."""
    fresh_dit: bool = False
    """Replace the DiT by a freshly initialised one of the same shape (the autoencoder and latent statistics kept)."""
    patch_size: int | None = field(default=None, metadata={"metavar": "P"})
    """The fresh DiT's latent patch side (only with --fresh-dit): a view is (latent size / P)^2 tokens."""
    decoder_from: str | None = field(default=None, metadata={"metavar": "DIR"})
    """Take the decoder and reference head of this checkpoint (it must share the encoder bit for bit)."""
    decoder_layers_per_block: int | None = None
    """Rebuild the decoder with this many layers per block (0: one ResNet per level); kept ResNets keep their
    weights, added ones start as the identity."""
    reference_head: int | None = field(default=None, metadata={"metavar": "WIDTH"})
    """Replace the reference head by a fresh one this many channels wide (0: no head); it changes no view until
    trained."""
    grounding: Literal["none", "projected"] | None = None
    """Add (``projected``, starting as a no-op) or remove (``none``) the DiT's geometry-grounded conditioning."""
    condition_features: Literal["raw", "normalised", "fourier"] | None = None
    """What the DiT's condition MLP reads; its first layer is drawn fresh, its statistics fitted by the next DiT
    stage."""
    objects: int | None = field(default=None, metadata={"metavar": "K"})
    """Give the DiT K object tokens per frame (fresh, not changing the image predictions until trained; 0: none)."""
    gripper_conditioning: Literal["measured", "command"] | None = None
    """The gripper signal the DiT trains on from now on."""
    arm_conditioning: Literal["measured", "replay"] | None = None
    """The arm pose the DiT trains on from now on."""
    window: int | None = None
    """The default inference window in frames."""
    denoising_steps: int | None = None
    """The default denoising passes per generated frame (1 up to the trained levels)."""
    float16: bool = False
    """Store the weights at half precision (the shipped model's format)."""
    seed: int = 0
    """Seed of a fresh DiT's or reference head's weights."""


def edit_model(cfg: EditConfig):
    """Apply ``cfg``'s edits to its checkpoint and write the result to ``cfg.out``; returns the edited model."""
    import torch

    from ..envs.neural_droid import resolve_checkpoint
    from .model import WorldModel

    if cfg.patch_size is not None and not cfg.fresh_dit:
        raise ValueError(f"patch_size={cfg.patch_size} changes every token, so it needs fresh_dit (--fresh-dit): a "
                         "trained DiT's weights do not carry over to another token size")
    model = WorldModel.from_pretrained(resolve_checkpoint(cfg.checkpoint))
    done: dict = {}
    if cfg.fresh_dit:
        model = _with_fresh_dit(model, cfg.seed, patch_size=cfg.patch_size)
        done["fresh_dit"] = cfg.seed
        if cfg.patch_size is not None:
            done["patch_size"] = cfg.patch_size
    if cfg.decoder_from:
        model.take_decoder_from(WorldModel.from_pretrained(cfg.decoder_from))
        done["decoder_from"] = str(cfg.decoder_from)
    depth = cfg.decoder_layers_per_block
    if depth is not None and depth != model.config.autoencoder.decoder_depth:
        model = model.with_decoder_layers(depth)
        done["decoder_layers_per_block"] = depth
    if cfg.reference_head is not None and cfg.reference_head != model.config.autoencoder.reference_head_channels:
        torch.manual_seed(cfg.seed)
        model.autoencoder.set_reference_head(cfg.reference_head)
        done["reference_head"] = cfg.reference_head
    if cfg.grounding is not None and cfg.grounding != model.config.dit.grounding:
        torch.manual_seed(cfg.seed)
        model = with_dit(model, grounding=cfg.grounding, geometry=None)
        done["grounding"] = cfg.grounding
    if cfg.condition_features is not None and cfg.condition_features != model.config.dit.condition_features:
        torch.manual_seed(cfg.seed)
        model = with_dit(model, condition_features=cfg.condition_features)
        recipe = model.config.recipe
        model.config.recipe = {k: v for k, v in recipe.items() if k != "condition_stats_fitted"}
        done["condition_features"] = cfg.condition_features
    if cfg.objects is not None and cfg.objects != model.config.dit.num_objects:
        torch.manual_seed(cfg.seed)
        model = with_dit(model, num_objects=cfg.objects)
        recipe = model.config.recipe
        model.config.recipe = {k: v for k, v in recipe.items() if k != "object_stats_fitted"}  # the next stage fits
        done["objects"] = cfg.objects
    changes = {name: getattr(cfg, name) for name in ("gripper_conditioning", "arm_conditioning", "window",
                                                     "denoising_steps")
               if getattr(cfg, name) is not None and getattr(cfg, name) != getattr(model.config, name)}
    if changes:
        model.config = dataclasses.replace(model.config, **changes)  # re-validated by the config
        done.update(changes)
    if done:
        recipe = model.config.recipe
        model.config.recipe = {**recipe, "edits": [*recipe.get("edits", []), done]}
        log.info("edited: %s", ", ".join(f"{k} {v}" for k, v in done.items()))
    Path(cfg.out).mkdir(parents=True, exist_ok=True)
    model.save_pretrained(cfg.out, dtype=torch.float16 if cfg.float16 else None)
    WorldModel.from_pretrained(cfg.out)  # refuses a file that did not come out whole
    return model


def with_dit(model, **fields):
    """A copy of ``model`` with DiT config ``fields`` set (``geometry=None``: the cameras of its scene), every weight
    of the same name and shape kept; added parts (a grounding embedding, object tokens) are drawn fresh, each with
    its output at zero."""
    from .config import WorldModelConfig
    from .model import WorldModel

    d = model.config.to_dict()
    d["dit"] = {**d["dit"], **fields}
    new = WorldModel(WorldModelConfig.from_dict(d)).to(model.device)
    own = new.state_dict()
    for name, t in model.state_dict().items():
        if name in own and own[name].shape == t.shape:
            own[name].copy_(t)
    return new.eval()


def _with_fresh_dit(model, seed: int, patch_size: int | None = None):
    """A copy of ``model`` whose DiT is drawn afresh (a whole new model is built after seeding torch with ``seed``,
    so the DiT's weights are those a fresh model of this config gets; ``patch_size``, when given, its token size)
    and whose other weights and buffers are ``model``'s; its recipe keeps the autoencoder's and decoder's history and
    drops the DiT's."""
    import torch

    from .config import WorldModelConfig
    from .model import WorldModel

    d = model.config.to_dict()
    if patch_size is not None:
        d["dit"] = {**d["dit"], "patch_size": patch_size}  # DiTConfig checks that it divides the latent
    cfg = WorldModelConfig.from_dict(d)
    recipe = {k: v for k, v in cfg.recipe.items() if not k.startswith("dit_")}
    cfg.recipe = {**recipe, "stages": [st for st in recipe.get("stages", []) if st.get("stage") != "dit"]}
    torch.manual_seed(seed)
    fresh = WorldModel(cfg).to(model.device)
    own = fresh.state_dict()
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if not name.startswith("dit."):
                own[name].copy_(t)
    return fresh.eval()
