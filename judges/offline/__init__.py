"""The offline learned judge: a small torch model that predicts the RoboWorld rubric level (0-5).

It reads the same frames a VLM judge is shown (1 fps, the two segments of <= 15 frames, all three
views) plus the instruction, and is trained on SimDROID rollouts labelled by simulator ground truth
(``python -m judges.offline.train``).  Modules: ``model`` (architecture, config, save/load),
``features`` (episode -> model inputs), ``dataset`` (the SimDROID dataset directory), ``train``
(training script), ``evaluate`` (accuracy: exact level and within +-1), ``judge`` (the reward
function).  Nothing here imports torch until used.
"""

from __future__ import annotations

from pathlib import Path

#: Where the shipped weights of the classic scene (``SimDROID-v0``) live (``model.safetensors`` + ``config.json``);
#: :func:`default_weights_dir` gives each scene's.
DEFAULT_WEIGHTS_DIR = Path(__file__).parent / "weights" / "roboworld_progress"


def default_weights_dir(scene: str = "classic") -> Path:
    """The shipped judge of SimDROID's ``scene``: ``weights/roboworld_progress`` (classic) or ``..._<scene>``."""
    from neuralsim.envs.scene import SCENES

    if scene not in SCENES:
        raise ValueError(f"unknown scene {scene!r}; expected one of {sorted(SCENES)}")
    return DEFAULT_WEIGHTS_DIR if scene == "classic" else DEFAULT_WEIGHTS_DIR.with_name(f"roboworld_progress_{scene}")

TRAIN_HINT = (
    "train it with:  python -m judges.offline.train --data <SimDROID dataset dir> --out {out}  "
    "(the dataset comes from `neuralsim data generate`), or pass a trained directory as "
    "'roboworld:offline//path/to/dir'"
)
