"""The ``neuralsim`` command line: ``neuralsim demo --seed 0 --task put_in_bowl``.

Subcommands (each imports what it needs only when it runs, so ``neuralsim --help`` is instant):

* ``demo``           -- one SimDROID episode with the scripted expert (in the shipped world model's scene) -> a 2x2
  collage mp4;
* ``data generate``  -- a SimDROID dataset with failures (:func:`neuralsim.data.generate.generate`);
* ``data info``      -- what a dataset directory holds (SimDROID layout or the real DROID sample);
* ``model info``     -- what a world-model checkpoint holds and how it was trained
  (:mod:`neuralsim.world_model.info`);
* ``model edit``     -- change a trained model's parts (:mod:`neuralsim.world_model.edit`);
* ``train``          -- world-model training: one stage (:mod:`neuralsim.world_model.train`) or a whole recipe
  (:mod:`neuralsim.world_model.recipe`, which drives the stages).  ``python -m neuralsim`` is the same command line
  (what ``torchrun -m neuralsim train ...`` runs on several GPUs).

Other packages add subcommands through the ``neuralsim.commands`` entry-point group (each entry point is a function
that registers its parser on the subparsers), so ``neuralsim`` never imports them: ``train-policy`` (the
visuomotor baselines, :mod:`policies.visuomotor.train`) comes from the ``policies`` package that way.

To add a subcommand, write ``_add_<name>(subparsers)`` that registers its parser with
``set_defaults(func=...)`` and list it in :func:`build_parser`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

EPILOG = """\
examples:
  neuralsim demo --seed 0 --task put_in_bowl             # watch the scripted expert (outputs/demo/*.mp4)
  neuralsim demo --seed 3 --task stack --failure weak_grip
  neuralsim demo --seed 0 --scene classic                # SimDROID-v0's scene (default: the shipped model's)
  neuralsim data generate data/simdroid --episodes 600 --workers 2
  neuralsim data generate data/simdroid_ood --episodes 30 --seed 2000000 --ood   # out-of-distribution split
  neuralsim data generate data/legible --episodes 600 --workers 2 --scene legible  # SimDROID-v1's scene
  neuralsim data info data/simdroid
  neuralsim data info ../shared/data/droid_real          # the real DROID sample reads the same way
  neuralsim train --recipe neuralsim/world_model/recipes/default.yaml --out runs/default   # the shipped model
  neuralsim model info                                   # the shipped world model: size, recipe, stages
  neuralsim train-policy --data data/bc_classic --out runs/visuomotor --ship   # the visuomotor baselines

Run `neuralsim <command> --help` for the options of one command.
"""


def build_parser(full_train: bool = True) -> argparse.ArgumentParser:
    """The ``neuralsim`` parser; ``full_train=False`` leaves out the ``train`` options (they import torch)."""
    parser = argparse.ArgumentParser(
        prog="neuralsim", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description="Evaluate robot policies inside a learned video world model of a DROID tabletop "
                    "(SimDROID is its MuJoCo ground truth).")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_demo(sub)
    _add_data(sub)
    _add_model(sub)
    _add_train(sub, full_train)
    _add_registered_commands(sub)
    # eval: NeuralDROID evaluation (policy x episodes in the world model, judged) goes here as
    # _add_eval(sub); `demo` will then show a NeuralDROID rollout beside its SimDROID twin.
    return parser


def main(argv: list[str] | None = None) -> int:
    """Console entry point ``neuralsim``; returns the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    words = [a for a in argv if not a.startswith("-")]
    parser = build_parser(full_train=bool(words) and words[0] == "train")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, RuntimeError) as e:  # user errors: one line, not a traceback
        if args.verbose:
            raise
        print(f"neuralsim {args.command}: error: {e}", file=sys.stderr)
        return 1


#: Entry-point group of subcommands that other packages add (``name = "module:register"``).
COMMANDS_GROUP = "neuralsim.commands"


def _add_registered_commands(sub) -> None:
    """Let each ``neuralsim.commands`` entry point register its subcommand (a broken one is skipped, logged)."""
    from importlib.metadata import entry_points

    for ep in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        try:
            ep.load()(sub)
        except Exception as e:  # noqa: BLE001 -- one broken plugin must not take the whole CLI down
            logging.getLogger(__name__).warning("neuralsim %s is unavailable: %s: %s", ep.name, type(e).__name__, e)


