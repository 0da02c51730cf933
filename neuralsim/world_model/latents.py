"""Frozen-autoencoder latents of a whole dataset, encoded once and kept on disk.

The DiT and decoder stages train on autoencoder latents, never on pixels.  Encoding a batch of clips costs
about as much as a DiT step, and a dataset's overlapping clips are too many for an in-memory memo to hit often.
:class:`LatentStore` instead encodes every *episode* once into
``<dataset>/.latent_cache/<autoencoder fingerprint>/episode_XXXXXX.npz`` (fp16 latents + float32
conditioning), loads them all into one tensor on the training device (0.4 GB for 70 000 time steps of
the 16x16x4 latent x 3 views) and serves any window of the :class:`~neuralsim.data.reader.ClipDataset` by one
gather there: on a GPU a training step then moves no latents across the bus.

The fingerprint hashes the weights that produce latents (the encoder and its quantisation conv) and
the frame size, so a retrained encoder never reads stale latents, while a decoder-only stage (which
leaves the latents as they are) keeps using them.  A model with object state also gets each episode's recorded
object poses, read from its parquet file (not cached: a cache written without them stays valid).  A dataset directory
that cannot be written still works (latents stay in memory).
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

import numpy as np

from .config import ARM_CONDITIONINGS, GRIPPER_CONDITIONINGS

log = logging.getLogger(__name__)

LATENT_CACHE_DIR = ".latent_cache"


#: State-dict prefixes of the autoencoder's weights that ``encode`` reads.
ENCODER_PREFIXES = ("vae.encoder.", "vae.quant_conv.")


class ObjectStateMissing(ValueError):
    """A model with object state asked for the object poses of data that does not record them (or records another
    number of objects)."""


def hash_weights(h, state_dict: dict, keep) -> None:
    """Feed every tensor of ``state_dict`` whose name passes ``keep(name)``, name and bytes, in name order, into
    ``h``."""
    for name, t in sorted(state_dict.items()):
        if keep(name):
            h.update(name.encode())
            h.update(t.detach().to("cpu").contiguous().numpy().tobytes())


def autoencoder_fingerprint(autoencoder, image_size: int) -> str:
    """16 hex digits identifying the autoencoder's encoding weights (and the frame size it is fed)."""
    h = hashlib.sha256(f"encoder;image_size={image_size};".encode())
    hash_weights(h, autoencoder.state_dict(), lambda name: name.startswith(ENCODER_PREFIXES))
    return h.hexdigest()[:16]


def read_npz(path: Path, what: str, keys: tuple[str, ...], check=None) -> tuple[np.ndarray, ...] | None:
    """Arrays ``keys`` of ``path``; None, with a warning naming the ``what`` cache, if the file is missing, unreadable
    or fails ``check(*arrays)`` (which raises ValueError), so that the caller computes them again."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = tuple(f[k] for k in keys)
        if check is not None:
            check(*arrays)
        return arrays
    except (OSError, ValueError, KeyError) as e:
        log.warning("%s cache %s unreadable (%s); computing it again", what, path, e)
        return None


def _check_latents_cond(z: np.ndarray, cond: np.ndarray) -> None:
    if len(cond) != len(z) or z.ndim != 5:
        raise ValueError(f"latents {z.shape} and cond {cond.shape} disagree")


def write_npz(path: Path, what: str, **arrays: np.ndarray) -> bool:
    """Write ``arrays`` to ``path`` atomically; False (and a warning naming ``what`` cache) if it cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
        np.savez(tmp, **arrays)
        os.replace(tmp, path)
        return True
    except OSError as e:  # read-only dataset: keep the arrays in memory only
        log.warning("cannot write the %s cache under %s (%s); it stays in memory", what, path.parent, e)
        return False


