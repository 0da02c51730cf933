"""The world model's own open-loop latents over a dataset: what its decoder will really be asked to decode.

A decoder trained only on encoded frames learns to decode latents the encoder writes.  In a rollout it
decodes latents the DiT writes, which drift off that set a little more with every frame.  The decoder
stage's ``--rollout-share P`` (:mod:`neuralsim.world_model.train`) therefore also shows it the DiT's
latents, paired with the true frame of the same time step, so it learns to decode them into the frame
the simulator drew.  The DiT, the encoder and the latent space stay as they are.

:class:`RolloutLatents` makes those latents once per (model, dataset): every episode is started from its
encoded first frame and rolled out open loop on its recorded conditioning (end-effector pose and
gripper, as a :class:`~neuralsim.world_model.latents.LatentStore` holds it), with the model's own KV
window and noise levels.  Each episode draws its noise from its own generator (seeded by the run's seed
and the episode index), so the result does not depend on how episodes are batched.  Episodes are
written to ``<dataset>/.rollout_cache/<fingerprint>/episode_XXXXXX.npz`` as they finish, so an
interrupted run resumes where it stopped, and a decoder run started again reuses them: the fingerprint
covers everything that shapes a rollout (the DiT, the encoder, the latent statistics, the window, the
noise levels, the seed) and not the decoder, which does not.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import numpy as np
import torch

from .latents import LatentStore, WindowedLatents, hash_weights, read_npz, write_npz
from .model import DECODER_PREFIXES

log = logging.getLogger(__name__)

ROLLOUT_CACHE_DIR = ".rollout_cache"


def rollout_fingerprint(model, seed: int) -> str:
    """16 hex digits identifying the latents :class:`RolloutLatents` would generate with ``model`` and ``seed``."""
    cfg = model.config
    h = hashlib.sha256(json.dumps({"seed": int(seed), "window": cfg.window, "num_sink": cfg.num_sink,
                                   "schedule": list(cfg.schedule),
                                   "image_size": cfg.autoencoder.image_size}, sort_keys=True).encode())
    hash_weights(h, model.state_dict(), lambda name: not name.startswith(DECODER_PREFIXES))  # decoding only: no effect
    return h.hexdigest()[:16]


def _check_shape(z: np.ndarray, want: tuple) -> None:
    if z.shape != want:
        raise ValueError(f"latents {z.shape}, expected {want}")


def episode_generator(seed: int, episode_index: int, device):
    """The noise generator of one episode's rollout."""
    return torch.Generator(device=device).manual_seed((int(seed) * 1_000_003 + int(episode_index)) % (2 ** 63))


class RolloutLatents(WindowedLatents):
    """Open-loop latents of ``model`` for every episode of ``store``'s dataset, indexed like ``store``.

    Row ``offsets[i] + t`` holds the raw (unnormalised, as the encoder writes them) latents the model generated
    for time step ``t`` of record ``i``; ``t = 0`` is the encoded first frame itself (the given context).
    ``cond`` is ``store``'s.  ``get`` serves dataset windows exactly as :meth:`LatentStore.get` does.

    Args:
        model: the :class:`~neuralsim.world_model.model.WorldModel` whose DiT rolls out (eval mode, any device).
        store: the dataset's :class:`LatentStore` (same autoencoder): first frames and conditioning.
        seed: noise seed; episode ``e`` uses :func:`episode_generator` ``(seed, e)``.
        batch_size: episodes rolled out at once (similar lengths together).
        progress: show a progress bar (episodes).
    """

    def __init__(self, model, store: LatentStore, seed: int = 0, batch_size: int = 32, progress: bool = True):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.dataset, self.lengths, self.offsets = store.dataset, store.lengths, store.offsets
        self.cond, self.device = store.cond, store.device
        self.seed = int(seed)
        self.fingerprint = rollout_fingerprint(model, seed)
        self.dir = Path(store.dataset.root) / ROLLOUT_CACHE_DIR / self.fingerprint
        latents = store.latents.clone()
        records = store.dataset.records
        todo = []
        for pos, rec in enumerate(records):
            want = (int(self.lengths[pos]), *latents.shape[1:])
            found = read_npz(self._path(rec), "rollout", ("latents",), lambda z, want=want: _check_shape(z, want))
            if found is None:
                todo.append(pos)
                continue
            start = self.offsets[pos]
            latents[start:start + self.lengths[pos]] = torch.from_numpy(found[0]).to(self.device)
        if progress and todo:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(todo), desc="rolling out", unit="ep")
        else:
            bar = None
        writable = True
        todo.sort(key=lambda p: int(self.lengths[p]))
        modes = [(m, m.training) for m in model.modules()]  # a trainer may hold some parts in train mode
        model.eval()
        try:
            for i in range(0, len(todo), batch_size):
                batch = todo[i:i + batch_size]
                z = self._roll_out(model, store, batch)
                for pos, zp in zip(batch, z):
                    latents[self.offsets[pos]:self.offsets[pos] + len(zp)] = zp.to(self.device)
                    if writable:
                        writable = write_npz(self._path(records[pos]), "rollout", latents=zp.cpu().numpy())
                if bar is not None:
                    bar.update(len(batch))
        finally:
            for m, mode in modes:
                m.train(mode)
            if bar is not None:
                bar.close()
        self.latents = latents
        log.info("rollout latents %s: %d episodes (%d rolled out now)", self.dir, len(records), len(todo))

    def _path(self, rec: dict) -> Path:
        return self.dir / f"episode_{int(rec['episode_index']):06d}.npz"

    def _roll_out(self, model, store: LatentStore, batch: list[int]) -> list:
        """Roll out records ``batch`` together; returns each one's raw fp16 latents (T_i, V, C, h, w) on the CPU."""
        dev = model.device
        lengths = np.array([int(self.lengths[p]) for p in batch])
        first = self.offsets[batch]
        gens = [episode_generator(self.seed, store.dataset.records[p]["episode_index"], dev) for p in batch]
        state = model.new_state(len(batch), device=dev)
        with torch.inference_mode():
            z0 = store.latents[torch.as_tensor(first, device=store.latents.device)].to(dev).float()
            model.reset_latents(state, None, model.normalise(z0), store.cond[torch.as_tensor(first)].to(dev))
            out = [z0.half().cpu()]
            shape = tuple(z0.shape[1:])
            for t in range(1, int(lengths.max())):
                rows = torch.as_tensor(first + np.minimum(t, lengths - 1))  # an ended episode repeats its last pose
                noise = torch.stack([torch.randn(shape, generator=g, device=dev) for g in gens])
                x = model.generate(state, noise, store.cond[rows.to(store.cond.device)].to(dev))
                out.append(model.denormalise(x).half().cpu())
        z = torch.stack(out, dim=1)  # (b, T_max, V, C, h, w)
        return [z[j, :lengths[j]] for j in range(len(batch))]
