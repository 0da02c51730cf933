"""Held-out SimDROID episodes and the frames a world model makes of them: what the world-model benchmarks replay
(``fidelity``, ``dynamics``, ``mirabench``, ``idm_turing``) and the object probe's round-trip floor.

:func:`load_split` reads a SimDROID split as :class:`EvalEpisode` s at the model's resolution; :func:`open_loop`
replays each episode's recorded actions in ``NeuralDROIDVectorEnv`` and :func:`open_loop_recorded` conditions the
world model on the recorded robot state instead; :func:`autoencoder_round_trip` and :func:`round_trip_frames` pass
true frames through the model's autoencoder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from neuralsim.episode import VIEW_NAMES

# ---------------------------------------------------------------------------------------------- data
#: Each scene's held-out and out-of-distribution SimDROID splits, where the README's commands write them (seeds
#: 1000000 and 2000000 --ood): what a benchmark reads when no ``--data`` is given.
SPLITS = {"classic": ("data/simdroid_heldout", "data/simdroid_ood"),
          "legible": ("data/legible_heldout", "data/legible_ood")}


def default_split(scene: str, ood: bool = False) -> str:
    """The held-out (or ``ood``) split of ``scene`` (:data:`SPLITS`)."""
    if scene not in SPLITS:
        raise ValueError(f"unknown scene {scene!r}; expected one of {sorted(SPLITS)}")
    return SPLITS[scene][int(ood)]


@dataclass
class EvalEpisode:
    """One held-out episode at the model's resolution."""

    index: int
    record: dict
    frames: np.ndarray  # (T, V, S, S, 3) uint8, VIEW_NAMES order
    actions: np.ndarray  # (T, 8): action after frame t (last row: hold)
    spec: Any  # neuralsim.envs.episodes.EpisodeSpec of frame 0
    joint_position: np.ndarray | None = None  # (T, 7) the simulator's joint state at each frame
    gripper_position: np.ndarray | None = None  # (T, 1) the measured gripper at each frame
    objects: Any = None  # neuralsim.data.reader.ObjectState: the cubes' recorded poses (None: not recorded)

    def __len__(self) -> int:
        return len(self.frames)

    @property
    def target_final_xy(self) -> np.ndarray:
        return np.asarray(self.record["final_poses"][self.record["target"]][:2], np.float64)

    @property
    def target_start_xy(self) -> np.ndarray | None:
        """Where the target cube stood at frame 0 (None for records written before ``initial_poses``)."""
        poses = self.record.get("initial_poses")
        return None if poses is None else np.asarray(poses[self.record["target"]][:2], np.float64)


def finished_records(root: str | Path) -> list[dict]:
    """The records of a dataset's finished episodes; FileNotFoundError, by name, when it has none."""
    from neuralsim.data.reader import list_episodes

    records = list_episodes(root)
    if not records:
        raise FileNotFoundError(f"{str(root)!r} holds no finished episodes; generate it first (docs/FIDELITY.md)")
    return records


def load_split(root: str | Path, image_size: int, max_episodes: int | None = None) -> list[EvalEpisode]:
    """Decode the first ``max_episodes`` episodes of a SimDROID dataset, resized to ``image_size``."""
    from neuralsim.data.reader import load_episode
    from neuralsim.envs.episodes import EpisodeSpec, resize_image

    records = finished_records(root)
    missing = [k for k in ("target", "final_poses", "seed") if k not in records[0]]
    if missing:
        raise ValueError(f"{str(root)!r} records lack {missing}: not written by `neuralsim data generate`")
    out = []
    for rec in records[:max_episodes]:
        ep = load_episode(root, rec)
        frames = ep.frames
        if frames.shape[2] != image_size:
            frames = np.stack([[resize_image(f, image_size) for f in step] for step in frames])
        name = f"{rec.get('task', 'episode')}_{rec['seed']}"
        spec = EpisodeSpec(name=name, views={v: frames[0, i] for i, v in enumerate(VIEW_NAMES)},
                           joint_position=ep.joint_position[0], gripper_position=ep.gripper_position[0],
                           instruction=rec.get("instruction", ""),
                           metadata={"source": str(root), "episode_index": int(rec["episode_index"]),
                                     "seed": int(rec["seed"])})
        out.append(EvalEpisode(int(rec["episode_index"]), rec, frames, ep.actions, spec,
                               np.asarray(ep.joint_position, np.float64), np.asarray(ep.gripper_position, np.float64),
                               ep.objects))
    return out


