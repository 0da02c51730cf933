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
from judges.offline import DEFAULT_WEIGHTS_DIR, TRAIN_HINT

logger = logging.getLogger(__name__)
RUBRICS = ("roboworld_progress", "binary_success")


class OfflineJudge:
    """Predict the RoboWorld rubric level with a trained :class:`~judges.offline.model.OfflineJudgeModel`.

    Args:
        weights: directory with ``model.safetensors`` + ``config.json``; default: the shipped weights.
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
        d = Path(weights) if weights else DEFAULT_WEIGHTS_DIR
        if not (d / "model.safetensors").is_file() or not (d / "config.json").is_file():
            raise OfflineJudgeNotTrainedError(
                f"no trained offline judge at {str(d)!r} (model.safetensors + config.json missing); "
                + TRAIN_HINT.format(out=str(DEFAULT_WEIGHTS_DIR if weights is None else d))
            )
        import torch

        from judges.offline.model import OfflineJudgeModel

        self.weights = d
        self.rubric = rubric
        self.device = device
        self.model = OfflineJudgeModel.from_pretrained(d, device=device)
        self._torch = torch
        self._lock = threading.Lock()

    @property
    def model_name(self) -> str:
        return str(self.weights)

    def __repr__(self) -> str:
        return f"OfflineJudge(rubric={self.rubric!r}, weights={str(self.weights)!r})"

    def predict_proba(self, episodes: list[Any]) -> Any:
        """(N, 6) level probabilities for Episode-like objects (batched)."""
        from judges.offline.features import collate, episode_inputs

        cfg = self.model.config
        items = [episode_inputs(e, cfg) for e in episodes]
        frames, mask, words = collate(items, cfg.max_frames)
        with self._lock, self._torch.inference_mode():
            logits = self.model(frames.to(self.device), mask.to(self.device), words.to(self.device))
        return logits.softmax(-1).cpu().numpy()

    def __call__(self, episode: Any) -> Judgement:
        """Judge one episode; never raises (a failure is a failed Judgement)."""
        t0 = time.perf_counter()
        try:
            p = self.predict_proba([episode])[0]
            level = int(p.argmax())
            criteria = {"level": level, "level_probabilities": [float(x) for x in p],
                        "expected_level": float((p * range(len(p))).sum())}
            score = float(level) if self.rubric == "roboworld_progress" else float(level == 5)
            j = Judgement(score=score, rubric=self.rubric, backend=self.backend_name, model=self.model_name,
                          criteria=criteria, rationale=f"predicted level {level} (p={p[level]:.2f})",
                          cost_usd=0.0)
        except Exception as e:  # noqa: BLE001 -- a judge failure must never lose the rollout
            logger.exception("offline judge failed")
            j = Judgement.failed(f"{type(e).__name__}: {e}", rubric=self.rubric, backend=self.backend_name,
                                 model=self.model_name)
        j.latency_s = time.perf_counter() - t0
        return j
