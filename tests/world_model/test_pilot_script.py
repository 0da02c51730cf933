"""scripts/pilot_following.sh, the prepared pilot of the following question, run end to end with tiny budgets."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_pilot_script_trains_its_arms_resumes_and_writes_their_curves(tmp_path):
    import torch

    from neuralsim.data.generate import generate
    from neuralsim.world_model.config import preset
    from neuralsim.world_model.model import WorldModel

    torch.manual_seed(0)
    wm = WorldModel(preset("tiny"))
    wm.set_scene("legible")
    wm.config.scene = "legible"
    wm.save_pretrained(tmp_path / "init")
    generate(tmp_path / "heldout", episodes=1, seed=1_000_000, scene="legible", max_steps=40, progress=False)
    env = {**os.environ, "OUT": str(tmp_path / "out"), "DATA": "synthetic:8", "HELDOUT": str(tmp_path / "heldout"),
           "INIT": str(tmp_path / "init"), "DF_STEPS": "2", "SF_STEPS": "2", "SNAPSHOT": "2", "BATCH": "2",
           "MINUTES": "5", "CURVE_EPISODES": "1", "COPY_TO": str(tmp_path / "copy"),
           "ARMS": "control grounded fine"}
    script = str(ROOT / "scripts" / "pilot_following.sh")
    subprocess.run(["bash", script], env=env, check=True, capture_output=True, timeout=600)
    for arm, grounding, patch in (("control", None, 4), ("grounded", "projected", 4), ("fine", "projected", 2)):
        config = json.loads((tmp_path / "copy" / arm / "sf" / "config.json").read_text())
        assert config["dit"].get("grounding") == grounding and config["scene"] == "legible"
        assert config["dit"]["patch_size"] == patch
        for stage in ("df", "sf"):
            curve = json.loads((tmp_path / "copy" / "results" / f"curve_{arm}_{stage}.json").read_text())["curve"]
            assert [p["step"] for p in curve] == [2]
    # a second call resumes: Step Forcing goes on to its new budget, the finished Diffusion Forcing stage is kept
    subprocess.run(["bash", script], env={**env, "SF_STEPS": "4"}, check=True, capture_output=True, timeout=600)
    curve = json.loads((tmp_path / "out" / "results" / "curve_grounded_sf.json").read_text())["curve"]
    assert [p["step"] for p in curve] == [2, 4]
    df = json.loads((tmp_path / "out" / "results" / "curve_grounded_df.json").read_text())["curve"]
    assert [p["step"] for p in df] == [2]