# ---------------------------------------------------------------------------------------------- generation
def open_loop(wm, episodes: Sequence[EvalEpisode], *, seed: int = 0, batch_size: int = 8,
              context_window: int | None = None, denoising_steps: int | None = None,
              progress: bool = False) -> list[np.ndarray]:
    """Replay each episode's recorded actions in ``NeuralDROIDVectorEnv`` from its first frame.

    Returns one uint8 (T, V, S, S, 3) array per episode, frame 0 being the given first frame.
    Rows whose episode is shorter than the batch's longest keep stepping with the hold action; their
    extra frames are dropped.  Every env gets the whole list as its episode set, so an episode's
    world-model noise depends on ``seed + index`` and the list's length, not on the batching.
    """
    from tqdm import tqdm

    from neuralsim.envs.neural_droid import NeuralDROIDVectorEnv

    out: list[np.ndarray] = []
    specs = [e.spec for e in episodes]
    total = sum(len(e) - 1 for e in episodes)
    bar = tqdm(total=total, disable=not progress, desc="generating", unit="frame")
    for start in range(0, len(episodes), batch_size):
        chunk = list(episodes[start:start + batch_size])
        env = NeuralDROIDVectorEnv(num_envs=len(chunk), checkpoint=wm, reward_fn=None, max_episode_steps=None,
                                   context_window=context_window, denoising_steps=denoising_steps, episodes=specs)
        obs, _ = env.reset(seed=[seed + e.index for e in chunk], options={"episode": [e.spec.name for e in chunk]})
        length = max(len(e) for e in chunk)
        frames = np.zeros((len(chunk), length, len(VIEW_NAMES), *obs[VIEW_NAMES[0]].shape[1:]), np.uint8)
        frames[:, 0] = np.stack([obs[v] for v in VIEW_NAMES], axis=1)
        for t in range(length - 1):
            actions = np.stack([e.actions[min(t, len(e) - 1)] for e in chunk])
            obs, *_ = env.step(actions)
            frames[:, t + 1] = np.stack([obs[v] for v in VIEW_NAMES], axis=1)
            bar.update(sum(t < len(e) - 1 for e in chunk))
        env.close()
        out += [frames[i, :len(e)] for i, e in enumerate(chunk)]
    bar.close()
    return out


def recorded_conditioning(wm, episode: EvalEpisode) -> np.ndarray:
    """(T, 7) float32: the world model's conditioning at each frame of ``episode`` from the *recorded* robot
    state -- forward kinematics of the simulator's joints (whatever ``WorldModelConfig.arm_conditioning`` the model
    was trained on: this is the ground-truth pose), and the gripper signal the model was trained on
    (``WorldModelConfig.gripper_conditioning``: the measured position, or the command through the adapter's lag)."""
    from neuralsim import kinematics as K
    from neuralsim.world_model.latents import env_cond

    if episode.joint_position is None or episode.gripper_position is None:
        raise ValueError(f"episode {episode.index} has no recorded joint and gripper state (load it with load_split)")
    cond = np.concatenate([K.forward_kinematics(episode.joint_position), episode.gripper_position.reshape(-1, 1)],
                          axis=1).astype(np.float32)
    return env_cond(cond, episode.joint_position, episode.actions,
                    gripper=getattr(wm.config, "gripper_conditioning", "measured"), arm="measured")


def row_noise(wm, generators):
    """One standard normal latent frame (V, C, h, w) per batch row, row i drawn from ``generators[i]``: a rollout's
    noise then depends on its own seed only, not on the rows batched beside it."""
    import torch

    d = wm.config.dit
    return torch.cat([torch.randn((1, d.num_views, d.latent_channels, d.latent_size, d.latent_size), generator=g)
                      for g in generators]).to(wm.device)


