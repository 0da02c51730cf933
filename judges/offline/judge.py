"""The offline learned judge as a reward function: ``"roboworld:offline"`` / ``"binary:offline"``.

Same Judgement as the VLM judges: ``score`` is the predicted rubric level (0..5) for
``roboworld_progress``, or 1/0 for ``binary_success`` (level 5 = success); ``criteria`` carries
the level probabilities and their expectation.  Runs on CPU in milliseconds, costs nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from judges.judgement import Judgement, OfflineJudgeNotTrainedError
from judges.offline import DEFAULT_WEIGHTS_DIR, TRAIN_HINT, default_weights_dir

logger = logging.getLogger(__name__)
RUBRICS = ("roboworld_progress", "binary_success")


class OfflineJudge:
    """Predict the RoboWorld rubric level with a trained :class:`~judges.offline.model.OfflineJudgeModel`.

    Args:
        weights: directory with ``model.safetensors`` + ``config.json``, which then judges every episode; default:
            the shipped judge of each episode's SimDROID scene (its metadata's ``scene`` or source env id; a
            ``SimDROID-v1`` episode, or a rollout of a model trained on it, is judged by the legible judge), each
            loaded when the first episode of its scene arrives.
        rubric: ``"roboworld_progress"`` (score = level) or ``"binary_success"`` (score = level == 5).
        device: torch device.

    A judgement's ``model`` names the weights directory that judged the episode (or would have, for a failed one).

    Raises:
        OfflineJudgeNotTrainedError: no trained weights in ``weights`` (or, by default, in a scene's shipped
            directory); the message says how to train.
    """

    backend_name = "offline"

    def __init__(self, weights: str | Path | None = None, rubric: str = "roboworld_progress",
                 device: str = "cpu") -> None:
        if rubric not in RUBRICS:
            raise ValueError(f"the offline judge predicts the RoboWorld level; rubric must be one of {RUBRICS}, got "
                             f"{rubric!r}")
        import torch

        from neuralsim.envs.scene import SCENES

        self.rubric = rubric
        self.device = device
        self._torch = torch
        self._lock = threading.Lock()
        #: The directory given, which judges every episode; None: each scene's shipped judge.
        self.weights = Path(weights) if weights else None
        self._models: dict[Path, Any] = {}
        if self.weights is not None:
            self._models[self.weights] = self._load(self.weights)
        else:  # the shipped judges are loaded on first use; a missing one is an error now, not mid-run
            for scene in SCENES:
                _check_trained(default_weights_dir(scene))

    @property
    def fixed(self) -> bool:
        """Whether one directory judges every episode (``weights`` given)."""
        return self.weights is not None

    def _load(self, d: Path) -> Any:
        _check_trained(d)
        from judges.offline.model import OfflineJudgeModel

        model = OfflineJudgeModel.from_pretrained(d, device=self.device)
        model.weights_dir = d
        return model

    def weights_for(self, scene: str) -> Path:
        """The weights directory that judges an episode of SimDROID's ``scene``."""
        return self.weights if self.weights is not None else default_weights_dir(scene)

    def model_for(self, scene: str) -> Any:
        """The model that judges an episode of SimDROID's ``scene`` (loaded on first use)."""
        return self._model_at(self.weights_for(scene))

    def _model_at(self, d: Path) -> Any:
        if d not in self._models:
            with self._lock:
                if d not in self._models:
                    self._models[d] = self._load(d)
        return self._models[d]

    def scene_of(self, episode: Any) -> str:
        """The SimDROID scene whose judge reads ``episode`` (from its metadata; classic where it names none)."""
        from neuralsim.envs.scene import scene_of

        return scene_of(getattr(episode, "metadata", None) or {})

    @property
    def model_name(self) -> str:
        """The weights directory given, or the folder of the shipped judges (one per scene)."""
        if self.weights is not None:
            return str(self.weights)
        return f"the shipped judge of each scene ({DEFAULT_WEIGHTS_DIR.parent})"

    def __repr__(self) -> str:
        return f"OfflineJudge(rubric={self.rubric!r}, weights={self.model_name!r})"

    def predict_proba(self, episodes: list[Any]) -> Any:
        """(N, 6) level probabilities for Episode-like objects (batched per judge)."""
        import numpy as np

        from judges.offline.features import collate, episode_inputs

        dirs = [self.weights_for(self.scene_of(e)) for e in episodes]
        out: Any = None
        for d in dict.fromkeys(dirs):
            rows = [i for i, x in enumerate(dirs) if x == d]
            model = self._model_at(d)
            items = [episode_inputs(episodes[i], model.config) for i in rows]
            frames, mask, words = collate(items, model.config.max_frames)
            with self._lock, self._torch.inference_mode():
                logits = model(frames.to(self.device), mask.to(self.device), words.to(self.device))
            p = logits.softmax(-1).cpu().numpy()
            out = np.zeros((len(episodes), p.shape[-1]), p.dtype) if out is None else out
            out[rows] = p
        return out

    def __call__(self, episode: Any) -> Judgement:
        """Judge one episode; never raises (a failure is a failed Judgement naming the weights it was for)."""
        t0 = time.perf_counter()
        model_name = self.model_name
        try:
            model_name = str(self.weights_for(self.scene_of(episode)))
            p = self.predict_proba([episode])[0]
            level = int(p.argmax())
            criteria = {"level": level, "level_probabilities": [float(x) for x in p],
                        "expected_level": float((p * range(len(p))).sum())}
            score = float(level) if self.rubric == "roboworld_progress" else float(level == 5)
            j = Judgement(score=score, rubric=self.rubric, backend=self.backend_name, model=model_name,
                          criteria=criteria, rationale=f"predicted level {level} (p={p[level]:.2f})",
                          cost_usd=0.0)
        except Exception as e:  # noqa: BLE001 -- a judge failure must never lose the rollout
            logger.exception("offline judge failed")
            j = Judgement.failed(f"{type(e).__name__}: {e}", rubric=self.rubric, backend=self.backend_name,
                                 model=model_name)
        j.latency_s = time.perf_counter() - t0
        return j


def _check_trained(d: Path) -> None:
    """Raise :class:`OfflineJudgeNotTrainedError` unless ``d`` holds ``model.safetensors`` + ``config.json``."""
    if not (d / "model.safetensors").is_file() or not (d / "config.json").is_file():
        raise OfflineJudgeNotTrainedError(
            f"no trained offline judge at {str(d)!r} (model.safetensors + config.json missing); "
            + TRAIN_HINT.format(out=str(d)))
