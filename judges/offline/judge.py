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
            ``SimDROID-v1`` episode, or a rollout of a model trained on it, is judged by the legible judge).
        rubric: ``"roboworld_progress"`` (score = level) or ``"binary_success"`` (score = level == 5).
        device: torch device.

    Raises:
        OfflineJudgeNotTrainedError: no trained weights in ``weights`` (the message says how to train).
    """

    backend_name = "offline"

    def __init__(self, weights: str | Path | None = None, rubric: str = "roboworld_progress",
                 device: str = "cpu") -> None:
        if rubric not in RUBRICS:
            raise ValueError(f"the offline judge predicts the RoboWorld level; rubric must be one of {RUBRICS}, got "
                             f"{rubric!r}")
        import torch

        self.rubric = rubric
        self.device = device
        self._torch = torch
        self._lock = threading.Lock()
        #: ``weights`` given: that model judges every episode; None: each scene's shipped judge.
        self.fixed = weights is not None
        self.weights = Path(weights) if weights else DEFAULT_WEIGHTS_DIR
        self._models: dict[str, Any] = {}
        self.model = self._load(self.weights)
        self._models["classic"] = self.model

    def _load(self, d: Path) -> Any:
        if not (d / "model.safetensors").is_file() or not (d / "config.json").is_file():
            raise OfflineJudgeNotTrainedError(
                f"no trained offline judge at {str(d)!r} (model.safetensors + config.json missing); "
                + TRAIN_HINT.format(out=str(d)))
        from judges.offline.model import OfflineJudgeModel

        model = OfflineJudgeModel.from_pretrained(d, device=self.device)
        model.weights_dir = d
        return model

    def model_for(self, scene: str) -> Any:
        """The model that judges an episode of SimDROID's ``scene`` (loaded on first use)."""
        if self.fixed:
            return self.model
        if scene not in self._models:
            self._models[scene] = self._load(default_weights_dir(scene))
        return self._models[scene]

    @property
    def model_name(self) -> str:
        return str(self.weights)

    def __repr__(self) -> str:
        return f"OfflineJudge(rubric={self.rubric!r}, weights={str(self.weights)!r})"

    def predict_proba(self, episodes: list[Any]) -> Any:
        """(N, 6) level probabilities for Episode-like objects (batched per scene)."""
        import numpy as np

        from judges.offline.features import collate, episode_inputs
        from neuralsim.envs.scene import scene_of

        scenes = ["classic" if self.fixed else scene_of(getattr(e, "metadata", None) or {}) for e in episodes]
        out: Any = None
        for scene in dict.fromkeys(scenes):
            rows = [i for i, s in enumerate(scenes) if s == scene]
            model = self.model_for(scene)
            items = [episode_inputs(episodes[i], model.config) for i in rows]
            frames, mask, words = collate(items, model.config.max_frames)
            with self._lock, self._torch.inference_mode():
                logits = model(frames.to(self.device), mask.to(self.device), words.to(self.device))
            p = logits.softmax(-1).cpu().numpy()
            out = np.zeros((len(episodes), p.shape[-1]), p.dtype) if out is None else out
            out[rows] = p
        return out

    def __call__(self, episode: Any) -> Judgement:
        """Judge one episode; never raises (a failure is a failed Judgement)."""
        t0 = time.perf_counter()
        try:
            from neuralsim.envs.scene import scene_of

            scene = "classic" if self.fixed else scene_of(getattr(episode, "metadata", None) or {})
            model_name = str(self.model_for(scene).weights_dir)
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
                                 model=self.model_name)
        j.latency_s = time.perf_counter() - t0
        return j
