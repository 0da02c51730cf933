"""Where a training step's batches come from: datasets, their clips, latents and the decoder stage's pairs.

* :func:`open_dataset` -- a ``--data`` spec (a dataset root, several joined by commas, or ``synthetic[:N[:K]]``);
* :func:`fetch_clips` -- frames and conditioning of dataset clips, the conditioning as the model was trained on;
* :func:`latent_source` -- the frozen autoencoder's latents of every clip: a
  :class:`~neuralsim.world_model.latents.LatentStore` per dataset root (encoded once, kept on disk), else a
  :class:`LatentMemo` (encoded as drawn, kept in memory);
* :func:`rollout_source` -- the model's own open-loop latents (:mod:`neuralsim.world_model.rollouts`);
* :func:`decoder_batch`, :func:`decoder_references` -- the decoder stage's (latent, frame) pairs and the reference
  head's inputs.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from .latents import ObjectStateMissing  # noqa: F401  (raised here and importable from here)

log = logging.getLogger(__name__)

#: Clips a :class:`LatentMemo` keeps (fp16 latents; synthetic data, which has no episodes to store).
MEMO_CLIPS = 20000


def open_dataset(spec: str, clip_length: int, image_size: int, seed: int = 0):
    """``synthetic[:N[:K]]`` -> :class:`SyntheticClipDataset` (N clips, K objects with recorded poses); ``a,b,...``
    -> a ``ConcatClipDataset`` of the roots; anything else -> ``ClipDataset(spec, ...)``."""
    if spec == "synthetic" or spec.startswith("synthetic:"):
        from .synthetic import SyntheticClipDataset

        parts = spec.split(":")[1:]
        n, k = (int(parts[0]) if parts else 64), (int(parts[1]) if len(parts) > 1 else 0)
        return SyntheticClipDataset(num_clips=n, clip_length=clip_length, image_size=image_size, seed=seed,
                                    num_objects=k)
    if "," in spec:
        from neuralsim.data.reader import ConcatClipDataset

        roots = [r.strip() for r in spec.split(",")]
        if not all(roots) or any(r.startswith("synthetic") for r in roots):
            raise ValueError(f"--data {spec!r}: give dataset roots separated by commas, none empty or synthetic")
        return ConcatClipDataset([open_dataset(r, clip_length, image_size, seed) for r in roots])
    if not Path(spec).exists():
        raise FileNotFoundError(f"--data {spec!r} does not exist (give a dataset root or 'synthetic[:N]')")
    try:
        from neuralsim.data.reader import ClipDataset
    except ImportError as e:
        raise RuntimeError(f"cannot import neuralsim.data.reader.ClipDataset to read {spec!r}: {e}") from e
    return ClipDataset(spec, clip_length=clip_length, image_size=image_size)


def data_scene(spec: str) -> str | None:
    """The SimDROID scene of a ``--data`` spec's datasets (their ``meta/info.json`` ``generation.scene``;
    ``"classic"`` where none is recorded), or None for synthetic data; datasets of different scenes are refused."""
    if spec == "synthetic" or spec.startswith("synthetic:"):
        return None
    from neuralsim.data.reader import dataset_scene

    scenes = {root: dataset_scene(root) for root in (r.strip() for r in spec.split(","))}
    if len(set(scenes.values())) > 1:
        raise ValueError(f"--data {spec!r} mixes SimDROID scenes ({scenes}); a model is trained on one scene")
    return next(iter(scenes.values()))


def fetch_clips(dataset, indices: list[int], image_size: int, gripper: str = "measured", arm: str = "measured"):
    """Stack dataset items: uint8 frames (B, T, V, H, W, 3) and cond (B, T, 7).

    ``gripper="command"``: the gripper entry is the command through the adapter's lag, started from the clip's
    first measured gripper; ``arm="replay"``: the pose entries are the adapter's replay of the clip's actions from
    its first measured joints (:func:`~neuralsim.world_model.latents.env_cond`).  A clip starts its replay afresh,
    where the env's (and :class:`~neuralsim.world_model.latents.LatentStore`'s) runs from the episode's start."""
    import numpy as np
    import torch

    from .latents import env_cond

    frames, conds = [], []
    for i in indices:
        item = dataset[int(i)]
        f = torch.as_tensor(item["frames"])
        if f.dtype != torch.uint8 or f.ndim != 5 or f.shape[-3:] != (image_size, image_size, 3):
            raise ValueError(f"dataset item {i}: frames must be uint8 (T, V, {image_size}, {image_size}, 3) for "
                             f"this model, got {f.dtype} {tuple(f.shape)}")
        cart = torch.as_tensor(item["cartesian_position"], dtype=torch.float32)
        grip = torch.as_tensor(item["gripper_position"], dtype=torch.float32).reshape(len(cart), 1)
        frames.append(f)
        cond = torch.cat([cart, grip], dim=-1)
        if gripper != "measured" or arm != "measured":
            cond = torch.from_numpy(env_cond(cond.numpy(), np.asarray(item["joint_position"]),
                                             np.asarray(item["actions"]),
                                             gripper, arm))
        conds.append(cond)
    return torch.stack(frames), torch.stack(conds)


