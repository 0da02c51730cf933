"""A small probe that finds a coloured cube on the SimDROID table from the two exterior views.

Used by :mod:`benchmarks.fidelity` to ask "where does the generated video put the manipulated
object?".  Usage (the fidelity benchmark builds it on first use)::

    python -m benchmarks.common.object_probe                  # assets/fidelity_probe; ~25 min on a busy 2-core CPU
    python -m benchmarks.common.object_probe --scene legible  # assets/fidelity_probe_legible (SimDROID-v1)
    python -m benchmarks.common.object_probe --decoded-from neuralsim/assets/world_model  # + decoded renders (15 min)

How it works: a per-view CNN reads one exterior view plus the cube's colour (as the per-pixel
absolute difference between the image and that colour, which makes colour matching easy) and
outputs a heat map at half resolution; a spatial softmax turns it into an expected image point.
It is trained with the cube's true image point -- the simulator's 3-D position projected through
the known exterior cameras (``neuralsim.envs.scene.EXTERIOR_CAMERAS``) -- as a soft one-hot target.
The two image points are then triangulated (midpoint of the closest approach of the two camera
rays), so no table geometry is learned and the answer is a 3-D position; the benchmark uses its xy.

Training data: SimDROID expert rollouts of both distributions (``"train"`` and ``"ood"`` colours and
positions), seeds :data:`PROBE_SEED` + i, every ``stride``-th frame and every frame of the settled
end of the episode, every cube of every kept frame, with blur / brightness / noise augmentation so that decoded
world-model frames are not out of distribution for the probe.  ``--decoded-from MODEL`` also passes every render through
that world model's autoencoder (encode, decode) and lets half of every batch read the decoded copy,
labelled with the simulator's position.  On an autoencoder that loses a small cube's colour (the classic scene's
16x16x4 latent) this does not help and costs accuracy on raw renders (docs/EXPERIMENTS.md), so the shipped probe is
trained on raw renders.  The option stays for an autoencoder that keeps the cube.

Its accuracy on held-out rollouts is in ``probe.json`` beside the weights, on the true last frames of the fidelity
splits in docs/FIDELITY.md ("Protocol"); its misses are cubes hidden by the bowl's wall or the arm in one
view.  Frames must be 64x64 to be probed well: views upsampled from a 16x16 model are too blurry.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from neuralsim.envs.scene import exterior_camera_frames as camera_frames
from neuralsim.envs.scene import project_exterior as project

log = logging.getLogger(__name__)

#: SimDROID seeds of the probe's training renders: far from the dataset (0..), the held-out split
#: (1_000_000..) and the OOD split (2_000_000..).
PROBE_SEED = 3_000_000
EXTERIOR_VIEWS = ("exterior_image_1_left", "exterior_image_2_left")
#: Errors below this count as "found" in the validation report [m] (the cube's edge length).
TOLERANCE_M = 0.05
#: Where the trained probe lives (``probe.safetensors`` + ``probe.json``, ~70 KB), read by :mod:`benchmarks.fidelity`.
DEFAULT_DIR = Path(__file__).resolve().parent / "assets" / "fidelity_probe"


def default_dir(scene: str = "classic") -> Path:
    """The shipped probe of SimDROID's ``scene``: ``assets/fidelity_probe`` (classic) or ``..._<scene>``."""
    from neuralsim.envs.scene import SCENES

    if scene not in SCENES:
        raise ValueError(f"unknown scene {scene!r}; expected one of {sorted(SCENES)}")
    return DEFAULT_DIR if scene == "classic" else DEFAULT_DIR.with_name(f"fidelity_probe_{scene}")


# ---------------------------------------------------------------------------------------------- cameras
# camera_frames() and project(): the exterior cameras' geometry is the scene's (neuralsim.envs.scene), imported above.