def command_gripper_cond(cond: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """``cond`` (T, 7) of one episode (or clip) with its gripper entry replaced by the gripper command through the
    action adapter's lag, started from the measured gripper of its first frame (what NeuralDROID feeds the world
    model; ``WorldModelConfig.gripper_conditioning="command"``).  ``actions`` (T, 8): the action after each frame."""
    from neuralsim.envs.adapter import gripper_trajectory

    cond = np.array(cond, dtype=np.float32, copy=True)
    if len(actions) < len(cond) - 1:
        raise ValueError(f"{len(cond)} conditioning rows need {len(cond) - 1} actions, got {len(actions)}")
    cond[:, 6] = gripper_trajectory(cond[0, 6], np.asarray(actions)[:len(cond) - 1, 7])
    return cond


def replay_arm_cond(cond: np.ndarray, joint_position0: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """``cond`` (T, 7) of one episode (or clip) with its six pose entries replaced by the forward kinematics of the
    action adapter's replay of ``actions`` (T, 8; the action after each frame) from ``joint_position0`` (7,) at rest:
    the pose NeuralDROID feeds the world model (``WorldModelConfig.arm_conditioning="replay"``)."""
    from neuralsim import kinematics as K
    from neuralsim.envs.adapter import arm_trajectory

    cond = np.array(cond, dtype=np.float32, copy=True)
    if len(actions) < len(cond) - 1:
        raise ValueError(f"{len(cond)} conditioning rows need {len(cond) - 1} actions, got {len(actions)}")
    # clipped into the action space first, as the env does (a real DROID log may exceed it)
    q = arm_trajectory(joint_position0, np.clip(np.asarray(actions)[:len(cond) - 1, :7], -1.0, 1.0))
    cond[:, :6] = K.forward_kinematics(q)
    return cond


def check_conditionings(gripper: str, arm: str) -> None:
    """ValueError naming the argument unless ``gripper`` and ``arm`` are known conditioning signals."""
    if gripper not in GRIPPER_CONDITIONINGS:
        raise ValueError(f"gripper must be one of {GRIPPER_CONDITIONINGS}, got {gripper!r}")
    if arm not in ARM_CONDITIONINGS:
        raise ValueError(f"arm must be one of {ARM_CONDITIONINGS}, got {arm!r}")


def env_cond(cond: np.ndarray, joint_position: np.ndarray, actions: np.ndarray, gripper: str = "measured",
             arm: str = "measured") -> np.ndarray:
    """The measured ``cond`` (T, 7) of an episode or clip turned into the signals a model was trained on: the
    gripper command (``gripper="command"``, :func:`command_gripper_cond`) and the adapter's replay of the arm
    (``arm="replay"``, :func:`replay_arm_cond` from ``joint_position[0]``); unchanged for ``"measured"``."""
    check_conditionings(gripper, arm)
    if gripper == "command":
        cond = command_gripper_cond(cond, actions)
    if arm == "replay":
        cond = replay_arm_cond(cond, np.asarray(joint_position)[0], actions)
    return cond


class WindowedLatents:
    """Per-episode latents concatenated into one tensor, served by dataset window.

    Subclasses set ``dataset`` (a ``ClipDataset``), ``lengths`` and ``offsets`` (each record's frame count
    and first row), ``latents`` (fp16 (sum T, V, C, h, w)), ``cond`` (float32 (sum T, 7)) and ``device``.
    """

    def _rows(self, indices: list[int]):
        """The concatenated rows (B * T,) of dataset windows ``indices``, on the store's device."""
        import torch

        T = self.dataset.clip_length
        first = np.empty(len(indices), dtype=np.int64)
        for j, i in enumerate(indices):
            pos, start = self.dataset.windows[int(i)]
            if start + T > self.lengths[pos]:
                raise ValueError(f"window {i} (episode position {pos}, start {start}) has "
                                 f"{max(0, self.lengths[pos] - start)} latent frames, expected {T}")
            first[j] = self.offsets[pos] + start
        return (torch.from_numpy(first)[:, None] + torch.arange(T)).flatten().to(self.device)

    def get(self, indices: list[int], device):
        """Latents (B, T, V, C, h, w) float32 and conditioning (B, T, 7) of dataset windows ``indices``."""
        T = self.dataset.clip_length
        rows = self._rows(indices)
        z = self.latents.index_select(0, rows).float()
        c = self.cond.index_select(0, rows)
        return (z.view(len(indices), T, *z.shape[1:]).to(device),
                c.view(len(indices), T, -1).to(device))

    def get_objects(self, indices: list[int], device):
        """Recorded object poses (B, T, K, 7) of dataset windows ``indices`` (a store built with ``num_objects``)."""
        if getattr(self, "objects", None) is None:
            raise ValueError("this latent store holds no object poses (built without num_objects)")
        o = self.objects.index_select(0, self._rows(indices))
        return o.view(len(indices), self.dataset.clip_length, *o.shape[1:]).to(device)


class LatentStore(WindowedLatents):
    """Latents and conditioning of every episode of a ``ClipDataset``, indexed like the dataset.

    Args:
        autoencoder: the frozen :class:`~neuralsim.world_model.autoencoder.ViewAutoencoder` (its
            ``encode`` takes uint8 (..., V, H, W, 3) and returns (..., V, C, h, w)).
        dataset: a :class:`neuralsim.data.reader.ClipDataset` (it needs ``root``, ``records``,
            ``windows``, ``clip_length``, ``image_size`` and ``layout``).
        device: where encoding runs and where the latents are kept (a GPU holds them in its memory).
        chunk: time steps encoded per forward pass.
        progress: show a progress bar while encoding.
        gripper, arm: the conditioning signals the DiT is trained on (:func:`env_cond`); the disk cache always
            keeps the measured ones.
        num_objects: K > 0: also hold every frame's K recorded object poses (``objects``, float32 (sum T, K, 7)),
            from the episodes' ``ground_truth.object_pose``; a dataset without them is an
            :class:`ObjectStateMissing` naming it.
    """

    def __init__(self, autoencoder, dataset, device="cpu", chunk: int = 64, progress: bool = True,
                 gripper: str = "measured", arm: str = "measured", num_objects: int = 0):
        import torch

        from neuralsim.data.reader import load_episode, read_joints_and_actions

        check_conditionings(gripper, arm)

        self.dataset = dataset
        self.fingerprint = autoencoder_fingerprint(autoencoder, dataset.image_size)
        self.dir = Path(dataset.root) / LATENT_CACHE_DIR / self.fingerprint
        latents: list[np.ndarray] = []  # per record: fp16 (T, V, C, h, w)
        conds: list[np.ndarray] = []  # per record: float32 (T, 7)
        poses: list[np.ndarray] = []  # per record: float32 (T, K, 7), with num_objects
        writable = True
        if progress:
            from tqdm.auto import tqdm
        else:
            def tqdm(it, **_):
                return it
        encoded = 0
        for rec in tqdm(dataset.records, desc="encoding latents", unit="ep"):
            path = self.dir / f"episode_{int(rec['episode_index']):06d}.npz"
            z, cond = read_npz(path, "latent", ("latents", "cond"), _check_latents_cond) or (None, None)
            if z is None:
                ep = load_episode(dataset.root, rec, dataset.image_size, dataset.layout)
                frames = torch.from_numpy(np.ascontiguousarray(ep.frames))
                with torch.no_grad():
                    z = torch.cat([autoencoder.encode(frames[i:i + chunk].to(device)).to("cpu")
                                   for i in range(0, len(frames), chunk)]).half().numpy()
                cond = np.concatenate([ep.cartesian_position, ep.gripper_position.reshape(len(z), 1)],
                                      axis=-1).astype(np.float32)
                encoded += 1
                if writable:
                    writable = write_npz(path, "latent", latents=z, cond=cond)
            if gripper != "measured" or arm != "measured":  # the cache keeps the measured cond; these are cheap to redo
                cond = env_cond(cond, *read_joints_and_actions(dataset.root, rec, dataset.layout), gripper, arm)
            latents.append(z)
            conds.append(cond)
            if num_objects:
                poses.append(_recorded_objects(dataset.root, rec, num_objects, len(z)))
        if not latents:
            raise ValueError(f"dataset {dataset.root} has no episodes to encode")
        #: first row of each record in the concatenated tensors, and each record's length
        self.lengths = np.array([len(z) for z in latents], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)[:-1]])
        self.device = torch.device(device)
        z_all = np.concatenate(latents)
        del latents  # the concatenation is the only copy kept
        self.latents = torch.from_numpy(z_all).to(self.device)  # fp16 (sum T, V, C, h, w)
        self.cond = torch.from_numpy(np.concatenate(conds)).to(self.device)  # float32 (sum T, 7)
        self.objects = torch.from_numpy(np.concatenate(poses)).to(self.device) if num_objects else None
        log.info("latent store %s: %d episodes (%d encoded now), %.0f MB on %s", self.dir, len(self.lengths),
                 encoded, z_all.nbytes / 1e6, self.device)


