"""The real-DROID reader and Ctrl-World's other annotation layout (``joints`` and ``states`` at the video frame
rate, no 15 Hz robot state or actions): refused by name, on a small synthetic file of that layout."""

from __future__ import annotations

import json

import numpy as np
import pytest

from neuralsim import kinematics as K
from neuralsim.data.reader import DatasetError, detect_layout, list_episodes, load_episode


def write_video_rate_episode(root, length: int = 4) -> dict:
    """``annotation/train/0.json`` in the video-rate layout: ``joints`` (7 joints + gripper) and ``states``
    (flange pose by forward kinematics of the joints + gripper) per video frame, as Ctrl-World publishes it."""
    rng = np.random.default_rng(0)
    q = K.RESET_JOINT_POSITION + rng.uniform(-0.1, 0.1, (length, 7))
    gripper = np.linspace(0, 1, length)[:, None]
    ann = {
        "texts": ["put the marker in the cup"], "episode_id": 0, "success": 1, "video_length": length,
        "state_length": length, "videos": [{"video_path": f"videos/train/0/{i}.mp4"} for i in range(3)],
        "joints": np.concatenate([q, gripper], 1).tolist(),
        "states": np.concatenate([K.forward_kinematics(q), gripper], 1).tolist(),
    }
    path = root / "annotation" / "train" / "0.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(ann))
    return ann


def test_the_synthetic_file_is_self_consistent(tmp_path):
    ann = write_video_rate_episode(tmp_path)
    joints, states = np.asarray(ann["joints"]), np.asarray(ann["states"])
    np.testing.assert_allclose(K.forward_kinematics(joints[:, :7]), states[:, :6], atol=1e-9)


def test_the_video_rate_layout_is_refused_naming_the_missing_keys(tmp_path):
    write_video_rate_episode(tmp_path)
    assert detect_layout(tmp_path) == "droid_real"
    for read in (lambda: list_episodes(tmp_path),
                 lambda: load_episode(tmp_path, {"id": "train/0", "episode_index": 0}, image_size=16)):
        with pytest.raises(DatasetError) as err:
            read()
        msg = str(err.value)
        assert "0.json" in msg and "video-rate layout" in msg
        for key in ("raw_length", "observation.state.joint_position", "action.joint_velocity"):
            assert key in msg


def test_an_annotation_missing_any_key_is_a_dataset_error(tmp_path):
    ann = write_video_rate_episode(tmp_path)
    del ann["joints"]
    (tmp_path / "annotation" / "train" / "0.json").write_text(json.dumps({**ann, "raw_length": 12}))
    with pytest.raises(DatasetError, match="observation.state.cartesian_position") as err:
        list_episodes(tmp_path)
    lacks = str(err.value).split(" lacks ")[1].split(" (has ")[0]
    assert "video-rate" not in str(err.value) and "raw_length" not in lacks and "action.joint_velocity" in lacks