def triangulate(uv: np.ndarray, scene: str = "classic") -> np.ndarray:
    """Image points (N, 2 views, 2) in [-1, 1] of ``scene``'s exterior cameras -> world points (N, 3): midpoint of
    the rays' closest approach."""
    pos, basis, tans = camera_frames(scene)
    col, row = uv[..., 0] * tans, -uv[..., 1] * tans  # (N, 2)
    dirs = (col[..., None] * basis[None, :, 0] + row[..., None] * basis[None, :, 1] + basis[None, :, 2])
    dirs /= np.linalg.norm(dirs, axis=-1, keepdims=True)  # (N, 2, 3)
    d1, d2 = dirs[:, 0], dirs[:, 1]
    w = pos[0] - pos[1]
    b = (d1 * d2).sum(-1)
    d, e = d1 @ w, d2 @ w
    denom = np.maximum(1.0 - b**2, 1e-9)
    s = (b * e - d) / denom
    t = (e - b * d) / denom
    return 0.5 * ((pos[0] + s[:, None] * d1) + (pos[1] + t[:, None] * d2))


# ---------------------------------------------------------------------------------------------- model
@dataclass
class ProbeConfig:
    """Size of the probe; saved beside its weights."""

    image_size: int = 64
    """Side of the exterior views it reads (other sizes are resized first)."""
    width: int = 24
    """Channels of the convolutional trunk."""
    scene: str = "classic"
    """The SimDROID scene (``neuralsim.envs.scene.SCENES``) whose renders it reads and whose cameras it triangulates
    through."""


