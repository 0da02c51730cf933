"""Run a training recipe -- data, the training stages in order, shipping -- resumably: ``neuralsim train --recipe``.

    neuralsim train --recipe neuralsim/world_model/recipes/default.yaml --out runs/default
    neuralsim train --recipe neuralsim/world_model/recipes/default.yaml --out runs/default --device cuda

A recipe is a YAML file of four sections (``recipes/default.yaml`` is the shipped model's, docs/TRAINING.md):

* ``model`` -- the first stage's model: ``preset`` (:func:`~neuralsim.world_model.config.preset`) and any
  :class:`~neuralsim.world_model.config.WorldModelConfig` fields laid over it (``autoencoder`` and ``dit`` as
  dicts of their own fields);
* ``data`` -- ``root`` (relative to the working directory), ``workers``, and ``sets``: name -> the options of
  :func:`neuralsim.data.generate.generate` (``episodes``, ``seed``, ``actor`` ...);
* ``stages`` -- name -> :class:`~neuralsim.world_model.train.TrainConfig` fields, with ``data`` a list of set
  names; they run in order, each from the previous one's model (the first from ``OUT/init``, the ``model``
  section's, its weights drawn from the first stage's ``seed``), each in ``OUT/<name>``; ``repeat: K`` makes a
  stage K identical parts ``<name>_1`` ... ``<name>_K`` in a row (a long budget in session-sized parts);
* ``ship`` -- :class:`~neuralsim.world_model.edit.EditConfig` fields applied to the last stage's model, written to
  ``OUT/final``.

Options given with ``--recipe`` apply to every stage (``device``, ``batch_size``, ``num_threads``, ``deadline``...);
those that say what a stage is (``stage``, ``objective``, ``data``, ``init_from``, ``config``) are the recipe's own.
Every piece resumes: a data set is completed where it stopped, a finished stage (``OUT/<name>/done.json``) is
skipped -- refused if the recipe has changed it since -- an interrupted one goes on from its checkpoint, and a
stage that stops at the ``deadline`` ends the run there, to be continued by the same command.

Under ``torchrun`` rank 0 makes the data and the first model while the other ranks wait for ``OUT/init``; then
every rank trains each stage (DDP) and rank 0 writes.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SECTIONS = ("model", "data", "stages", "ship")
#: What a stage is: set by the recipe, never by an option given with ``--recipe``.
STAGE_IDENTITY = ("stage", "objective", "data", "init_from", "config", "out")
#: Options that change how a stage runs, not what it trains: a finished stage is not re-run for them.
RUN_OPTIONS = ("device", "num_threads", "progress", "deadline", "cool_down_secs", "compile", "resume",
               "checkpoint_every", "snapshot_every", "log_every", "sample_every")
DONE_FILE = "done.json"


def load_recipe(path: str | Path) -> dict[str, Any]:
    """A recipe file as a dict of its four sections, checked (unknown sections, stage keys and data sets are
    errors naming them)."""
    import yaml

    from .train import TrainConfig

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"recipe {str(path)!r} does not exist (the shipped model's: "
                                "neuralsim/world_model/recipes/default.yaml)")
    recipe = yaml.safe_load(path.read_text()) or {}
    unknown = sorted(set(recipe) - set(SECTIONS))
    if unknown or "stages" not in recipe:
        raise ValueError(f"recipe {path}: sections are {SECTIONS} (stages required), got {sorted(recipe)}")
    recipe["stages"] = _expand_repeats(path, recipe["stages"] or {})
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    sets = (recipe.get("data") or {}).get("sets") or {}
    for name, spec in recipe["stages"].items():
        bad = sorted(set(spec) - fields)
        if bad:
            raise ValueError(f"recipe {path}, stage {name!r}: unknown options {bad} (TrainConfig's fields: "
                             f"{sorted(fields)})")
        missing = [s for s in spec.get("data", []) if s not in sets]
        if not spec.get("data") or missing:
            raise ValueError(f"recipe {path}, stage {name!r}: data must list data sets of the data section "
                             f"{sorted(sets)}; got {spec.get('data')!r}")
    return recipe


def _expand_repeats(path: Path, stages: dict) -> dict:
    """Stages with ``repeat: K`` become K identical stages ``NAME_1`` ... ``NAME_K`` (zero-padded to K's width),
    each continuing the one before: a long budget in parts that each end inside a working session."""
    out: dict = {}
    for name, spec in stages.items():
        spec = dict(spec or {})
        repeat = spec.pop("repeat", None)
        if repeat is not None and (isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1):
            raise ValueError(f"recipe {path}, stage {name!r}: repeat must be a whole number >= 1, got {repeat!r}")
        width = len(str(repeat or 1))
        names = [name] if repeat is None else [f"{name}_{i:0{width}d}" for i in range(1, repeat + 1)]
        for part in names:
            if part in out or (part != name and part in stages):
                raise ValueError(f"recipe {path}: stage {part!r} is named twice (stage {name!r} repeats into it)")
            out[part] = dict(spec)
    return out


def stage_of(part: str) -> str:
    """The stage a part made by ``repeat`` belongs to (``step_forcing_mix_07`` -> ``step_forcing_mix``); a stage
    without a repeat number is its own."""
    return re.sub(r"_\d+$", "", part)


def stage_configs(recipe: dict, out: Path, options: dict) -> list[tuple[str, Any]]:
    """(name, TrainConfig) of every stage, in order, with ``options`` laid over each."""
    from .train import TrainConfig

    root = Path((recipe.get("data") or {}).get("root", "data"))
    previous = out / "init"
    configs = []
    for name, spec in recipe["stages"].items():
        data = ",".join(str(root / s) for s in spec["data"])
        cfg = TrainConfig(**{**spec, **options, "data": data, "out": str(out / name), "init_from": str(previous)})
        configs.append((name, cfg))
        previous = out / name / "model"
    return configs


def run_recipe(path: str | Path, options: dict[str, Any]) -> Path:
    """Run the recipe at ``path`` into ``options["out"]`` (default ``runs/<recipe name>``); returns the shipped
    model's directory, or the last trained stage's when the run stopped at its deadline."""
    from .loop import rank_info

    recipe = load_recipe(path)
    options = dict(options)
    out = Path(options.pop("out", None) or Path("runs") / Path(path).stem)
    fixed = sorted(set(options) & set(STAGE_IDENTITY))
    if fixed:
        raise ValueError(f"{fixed} say what a stage is and come from the recipe; give only options such as --device "
                         "or --batch-size with --recipe")
    rank, world, _ = rank_info()
    configs = stage_configs(recipe, out, options)
    ready = out / "init" / "ready"  # rank 0 writes this run's id there once the data and the first model exist
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if rank == 0:
        if all((Path(cfg.out) / DONE_FILE).is_file() for _, cfg in configs):
            log.info("every stage of %s is finished: no data needed, the last stage's model is shipped again", out)
        else:
            make_data(recipe, options.get("progress", True))
        make_initial_model(recipe, out / "init", configs[0][1].seed)
        ready.write_text(run_id)
    else:
        _wait_for(ready, run_id)
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("nccl" if configs[0][1].device.startswith("cuda") else "gloo")
    try:
        last = train_stages(configs, rank)
        result = Path(configs[-1][1].out) / "model" if last is None else out / "final"
        if last is not None and rank == 0:
            ship(recipe, last, result)
        if world > 1:
            dist.barrier()  # no rank tears the group down while rank 0 still writes
        return result
    finally:
        if world > 1:
            dist.destroy_process_group()


def make_data(recipe: dict, progress: bool) -> None:
    """Generate (or complete) each data set of the recipe and decode its videos into its frame cache."""
    from neuralsim.data.generate import generate
    from neuralsim.data.reader import warm_frame_cache

    data = recipe.get("data") or {}
    root, workers = Path(data.get("root", "data")), int(data.get("workers", 1))
    size = _model_config(recipe).autoencoder.image_size
    for name, spec in (data.get("sets") or {}).items():
        t0 = time.time()
        log.info("data %s: %d episodes -> %s", name, spec["episodes"], root / name)
        summary = generate(root / name, **{"workers": workers, "progress": progress, "image_size": size, **spec})
        warm_frame_cache(root / name, size, workers=workers, progress=progress)
        log.info("data %s: %s (%.0f s)", name, summary.format().splitlines()[0], time.time() - t0)


def _model_config(recipe: dict):
    """The ``model`` section as a WorldModelConfig."""
    from .config import WorldModelConfig, preset

    spec = dict(recipe.get("model") or {})
    base = preset(spec.pop("preset", "default")).to_dict()
    for section in ("autoencoder", "dit"):
        base[section].update(spec.pop(section, {}))
    return WorldModelConfig.from_dict({**base, **spec})


def make_initial_model(recipe: dict, out: Path, seed: int) -> None:
    """Write the first stage's model (the ``model`` section's, weights drawn after seeding torch) to ``out``,
    unless it is there."""
    import torch

    from .model import WorldModel

    config = _model_config(recipe)
    if (out / "config.json").is_file():
        if WorldModel.from_pretrained(out).config.to_dict() != config.to_dict():
            raise ValueError(f"{out} holds another model than the recipe's model section; use another --out")
        return
    torch.manual_seed(seed)
    WorldModel(config).save_pretrained(out)


def _stage_identity(cfg) -> dict:
    return {k: v for k, v in dataclasses.asdict(cfg).items() if k not in RUN_OPTIONS}


def train_stages(configs: list, rank: int) -> Path | None:
    """Train each stage not yet finished; returns the last stage's model directory, or None if a stage stopped at
    its deadline."""
    from .train import train

    n = len(configs)
    for i, (name, cfg) in enumerate(configs, 1):
        done = Path(cfg.out) / DONE_FILE
        if done.is_file():
            record = json.loads(done.read_text())
            if record["config"] != _stage_identity(cfg):
                changed = sorted(k for k, v in _stage_identity(cfg).items() if record["config"].get(k) != v)
                raise ValueError(f"stage {name!r} finished with other settings ({', '.join(changed)} differ); remove "
                                 f"{cfg.out} to train it again, or use another --out")
            log.info("stage %d/%d %s: finished (%s steps), skipped", i, n, name, f"{cfg.steps:,}")
            continue
        log.info("stage %d/%d %s: %s%s, %s steps, data %s", i, n, name, cfg.stage,
                 f" ({cfg.objective})" if cfg.stage == "dit" else "", f"{cfg.steps:,}", cfg.data)
        t0 = time.time()
        summary = train(cfg, label=f"{i}/{n} {name}")
        if summary["stopped_early"]:
            log.info("stage %d/%d %s stopped at step %d of %d (deadline); run the same command to go on", i, n, name,
                     summary["step"], cfg.steps)
            return None
        if rank == 0:
            done.write_text(json.dumps({"config": _stage_identity(cfg), "steps": summary["step"],
                                        "wall_s": round(time.time() - t0, 1)}, indent=1))
        log.info("stage %d/%d %s: done in %.0f s", i, n, name, time.time() - t0)
    return Path(configs[-1][1].out) / "model"


def ship(recipe: dict, model: Path, out: Path) -> Path:
    """The ``ship`` section's edits of ``model``, written to ``out``."""
    from .edit import EditConfig, edit_model

    edit_model(EditConfig(checkpoint=str(model), out=str(out), **(recipe.get("ship") or {})))
    log.info("shipped: %s (scripts/ship_world_model.sh %s puts it in the package and measures it)", out, out)
    return out


def _wait_for(path: Path, text: str, every: float = 2.0) -> None:
    """Block until ``path`` holds ``text`` (rank 0 writes it when the data and the first model are ready)."""
    t0 = time.time()
    while not (path.is_file() and path.read_text() == text):
        if time.time() - t0 > 60:
            log.info("waiting for rank 0 to make the data and the first model (%s)", path)
            t0 = time.time()
        time.sleep(every)
