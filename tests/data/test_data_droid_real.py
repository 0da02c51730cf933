"""The reader on the real DROID sample (shared/data/droid_real): layout, frame rate, view mapping."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from neuralsim.data.reader import ClipDataset, detect_layout, list_episodes, read_episode

ROOT = Path(__file__).resolve().parents[3] / "shared" / "data" / "droid_real"
if not (ROOT / "annotation").is_dir():
    ROOT = Path("/work/shared/data/droid_real")
pytestmark = pytest.mark.skipif(not (ROOT / "annotation").is_dir(),
                                reason=f"real DROID sample not found at {ROOT} (shared/data/droid_real)")


def test_records_and_splits():
    assert detect_layout(ROOT) == "droid_real"
    recs = list_episodes(ROOT)
    assert len(recs) == len(list(ROOT.glob("annotation/*/*.json")))
    assert [r["episode_index"] for r in recs] == list(range(len(recs)))
    assert {r["split"] for r in recs} == {"train", "val"}
    assert len(list_episodes(ROOT, "val")) == len(list(ROOT.glob("annotation/val/*.json")))


def test_episode_is_video_rate_and_aligned():
    rec = list_episodes(ROOT)[0]
    ann = json.loads((ROOT / "annotation" / f"{rec['id']}.json").read_text())
    ep = read_episode(ROOT, 0, image_size=64)
    assert ep.fps == 5.0 and ep.num_frames == ann["video_length"]
    states = np.asarray(ann["states"], np.float32)
    np.testing.assert_array_equal(ep.cartesian_position, states[:, :6])
    np.testing.assert_array_equal(ep.gripper_position[:, 0], states[:, 6])
    joints = np.asarray(ann["observation.state.joint_position"], np.float32)
    np.testing.assert_array_equal(ep.joint_position, joints[3 * np.arange(ep.num_frames)])
    vel = np.asarray(ann["action.joint_velocity"], np.float32)
    np.testing.assert_allclose(ep.actions[0, :7], vel[0:3].mean(0), rtol=1e-6)
    assert ep.actions.shape == (ep.num_frames - 1, 8)
    assert all(f.shape == (ep.num_frames, 64, 64, 3) for f in ep.frames.values())
    # the wrist camera moves with the hand: by far the largest frame-to-frame change
    change = {v: np.abs(np.diff(f.astype(np.int16), axis=0)).mean() for v, f in ep.frames.items()}
    assert max(change, key=change.get) == "wrist_image_left"


def test_clip_dataset_on_real_data():
    ds = ClipDataset(ROOT, clip_length=16, split="val", image_size=32)
    item = ds[len(ds) - 1]
    assert tuple(item["frames"].shape) == (16, 3, 32, 32, 3)
    assert tuple(item["actions"].shape) == (16, 8) and tuple(item["joint_position"].shape) == (16, 7)
    assert (ds[0]["frames"] == ds[0]["frames"]).all()