# ----------------------------------------------------------------------------- demo
@dataclass
class DemoConfig:
    """Options of ``neuralsim demo``."""

    seed: int = 0
    task: str | None = None
    """Task family; None draws one from the seed."""
    steps: int = 150
    """Step cap (the expert usually finishes in 70-130 steps)."""
    out: str = "outputs/demo"
    failure: str | None = None
    """A failure mode of the scripted expert, or None for a clean run."""
    noise: float = 0.0
    image_size: int = 64
    scene: str | None = None
    """SimDROID scene: ``"classic"`` (``SimDROID-v0``) or ``"legible"`` (``SimDROID-v1``); None: the scene of the
    shipped world model (:func:`~neuralsim.envs.neural_droid.checkpoint_scene`)."""


def _add_demo(sub) -> None:
    from .envs.experts import FAILURE_MODES  # light: MuJoCo is imported only when an env is built
    from .envs.scene import SCENES
    from .envs.sim_droid import TASK_FAMILIES

    p = sub.add_parser("demo", help="run one SimDROID episode with the scripted expert and save its video",
                       description="Run the scripted expert for one seeded SimDROID task (in the shipped world "
                                   "model's scene unless --scene says otherwise), write the 2x2 camera collage "
                                   "(exterior 1 | exterior 2 / wrist) as an mp4 and print the ground truth (rubric "
                                   "level 0/2/4/5, success).")
    d = DemoConfig()
    p.add_argument("--seed", type=int, default=d.seed, help="episode seed (scene, colours, poses)")
    p.add_argument("--task", choices=TASK_FAMILIES, default=None, help="task family (default: drawn from the seed)")
    p.add_argument("--steps", type=int, default=d.steps, help="step cap at 15 Hz (default %(default)s)")
    p.add_argument("--out", default=d.out, help="output folder (default %(default)s)")
    p.add_argument("--failure", choices=FAILURE_MODES, default=None, help="make the expert fail this way")
    p.add_argument("--noise", type=float, default=d.noise, help="std of the expert's command noise")
    p.add_argument("--image-size", dest="image_size", type=int, default=d.image_size)
    p.add_argument("--scene", choices=sorted(SCENES), default=d.scene,
                   help="SimDROID scene: classic (SimDROID-v0) or legible (SimDROID-v1) (default: the shipped "
                        "world model's scene)")
    p.set_defaults(func=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    cfg = DemoConfig(**{k: getattr(args, k) for k in DemoConfig.__dataclass_fields__})
    result = run_demo(cfg)
    print(f"scene:        {result['scene']} ({result['env_id']})")
    print(f"instruction:  {result['instruction']}")
    print(f"rubric level: {result['rubric_level']}  success: {result['success']}  "
          f"({result['steps']} steps, expert finished: {result['expert_done']})")
    print(f"video:        {result['video']}")
    return 0


def run_demo(cfg: DemoConfig) -> dict:
    """Roll the scripted expert out in SimDROID (``cfg.scene``; None: the shipped world model's) and write the
    collage video; returns the ground truth."""
    from .data.generate import run_expert
    from .envs.experts import ScriptedExpert
    from .envs.scene import get_scene
    from .envs.sim_droid import SimDROIDEnv
    from .episode import write_video

    if cfg.steps < 1:
        raise ValueError(f"--steps must be >= 1, got {cfg.steps}")
    if cfg.scene is None:
        from .envs.neural_droid_core import checkpoint_scene

        scene = get_scene(checkpoint_scene())
    else:
        scene = get_scene(cfg.scene)
    env = SimDROIDEnv(image_size=cfg.image_size, reward_fn=None, scene=scene.name)
    try:
        expert = ScriptedExpert(env, noise=cfg.noise, failure=cfg.failure, seed=cfg.seed)
        r = run_expert(env, expert, cfg.seed, cfg.task, max_steps=cfg.steps)
    finally:
        env.close()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    prefix = "simdroid" if scene.name == "classic" else f"simdroid_{scene.name}"
    name = f"{prefix}_{r.info['task']}_seed{cfg.seed}" + (f"_{cfg.failure}" if cfg.failure else "") + ".mp4"
    path = write_video(str(out / name), r.episode.collage_frames(), fps=r.episode.fps)
    return {"scene": scene.name, "env_id": scene.env_id, "instruction": r.info["instruction"], "task": r.info["task"],
            "rubric_level": int(r.info["rubric_level"]), "success": bool(r.info["success"]), "steps": r.steps,
            "expert_done": r.expert_done, "video": path}


# ----------------------------------------------------------------------------- model
def _add_model(sub) -> None:
    p = sub.add_parser("model", help="inspect or edit world-model checkpoints",
                       description="Inspect or edit world-model checkpoints.",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="examples:\n  neuralsim model info\n  neuralsim model info runs/sf/model --json\n"
                              "  neuralsim model edit runs/sf/model --out runs/sf_head --reference-head 32")
    msub = p.add_subparsers(dest="model_command", metavar="MODEL_COMMAND", required=True)
    i = msub.add_parser(
        "info", help="summarise a checkpoint: size, architecture, integrity, training recipe",
        description="Summarise a world-model checkpoint without building the model: files, parameter count per "
                    "part, architecture, inference window and noise levels, integrity (whether config.json is the "
                    "one the weights were saved with, whether the weights still match the content hash saved with "
                    "them, which tensors hold NaN/inf), and the training recipe stage by stage (steps run, derived "
                    "from the recipe's totals for stages older than the trainer's steps_run record). Exit code 1 if "
                    "WorldModel.from_pretrained would refuse the checkpoint.")
    i.add_argument("checkpoint", nargs="?", default=None,
                   help="checkpoint directory or Hugging Face hub id (default: the shipped model)")
    i.add_argument("--json", action="store_true", help="print the summary as JSON")
    i.set_defaults(func=_run_model_info)
    from .world_model.arguments import add_arguments
    from .world_model.edit import EditConfig

    e = msub.add_parser(
        "edit", help="change a trained model's parts and write it as a new checkpoint",
        description="Change a trained world model's parts -- its decoder's depth or the decoder itself, its "
                    "reference head, the conditioning its DiT trains on, its inference defaults -- keeping every "
                    "other weight bit for bit, and write the result as a new checkpoint. The edits are recorded "
                    "in its recipe.")
    add_arguments(e, EditConfig)
    e.set_defaults(func=_run_model_edit)


def _run_model_info(args: argparse.Namespace) -> int:
    import json

    from .world_model.info import checkpoint_info, checkpoint_is_loadable, format_checkpoint_info

    info = checkpoint_info(args.checkpoint)
    print(json.dumps(info, indent=2) if args.json else format_checkpoint_info(info))
    return 0 if checkpoint_is_loadable(info) else 1


def _run_model_edit(args: argparse.Namespace) -> int:
    from .world_model.arguments import given
    from .world_model.edit import EditConfig, edit_model

    cfg = EditConfig(**given(args, EditConfig))
    edit_model(cfg)
    print(f"wrote {cfg.out}")
    return 0


# ----------------------------------------------------------------------------- data
def _add_data(sub) -> None:
    p = sub.add_parser("data", help="generate or inspect datasets", description="Generate or inspect datasets.",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="examples:\n  neuralsim data generate data/simdroid --episodes 600 --workers 2\n"
                              "  neuralsim data info data/simdroid")
    dsub = p.add_subparsers(dest="data_command", metavar="DATA_COMMAND", required=True)

    g = dsub.add_parser(
        "generate", help="generate a SimDROID dataset with the scripted expert (resumable)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run the scripted expert in SimDROID and write a LeRobot-style dataset (parquet + one mp4 per "
                    "view + meta/episodes.jsonl with ground-truth success and rubric level). A share of the "
                    "episodes gets a failure mode so the world model sees failing actions fail. Re-running the "
                    "same command resumes; a larger --episodes extends the dataset.",
        epilog="example:\n  neuralsim data generate data/simdroid --episodes 600 --workers 2 --failure-share 0.3")
    g.add_argument("out", nargs="?", default=None, help="output directory (or --out DIR)")
    g.add_argument("--out", dest="out_opt", default=None, metavar="DIR", help="output directory")
    g.add_argument("--episodes", type=int, required=True, help="total episodes the dataset should hold")
    g.add_argument("--workers", type=int, default=1, help="processes, one SimDROID env each (default 1)")
    g.add_argument("--seed", type=int, default=0, help="base seed; episode i uses seed + i (default 0)")
    g.add_argument("--failure-share", dest="failure_share", type=float, default=0.3,
                   help="probability an episode gets a failure mode (default %(default)s)")
    g.add_argument("--failure-modes", dest="failure_modes", default=None,
                   help="comma-separated failure modes a failing episode draws from, uniformly; list one twice to "
                        "draw it twice as often (default: all, missed_grasp,weak_grip,early_release,overshoot,"
                        "wrist_tilt,oscillation)")
    g.add_argument("--recovery-share", dest="recovery_share", type=float, default=0.0,
                   help="share of the clean pick episodes that are recovery demonstrations: the hand approaches "
                        "with its yaw 15-40 degrees off and turns back above the cube before the descent "
                        "(default %(default)s)")
    g.add_argument("--noise", type=float, nargs=2, default=(0.0, 0.3), metavar=("LOW", "HIGH"),
                   help="range of the expert's command-noise std (default 0.0 0.3)")
    g.add_argument("--families", default=None,
                   help="comma-separated task families cycled over (default: put_in_bowl,push_to_pad,stack)")
    g.add_argument("--max-steps", dest="max_steps", type=int, default=150, help="step cap per episode (default 150)")
    g.add_argument("--image-size", dest="image_size", type=int, default=64, help="camera image side (default 64)")
    g.add_argument("--ood", action="store_true",
                   help="out-of-distribution split: cube colours outside the training palette and the target "
                        "cube outside the training region (SimDROIDEnv(distribution='ood'))")
    g.add_argument("--scene", choices=("classic", "legible"), default="classic",
                   help="SimDROID scene: classic (SimDROID-v0, default) or legible (SimDROID-v1: 6 cm cubes, "
                        "cameras that frame the workspace)")
    g.add_argument("--full-horizon", action="store_true",
                   help="run every episode to --max-steps, the arm holding still once the expert is done (as in an "
                        "env rollout), instead of stopping a few settle steps after it is done")
    g.add_argument("--actor", choices=("expert", "idle", "random"), default="expert",
                   help="who acts: the scripted expert (default), or a no-skill baseline run to --max-steps: idle "
                        "(holds still) or random (wanders); the baselines ignore --failure-share and --noise")
    g.add_argument("--perturbation", default=None,
                   help="a failure-perturbation family (e.g. premature_release) or 'all' (one per episode among those "
                        "that apply to its task): the clean expert's actions replayed through that wrapper, to "
                        "--max-steps, as the optimism-bias benchmark's truth (ignores --failure-share)")
    g.add_argument("--severity", type=float, default=0.5,
                   help="with --perturbation: its severity in [0, 1] (default 0.5)")
    g.add_argument("--frames-format", dest="frames_format", choices=("mp4", "npy"), default="mp4",
                   help="mp4 (H.264, default) or npy: raw uint8 frames, ~15x larger, for a machine without ffmpeg")
    g.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    g.set_defaults(func=_run_generate)

    i = dsub.add_parser("info", help="summarise a dataset directory",
                        description="Summarise a dataset: layout, episodes, frames, success per task family, "
                                    "failure modes, rubric levels and generation parameters.")
    i.add_argument("dir", help="dataset root (SimDROID layout or the real DROID sample)")
    i.set_defaults(func=_run_info)


def _run_generate(args: argparse.Namespace) -> int:
    from .data.generate import generate

    families = [f.strip() for f in args.families.split(",") if f.strip()] if args.families else None
    modes = [m.strip() for m in args.failure_modes.split(",") if m.strip()] if args.failure_modes else None
    out = args.out_opt or args.out
    if out is None or (args.out_opt and args.out and args.out_opt != args.out):
        raise SystemExit("neuralsim data generate: give the output directory once, as OUT or --out DIR")
    summary = generate(out, args.episodes, workers=args.workers, seed=args.seed,
                       failure_share=args.failure_share, noise=tuple(args.noise), families=families,
                       max_steps=args.max_steps, image_size=args.image_size, progress=args.progress, ood=args.ood,
                       frames_format=args.frames_format, actor=args.actor, perturbation=args.perturbation,
                       severity=args.severity, scene=args.scene, failure_modes=modes,
                       recovery_share=args.recovery_share,
                       **({"settle_steps": args.max_steps} if args.full_horizon else {}))
    print(summary.format())
    return 0


def _run_info(args: argparse.Namespace) -> int:
    print(dataset_info(args.dir))
    return 0


def dataset_info(root: str) -> str:
    """A printable summary of a dataset directory."""
    import json

    from .data.generate import summarise
    from .data.reader import detect_layout, list_episodes
    from .data.writer import read_info

    layout = detect_layout(root)
    records = list_episodes(root)
    frames = sum(int(r["length"]) for r in records)
    size_mb = sum(p.stat().st_size for p in Path(root).rglob("*") if p.is_file()) / 2**20
    lines = [f"{root}: {layout} layout, {len(records)} episodes, {frames} frames, {size_mb:.1f} MiB"]
    if layout == "droid_real":
        for split in sorted({r["split"] for r in records}):
            rs = [r for r in records if r["split"] == split]
            lens = [r["length"] for r in rs]
            hz = sorted({15 / max(1, round(r["raw_length"] / r["length"])) for r in rs})
            lines.append(f"  {split}: {len(rs)} episodes, {sum(r['success'] for r in rs)} successful, "
                         f"{min(lens)}-{max(lens)} video frames at {'/'.join(f'{h:g}' for h in hz)} Hz")
        return "\n".join(lines)
    info = read_info(root) or {}
    lines.append(f"  fps {info.get('fps')}, image size {info.get('image_size')}, "
                 f"version {info.get('codebase_version')}")
    if info.get("generation"):
        lines.append(f"  generation: {json.dumps(info['generation'])}")
    if records:
        lines += summarise(records, root).format().splitlines()[1:]
        lines += _contact_lines(root, records)
    return "\n".join(lines)


def _contact_lines(root: str, records: list[dict]) -> list[str]:
    """Frames by contact phase and the episodes with a grasp and a release, from the ground-truth columns (none for
    a dataset without them): how much carrying a model trained on the set sees."""
    from .data.reader import CONTACT_PHASES, read_object_state

    counts = dict.fromkeys(CONTACT_PHASES, 0)
    grasps = releases = 0
    for record in records:
        state = read_object_state(root, record)
        if state is None:
            return []
        phases = state.contact_phases()
        for name in CONTACT_PHASES:
            counts[name] += int((phases == name).sum())
        holding = state.held >= 0
        grasps += bool(holding.any())
        releases += bool((holding[:-1] & ~holding[1:]).any())
    total = max(1, sum(counts.values()))
    shares = ", ".join(f"{name} {n} ({100 * n / total:.1f}%)" for name, n in counts.items())
    return [f"  frames by contact     {shares}",
            f"  grasps and releases   {grasps}/{len(records)} episodes hold a cube, {releases} let one go"]


# ----------------------------------------------------------------------------- train
def _add_train(sub, full: bool = True) -> None:
    p = sub.add_parser("train", help="train the world model: a recipe, or one stage",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Train the world model: a recipe's stages in order, or one stage. Re-running the "
                                   "same command resumes (docs/TRAINING.md).",
                       epilog="examples:\n"
                              "  neuralsim train --recipe neuralsim/world_model/recipes/default.yaml "
                              "--out runs/default   # the shipped model\n"
                              "  neuralsim train --recipe neuralsim/world_model/recipes/default.yaml "
                              "--out runs/default --device cuda\n"
                              "  neuralsim train --stage autoencoder --data data/simdroid --out runs/ae --steps 3000\n"
                              "  neuralsim train --stage dit --objective step_forcing --init-from runs/ae/model "
                              "--data data/simdroid --out runs/sf --steps 8000\n"
                              "  neuralsim train --stage dit --config tiny --data synthetic:64 --out runs/smoke "
                              "--steps 20   # no dataset needed")
    if not full:  # `neuralsim --help` etc.: do not import torch for options nobody asked for
        p.set_defaults(func=_run_train)
        return
    try:
        from .world_model.arguments import add_arguments
        from .world_model.train import TrainConfig
    except ImportError as e:  # keep the rest of the CLI usable
        p.set_defaults(func=lambda args, err=e: _unavailable("train", err))
        return
    p.add_argument("--recipe", default=argparse.SUPPRESS, metavar="FILE",
                   help="run a recipe file's stages in order, each resumed or skipped once finished (e.g. "
                        "neuralsim/world_model/recipes/default.yaml; docs/TRAINING.md); the options given with it "
                        "apply to every stage")
    add_arguments(p, TrainConfig)
    p.set_defaults(func=_run_train)


def _run_train(args: argparse.Namespace) -> int:
    """``neuralsim train``: a recipe (:func:`~neuralsim.world_model.recipe.run_recipe`, which drives the stages) or
    one stage (:func:`~neuralsim.world_model.train.train`)."""
    from .world_model.arguments import given
    from .world_model.train import TrainConfig, train

    options = given(args, TrainConfig)
    recipe = getattr(args, "recipe", None)
    if recipe is not None:
        from .world_model.recipe import run_recipe

        run_recipe(recipe, options)
    else:
        train(TrainConfig(**options))
    return 0


def _unavailable(command: str, error: Exception) -> int:
    print(f"neuralsim {command} is unavailable: {error}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