def open_loop_recorded(wm, episodes: Sequence[EvalEpisode], *, seed: int = 0, batch_size: int = 8,
                       context_window: int | None = None, denoising_steps: int | None = None,
                       progress: bool = False) -> list[np.ndarray]:
    """:func:`open_loop` with the conditioning of the recorded robot state (:func:`recorded_conditioning`) in place
    of the env's replay of the recorded actions: RoboWorld's open-loop protocol (the ground-truth conditioning
    sequence), which leaves out what the env's contact-free action adapter adds (``adapter_replay`` in the report).

    Everything else is NeuralDROID's: the noise of env row ``seed + index`` of :func:`open_loop` (one standard
    normal latent frame per step), window, denoising schedule, decoding against the first frame.
    """
    import torch
    from gymnasium.utils import seeding
    from tqdm import tqdm

    from neuralsim.envs.neural_droid import draw_episode_and_noise_seed, inference_schedule

    window = wm.config.window if context_window is None else int(context_window)
    schedule = inference_schedule(wm.config, denoising_steps)
    out: list[np.ndarray] = []
    bar = tqdm(total=sum(len(e) - 1 for e in episodes), disable=not progress, desc="generating", unit="frame")
    for start in range(0, len(episodes), batch_size):
        chunk = list(episodes[start:start + batch_size])
        conds = [recorded_conditioning(wm, e) for e in chunk]
        b, length = len(chunk), max(len(e) for e in chunk)
        state = wm.new_state(b, window=window, num_sink=0, device=wm.device)
        # open_loop resets env row i with seed + index over the whole episode list: the same noise seed
        gens = [torch.Generator().manual_seed(draw_episode_and_noise_seed(seeding.np_random(seed + e.index)[0],
                                                                          len(episodes))[1]) for e in chunk]
        views = np.stack([e.frames[0] for e in chunk])
        frames = np.zeros((b, length, *views.shape[1:]), np.uint8)
        frames[:, 0] = views
        cond_at = lambda t: torch.from_numpy(np.stack([c[min(t, len(c) - 1)] for c in conds]))  # noqa: E731
        with torch.inference_mode():
            wm.reset(state, torch.arange(b), torch.from_numpy(views), cond_at(0))
            for t in range(1, length):
                latents = wm.generate(state, row_noise(wm, gens), cond_at(t).to(wm.device), schedule=schedule)
                frames[:, t] = wm.decode(latents, state.reference()).cpu().numpy()
                bar.update(sum(t < len(e) for e in chunk))
        out += [frames[i, :len(e)] for i, e in enumerate(chunk)]
    bar.close()
    return out


def autoencoder_round_trip(wm, episodes: Sequence[EvalEpisode], last_frame: int,
                           batch_frames: int = 64) -> list[np.ndarray]:
    """The true frames 0..``last_frame`` of each episode, encoded and decoded by the model's autoencoder.

    A world model's frames pass through the same decoder, so these frames score the best any DiT could
    reach with this autoencoder: the benchmark's ceiling.
    """
    return [round_trip_frames(wm, e.frames[:last_frame + 1], batch_frames, reference=e.frames[0]) for e in episodes]


def round_trip_frames(wm, frames: np.ndarray, batch_frames: int = 64,
                      reference: np.ndarray | None = None) -> np.ndarray:
    """uint8 frames (T, V, S, S, 3) encoded and decoded by the model's autoencoder, ``batch_frames`` at a time.

    ``reference``: the episode's first frame (V, S, S, 3), which a model with a reference head decodes
    against, as the env does (one per frame: ``(T, V, S, S, 3)``).  None: the decoder alone.
    """
    import torch

    frames = torch.from_numpy(np.ascontiguousarray(frames))
    ref = None
    if reference is not None:
        views = torch.from_numpy(np.ascontiguousarray(reference))
        one = views.ndim == 4  # one reference for every frame: encode it once
        views = views[None] if one else views
        latents = wm.encode(views)
        ref = (views.expand(len(frames), *views.shape[1:]), latents.expand(len(frames), *latents.shape[1:])) if one \
            else (views, latents)
    with torch.no_grad():
        parts = [wm.decode(wm.encode(frames[i:i + batch_frames]),
                           None if ref is None else (ref[0][i:i + batch_frames],
                                                     ref[1][i:i + batch_frames])).cpu().numpy()
                 for i in range(0, len(frames), batch_frames)]
    return np.concatenate(parts).astype(np.uint8)


def last_frames_round_trip(wm, episodes: Sequence[EvalEpisode]) -> np.ndarray:
    """Each episode's true last frame through ``wm``'s autoencoder, (N, V, S, S, 3): the probe's round-trip floor."""
    return round_trip_frames(wm, np.stack([e.frames[-1] for e in episodes]),
                             reference=np.stack([e.frames[0] for e in episodes]))