def make_probe(config: ProbeConfig):
    """A fresh (untrained) probe module."""
    import torch
    from torch import nn

    class ObjectProbe(nn.Module):
        """Views (N, 2, 3, S, S) in [0, 1] + cube RGB (N, 3) -> heat-map logits (N, 2, S/2, S/2)."""

        def __init__(self, cfg: ProbeConfig):
            super().__init__()
            self.config = cfg
            w, s = cfg.width, cfg.image_size
            self.trunk = nn.Sequential(
                nn.Conv2d(8, w, 5, stride=2, padding=2), nn.ReLU(),
                nn.Conv2d(w, w, 3, padding=1), nn.ReLU(),
                nn.Conv2d(w, w, 3, padding=2, dilation=2), nn.ReLU(),
                nn.Conv2d(w, 1, 1))
            lin = torch.linspace(-1.0, 1.0, s)
            self.register_buffer("coords", torch.stack(torch.meshgrid(lin, lin, indexing="ij"))[None],
                                 persistent=False)

        def forward(self, views, rgb):
            n, nv, _, s, _ = views.shape
            x = views.reshape(n * nv, 3, s, s)
            colour = rgb.repeat_interleave(nv, 0)[:, :, None, None]
            feats = torch.cat([x, (x - colour).abs(), self.coords.expand(n * nv, -1, -1, -1)], 1)
            return self.trunk(feats).reshape(n, nv, s // 2, s // 2)

    return ObjectProbe(config)


def expected_points(logits):
    """Spatial softmax: logits (..., H, W) -> expected (column, row) (..., 2) in [-1, 1] (cell centres)."""
    import torch

    h, w = logits.shape[-2:]
    p = logits.flatten(-2).softmax(-1).reshape(logits.shape)
    cols = (torch.arange(w, dtype=p.dtype) + 0.5) / w * 2 - 1
    rows = (torch.arange(h, dtype=p.dtype) + 0.5) / h * 2 - 1
    return torch.stack([(p.sum(-2) * cols).sum(-1), (p.sum(-1) * rows).sum(-1)], -1)


def _views_tensor(views: np.ndarray, size: int):
    """uint8 (N, 2, H, W, 3) -> float (N, 2, 3, size, size) in [0, 1]."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(_resize_views(views, size))).permute(0, 1, 4, 2, 3).float() / 255.0


def _resize_views(views: np.ndarray, size: int) -> np.ndarray:
    """uint8 (N, 2, H, W, 3) -> (N, 2, size, size, 3) (unchanged when already that size)."""
    from neuralsim.envs.episodes import resize_image

    if views.shape[2] == size:
        return views
    return np.stack([[resize_image(v, size) for v in pair] for pair in views])


def locate_views(probe, views: np.ndarray, rgb: np.ndarray, batch: int = 256) -> np.ndarray:
    """Image points (N, 2 views, 2) as (column, row) in [-1, 1] of the cube of colour ``rgb`` (N, 3) in uint8
    exterior views (N, 2, H, W, 3): where the probe sees it in each view, before triangulation."""
    import torch

    out = []
    probe.eval()
    with torch.no_grad():
        for i in range(0, len(views), batch):
            logits = probe(_views_tensor(views[i:i + batch], probe.config.image_size),
                           torch.as_tensor(rgb[i:i + batch], dtype=torch.float32))
            out.append(expected_points(logits).double().numpy())
    return np.concatenate(out) if out else np.zeros((0, 2, 2))


def locate(probe, views: np.ndarray, rgb: np.ndarray, batch: int = 256) -> np.ndarray:
    """World position (N, 3) [m] of the cube of colour ``rgb`` (N, 3) in uint8 exterior views (N, 2, H, W, 3)."""
    uv = locate_views(probe, views, rgb, batch)
    return triangulate(uv, probe.config.scene) if len(uv) else np.zeros((0, 3))


# ---------------------------------------------------------------------------------------------- data
def colour_rgb(cube: str) -> np.ndarray:
    """RGB in [0, 1] of a SimDROID cube named ``"<colour>_cube"`` or ``"<colour>"`` (training or OOD palette)."""
    from neuralsim.envs.sim_droid import COLORS, OOD_COLORS

    name = cube.removesuffix("_cube")
    palette = {**COLORS, **OOD_COLORS}
    if name not in palette:
        raise ValueError(f"unknown cube colour {name!r} in {cube!r}; known: {sorted(palette)}")
    return np.asarray(palette[name][:3], np.float32)


def collect_samples(num_episodes: int, seed: int = PROBE_SEED, stride: int = 4, max_steps: int = 150,
                    image_size: int = 64, progress: bool = True, scene: str = "classic") -> dict[str, np.ndarray]:
    """Expert rollouts (even episodes ``"train"``, odd ``"ood"`` distribution): exterior views (N, 2, S, S, 3),
    cube colours (N, C, 3), cube positions (N, C, 3) and episode ids (N,), every ``stride``-th frame and
    every frame after the expert is done (the end states the benchmark probes: cubes in the bowl, on
    the pad, on a stack, with the arm above them).

    Episodes follow ``neuralsim data generate``'s plan (families in turn, 30% failure modes, noise
    in [0, 0.3]), so the probe sees grasps, carries, drops, cubes in bowls and on stacks.
    """
    from tqdm import tqdm

    from neuralsim.data.generate import SETTLE_STEPS, plan_episode
    from neuralsim.envs.experts import ScriptedExpert
    from neuralsim.envs.sim_droid import TASK_FAMILIES, SimDROIDEnv

    envs = {d: SimDROIDEnv(image_size=image_size, reward_fn=None, distribution=d, scene=scene)
            for d in ("train", "ood")}
    views, colours, xyz, episode = [], [], [], []
    try:
        for i in tqdm(range(num_episodes), disable=not progress, desc="probe renders", unit="ep"):
            env = envs["ood" if i % 2 else "train"]
            plan = plan_episode(i, seed, TASK_FAMILIES, 0.3, (0.0, 0.3))
            obs, _ = env.reset(seed=plan.seed, options={"task": plan.family})
            expert = ScriptedExpert(env, noise=plan.noise, failure=plan.failure, seed=plan.seed)
            expert.reset()
            rgb = np.stack([colour_rgb(c) for c in env.spec_task.colors])

            def keep(o):
                views.append(np.stack([o[v] for v in EXTERIOR_VIEWS]))
                colours.append(rgb)
                xyz.append(np.stack([env.cube_position(j) for j in range(env.scene.num_cubes)]))
                episode.append(i)

            steps, settle, kept = 0, 0, -1
            while steps < max_steps and settle <= SETTLE_STEPS:
                if steps % stride == 0 or expert.done:
                    keep(obs)
                    kept = steps
                obs, *_ = env.step(expert.act(obs))
                steps += 1
                settle += bool(expert.done)
            if kept != steps:
                keep(obs)
    finally:
        for env in envs.values():
            env.close()
    return {"views": np.stack(views), "colours": np.stack(colours).astype(np.float32),
            "xyz": np.stack(xyz).astype(np.float32), "episode": np.asarray(episode)}


# ---------------------------------------------------------------------------------------------- training
def add_round_trip(samples: dict[str, np.ndarray], world_model, batch_frames: int = 64,
                   progress: bool = True) -> dict[str, np.ndarray]:
    """Add ``"decoded_views"``: the exterior views through ``world_model``'s autoencoder (same shape as ``"views"``).

    Views are resized to the autoencoder's size and back when the two differ (a 16x16 model's decoded
    views are upsampled the way the benchmark upsamples its generated frames).
    """
    from tqdm import tqdm

    from .heldout import round_trip_frames

    views = samples["views"]
    size, ae = views.shape[2], world_model.config.autoencoder.image_size
    out = np.empty_like(views)
    for i in tqdm(range(0, len(views), batch_frames), disable=not progress, desc="probe round trip", unit="batch"):
        chunk = views[i:i + batch_frames]
        out[i:i + len(chunk)] = _resize_views(round_trip_frames(world_model, _resize_views(chunk, ae), batch_frames),
                                              size)
    return {**samples, "decoded_views": out}


def _augment(x, generator):
    """Make renders look more like decoded, generated frames: blur, brightness, noise."""
    import torch
    import torch.nn.functional as F

    n, v, c, s, _ = x.shape
    if torch.rand((), generator=generator) < 0.6:
        sigma = 0.3 + float(torch.rand((), generator=generator))
        r = torch.arange(-2, 3, dtype=torch.float32)
        k1 = torch.exp(-r**2 / (2 * sigma**2))
        k1 = k1 / k1.sum()
        k = (k1[:, None] * k1[None, :]).expand(c, 1, 5, 5).contiguous()
        x = F.conv2d(F.pad(x.reshape(n * v, c, s, s), (2, 2, 2, 2), mode="replicate"), k, groups=c).reshape(x.shape)
    scale = 0.9 + 0.2 * torch.rand((n, 1, 1, 1, 1), generator=generator)
    noise = 0.03 * torch.rand((n, 1, 1, 1, 1), generator=generator) * torch.randn(x.shape, generator=generator)
    return (x * scale + noise).clamp(0.0, 1.0)


def _soft_target(uv, size: int, sigma_cells: float = 0.75):
    """Gaussian probability maps (..., size, size) centred on image points uv (..., 2) in [-1, 1]."""
    import torch

    centres = (torch.arange(size, dtype=torch.float32) + 0.5) / size * 2 - 1
    sig = sigma_cells * 2 / size
    uv = uv.clamp(-1, 1)
    gc = torch.exp(-((centres - uv[..., :1]) ** 2) / (2 * sig**2))  # (..., size) over columns
    gr = torch.exp(-((centres - uv[..., 1:]) ** 2) / (2 * sig**2))  # over rows
    m = gr[..., :, None] * gc[..., None, :]
    return m / m.sum((-2, -1), keepdim=True)


def train(samples: dict[str, np.ndarray], steps: int = 3000, batch_size: int = 32, lr: float = 3e-3, seed: int = 0,
          val_fraction: float = 0.1, config: ProbeConfig | None = None, progress: bool = True,
          decoded_share: float = 0.5):
    """Fit a probe to ``samples`` (from :func:`collect_samples`); returns (probe, report).

    Every (frame, cube) pair is an example; the last ``val_fraction`` of the episodes are held out and
    the report gives the triangulated error on them (3-D and table xy).  With ``"decoded_views"`` in the
    samples (:func:`add_round_trip`), each example reads the decoded copy with probability
    ``decoded_share`` and the report adds the error on the held-out decoded views (``val_decoded_*``).
    """
    if not 0.0 <= decoded_share <= 1.0:
        raise ValueError(f"decoded_share must be in [0, 1], got {decoded_share}")
    has_decoded = "decoded_views" in samples
    if has_decoded and samples["decoded_views"].shape != samples["views"].shape:
        raise ValueError(f"decoded_views {samples['decoded_views'].shape} must match views {samples['views'].shape}")
    import torch
    from tqdm import tqdm

    cfg = config or ProbeConfig(image_size=int(samples["views"].shape[2]))
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    probe = make_probe(cfg)
    episodes = np.unique(samples["episode"])
    n_val = max(1, int(round(val_fraction * len(episodes)))) if len(episodes) > 1 else 0
    is_val = np.isin(samples["episode"], episodes[len(episodes) - n_val:])
    train_idx, val_idx = np.flatnonzero(~is_val), np.flatnonzero(is_val)
    views = _views_tensor(samples["views"], cfg.image_size)
    decoded = _views_tensor(samples["decoded_views"], cfg.image_size) if has_decoded else None
    colours = torch.from_numpy(samples["colours"])
    n, n_cubes = samples["xyz"].shape[:2]
    uv = torch.from_numpy(project(samples["xyz"].reshape(-1, 3), cfg.scene).reshape(n, n_cubes, 2, 2)).float()
    half = cfg.image_size // 2
    opt = torch.optim.AdamW(probe.parameters(), lr=lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=max(steps, 1), pct_start=0.1)
    probe.train()
    losses = []
    for _ in tqdm(range(steps), disable=not progress, desc="probe training", unit="step"):
        rows = torch.from_numpy(train_idx)[torch.randint(len(train_idx), (batch_size,), generator=g)]
        cube = torch.randint(n_cubes, (batch_size,), generator=g)
        x = views[rows]
        if decoded is not None:
            use = torch.rand(batch_size, generator=g) < decoded_share
            x = torch.where(use[:, None, None, None, None], decoded[rows], x)
        logits = probe(_augment(x, g), colours[rows, cube])  # (B, 2, half, half)
        target_uv = uv[rows, cube]  # (B, 2, 2)
        logp = logits.flatten(-2).log_softmax(-1)
        ce = -(_soft_target(target_uv, half).flatten(-2) * logp).sum(-1).mean()
        l1 = (expected_points(logits) - target_uv.clamp(-1, 1)).abs().mean()
        loss = ce + 10.0 * l1
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    probe.eval()
    report: dict[str, Any] = {"steps": steps, "batch_size": batch_size, "lr": lr, "seed": seed,
                              "train_frames": int(len(train_idx)), "val_frames": int(len(val_idx)),
                              "final_loss": float(np.mean(losses[-50:])) if losses else None,
                              "decoded_share": decoded_share if has_decoded else 0.0}
    if len(val_idx):
        idx = np.repeat(val_idx, n_cubes)
        cube = np.tile(np.arange(n_cubes), len(val_idx))
        true = samples["xyz"][idx, cube]
        for key, prefix in (("views", "val"), ("decoded_views", "val_decoded")):
            if key not in samples:
                continue
            pred = locate(probe, samples[key][idx], samples["colours"][idx, cube])
            err_xy = np.linalg.norm(pred[:, :2] - true[:, :2], axis=1)
            report.update({f"{prefix}_xy_error_m_mean": float(err_xy.mean()),
                           f"{prefix}_xy_error_m_median": float(np.median(err_xy)),
                           f"{prefix}_share_below_5cm": float((err_xy < TOLERANCE_M).mean()),
                           f"{prefix}_xyz_error_m_mean": float(np.linalg.norm(pred - true, axis=1).mean())})
    return probe, report


def save(probe, directory: str | Path, report: dict | None = None) -> Path:
    """Write ``probe.safetensors`` and ``probe.json`` (config + training report) into ``directory``."""
    from safetensors.torch import save_file

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in probe.state_dict().items()}, str(d / "probe.safetensors"))
    (d / "probe.json").write_text(json.dumps({"config": asdict(probe.config), "report": report or {}}, indent=2) + "\n")
    return d


def load(directory: str | Path):
    """The probe saved in ``directory`` by :func:`save` (safetensors: nothing is unpickled)."""
    from safetensors.torch import load_file

    d = Path(directory)
    if not (d / "probe.json").is_file() or not (d / "probe.safetensors").is_file():
        raise FileNotFoundError(f"no object probe in {str(d)!r}; build it with "
                                f"`python -m benchmarks.common.object_probe --out {d}`")
    meta = json.loads((d / "probe.json").read_text())
    probe = make_probe(ProbeConfig(**meta["config"]))
    probe.load_state_dict(load_file(str(d / "probe.safetensors")))
    probe.eval()
    probe.report = meta.get("report", {})
    return probe


def build(directory: str | Path, episodes: int = 80, steps: int = 3000, progress: bool = True,
          decoded_from: str | Path | None = None, scene: str = "classic"):
    """Render training data in SimDROID, train the probe and save it; returns (probe, report).

    ``decoded_from`` (a world-model directory or hub id) adds its autoencoder's round trip of every render
    to the training data (:func:`add_round_trip`); None trains on raw renders only.
    """
    t0 = time.perf_counter()
    samples = collect_samples(episodes, progress=progress, scene=scene)
    decoder: dict[str, Any] = {}
    if decoded_from is not None:
        from neuralsim.world_model.model import WorldModel

        wm = WorldModel.from_pretrained(str(decoded_from))
        samples = add_round_trip(samples, wm, progress=progress)
        decoder = {"decoded_from": str(decoded_from),
                   "decoder_reconstruction_steps": wm.config.recipe.get("decoder_reconstruction_steps")}
    config = ProbeConfig(image_size=int(samples["views"].shape[2]), scene=scene)
    probe, report = train(samples, steps=steps, progress=progress, config=config)
    report.update(episodes=episodes, seed_start=PROBE_SEED, **decoder, seconds=round(time.perf_counter() - t0, 1))
    save(probe, directory, report)
    probe.report = report
    log.info("object probe saved to %s: %s", directory, report)
    return probe, report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.common.object_probe", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=None,
                   help="directory for probe.safetensors + probe.json (default: the scene's shipped probe, "
                        f"{DEFAULT_DIR} for classic)")
    p.add_argument("--episodes", type=int, default=80, help="SimDROID rollouts to render (default %(default)s)")
    p.add_argument("--steps", type=int, default=3000, help="training steps (default %(default)s)")
    p.add_argument("--decoded-from", default=None, metavar="WORLD_MODEL",
                   help="also train on each render's round trip through this world model's autoencoder "
                        "(e.g. neuralsim/assets/world_model; default: raw renders only)")
    p.add_argument("--scene", choices=("classic", "legible"), default="classic",
                   help="SimDROID scene of the renders: classic (SimDROID-v0, default) or legible (SimDROID-v1)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    _, rep = build(args.out or str(default_dir(args.scene)), args.episodes, args.steps, args.progress,
                   decoded_from=args.decoded_from, scene=args.scene)
    for prefix, what in (("val", "renders"), ("val_decoded", "decoded renders")):
        if f"{prefix}_xy_error_m_mean" in rep:
            print(f"probe saved to {args.out}: validation xy error on {what} "
                  f"{100 * rep[f'{prefix}_xy_error_m_mean']:.2f} cm mean, "
                  f"{100 * rep[f'{prefix}_share_below_5cm']:.0f}% below 5 cm")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