def _recorded_objects(root, record: dict, num_objects: int, length: int) -> np.ndarray:
    """Episode ``record``'s recorded object poses (length, K, 7); ObjectStateMissing naming the dataset if it has none
    or another number of objects."""
    from neuralsim.data.reader import read_object_state

    state = read_object_state(root, record)
    where = f"dataset {str(root)!r} (episode {record['episode_index']})"
    if state is None:
        raise ObjectStateMissing(f"{where} records no object poses (ground_truth.object_pose), and this model carries "
                                 f"{num_objects} objects (dit.num_objects); regenerate the data with `neuralsim data "
                                 "generate` or train a model without object state")
    if state.pose.shape[1] != num_objects or len(state.pose) < length:
        raise ObjectStateMissing(f"{where} records {state.pose.shape[1]} objects over {len(state.pose)} frames; this "
                                 f"model carries {num_objects} objects and the episode has {length} frames")
    return np.ascontiguousarray(state.pose[:length], dtype=np.float32)


class ConcatLatents:
    """One :class:`WindowedLatents` (a :class:`LatentStore`, or the model's own rollouts) per part of a
    :class:`~neuralsim.data.reader.ConcatClipDataset`, indexed like the concatenation (each part keeps its cache under
    its own root)."""

    def __init__(self, dataset, stores: list[WindowedLatents]):
        if len(stores) != len(dataset.parts):
            raise ValueError(f"{len(dataset.parts)} dataset parts but {len(stores)} latent stores")
        self.dataset, self.stores = dataset, list(stores)

    def _gather(self, indices: list[int], fetch) -> list:
        """``fetch(store, local indices)`` -> a tuple of per-window tensors, asked of each part for its windows and
        put back in the order of ``indices``: one stacked tensor per element of the tuple."""
        import torch

        where = [self.dataset.locate(int(i)) for i in indices]
        out: list = [None] * len(indices)
        for part, store in enumerate(self.stores):
            rows = [j for j, (p, _) in enumerate(where) if p == part]
            if rows:
                got = fetch(store, [where[j][1] for j in rows])
                for k, j in enumerate(rows):
                    out[j] = tuple(t[k] for t in got)
        return [torch.stack(col) for col in zip(*out)]

    def get(self, indices: list[int], device):
        """As :meth:`LatentStore.get`: (B, T, V, C, h, w) latents and (B, T, 7) conditioning, in order."""
        z, c = self._gather(indices, lambda store, local: store.get(local, device))
        return z, c

    def get_objects(self, indices: list[int], device):
        """As :meth:`LatentStore.get_objects`: (B, T, K, 7) object poses, in order."""
        return self._gather(indices, lambda store, local: (store.get_objects(local, device),))[0]