def fetch_objects(dataset, indices: list[int], num_objects: int):
    """The recorded object poses (B, T, K, 7) of dataset items ``indices`` (their ``object_pose``); raises
    :class:`ObjectStateMissing` when the items have none or another K."""
    import torch

    out = []
    for i in indices:
        item = dataset[int(i)]
        if "object_pose" not in item:
            raise ObjectStateMissing(f"{type(dataset).__name__} item {i} records no object poses, and this model "
                                     f"carries {num_objects} objects (dit.num_objects); give data that records them "
                                     "(SimDROID data with ground_truth.object_pose, or synthetic:N:K) or a model "
                                     "without object state")
        pose = torch.as_tensor(item["object_pose"], dtype=torch.float32)
        if pose.shape[-2] != num_objects:
            raise ObjectStateMissing(f"item {i} records {pose.shape[-2]} objects; this model carries {num_objects}")
        out.append(pose)
    return torch.stack(out)


class LatentMemo:
    """Encode clips with the frozen autoencoder once; keep raw latents (fp16) for ``capacity`` clips."""

    def __init__(self, model, dataset, image_size: int, capacity: int):
        self.model, self.dataset, self.image_size, self.capacity = model, dataset, image_size, capacity
        self.store: dict[int, tuple[Any, Any]] = {}

    def get(self, indices: list[int], device):
        import torch

        batch = {i: self.store[i] for i in indices if i in self.store}
        todo = sorted({i for i in indices if i not in batch})
        if todo:
            frames, cond = fetch_clips(self.dataset, todo, self.image_size,
                                       getattr(self.model.config, "gripper_conditioning", "measured"),
                                       getattr(self.model.config, "arm_conditioning", "measured"))
            with torch.no_grad():
                z = self.model.autoencoder.encode(frames.to(device)).to("cpu").half()  # (b, T, V, C, h, w)
            for j, i in enumerate(todo):
                batch[i] = (z[j], cond[j])
                if len(self.store) < self.capacity:
                    self.store[i] = batch[i]
        zs = [batch[i][0].float() for i in indices]
        cs = [batch[i][1] for i in indices]
        return torch.stack(zs).to(device), torch.stack(cs).to(device)

    def get_objects(self, indices: list[int], device):
        """Raw object poses (B, T, K, 7) of clips ``indices`` (read from the items; cheap beside encoding)."""
        return fetch_objects(self.dataset, indices, self.model.config.dit.num_objects).to(device)


def decoder_batch(memo, dataset, idx: list[int], image_size: int, frames_per_clip: int, gen, device,
                  rollouts=None, rollout_share: float = 0.0):
    """Training pairs of the decoder stage: stored latents and the frames they encode.

    Picks ``frames_per_clip`` random time steps of each clip ``idx``; returns latents (N, V, C, h, w)
    (the store's fp16, as float) and uint8 frames (N, V, H, W, 3), N = len(idx) * frames_per_clip.
    With ``rollouts`` (:class:`~neuralsim.world_model.rollouts.RolloutLatents`, indexed like ``memo``), each
    pair takes the model's generated latent of its time step instead with probability ``rollout_share``
    (drawn from ``gen`` after the time steps, so a run without rollouts draws exactly what it always did).
    """
    import torch

    z, _ = memo.get(idx, device)  # (B, T, V, C, h, w)
    frames, _ = fetch_clips(dataset, idx, image_size)  # (B, T, V, H, W, 3)
    b = len(idx)
    fi = torch.randint(frames.shape[1], (b, frames_per_clip), generator=gen)
    rows = torch.arange(b)[:, None]
    picked = z[rows, fi.to(z.device)]
    if rollouts is not None:
        generated = rollouts.get(idx, device)[0][rows, fi.to(z.device)]
        use = (torch.rand(b, frames_per_clip, generator=gen) < rollout_share).to(z.device)
        picked = torch.where(use[..., None, None, None, None], generated, picked)
    return picked.flatten(0, 1).float(), frames[rows, fi].flatten(0, 1).to(device)


def decoder_references(model, dataset, idx: list[int], frames_per_clip: int, image_size: int, device):
    """The reference head's inputs for :func:`decoder_batch`'s pairs: the first frame of each clip's episode
    (uint8 (N, V, H, W, 3), N = len(idx) * frames_per_clip, clip-major like the pairs) and its raw latents,
    encoded now by the frozen encoder as the env's reset encodes them."""
    import numpy as np
    import torch

    first = []
    for i in idx:
        part, local = dataset.locate(int(i)) if hasattr(dataset, "locate") else (None, int(i))
        ds = dataset.parts[part] if part is not None else dataset
        if not hasattr(ds, "windows"):
            raise ValueError("the reference head trains on episodes (a dataset root), not on synthetic clips")
        pos, _ = ds.windows[local]
        frame0 = np.asarray(ds.episode(pos).frames[0])
        if frame0.shape[-3:] != (image_size, image_size, 3):
            raise ValueError(f"episode frames are {frame0.shape[-3:]}, the model wants ({image_size}, {image_size}, 3)")
        first.append(torch.from_numpy(np.array(frame0)))
    views = torch.stack(first).to(device)  # (B, V, H, W, 3)
    with torch.no_grad():
        latents = model.autoencoder.encode(views)  # (B, V, C, h, w) raw
    rep = lambda t: t.repeat_interleave(frames_per_clip, dim=0)  # noqa: E731  (N, ...), clip-major
    return rep(views), rep(latents)


def latent_source(model, dataset, device, progress: bool, objects: bool = False):
    """The latents of ``dataset``'s clips under ``model``'s frozen encoder, indexed like the dataset, with the
    conditioning the model is trained on: one :class:`~neuralsim.world_model.latents.LatentStore` per dataset
    root (a :class:`~neuralsim.world_model.latents.ConcatLatents` over several), else a :class:`LatentMemo`.  With
    ``objects`` (the DiT stage of a model with object state) each also serves the clips' recorded object poses
    (``get_objects``)."""
    from .latents import ConcatLatents, LatentStore

    cfg = model.config

    def store(part):
        return LatentStore(model.autoencoder, part, device, progress=progress, gripper=cfg.gripper_conditioning,
                           arm=cfg.arm_conditioning, num_objects=cfg.dit.num_objects if objects else 0)

    if hasattr(dataset, "parts"):
        return ConcatLatents(dataset, [store(part) for part in dataset.parts])
    if hasattr(dataset, "windows") and hasattr(dataset, "records"):
        return store(dataset)
    return LatentMemo(model, dataset, cfg.autoencoder.image_size, MEMO_CLIPS)


def rollout_source(model, memo, dataset, seed: int, progress: bool):
    """The model's open-loop latents over ``dataset`` (noise seed ``seed``), indexed like ``memo``, one set per
    dataset root (:class:`~neuralsim.world_model.rollouts.RolloutLatents`)."""
    from .info import count_key
    from .latents import ConcatLatents, LatentStore
    from .rollouts import RolloutLatents

    stores = memo.stores if isinstance(memo, ConcatLatents) else [memo]
    if not all(isinstance(st, LatentStore) for st in stores):
        raise ValueError("rollout_share needs episodes to roll out: a dataset root, not synthetic clips")
    if not any(model.config.recipe.get(count_key("dit", o)) for o in ("step_forcing", "diffusion_forcing")):
        log.warning("this model's recipe records no DiT training: its rollouts are noise, and a decoder trained on "
                    "them learns little")
    parts = [RolloutLatents(model, st, seed=seed, progress=progress) for st in stores]
    return ConcatLatents(dataset, parts) if isinstance(memo, ConcatLatents) else parts[0]
