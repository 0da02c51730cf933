"""Writer -> reader round trip, clip windows, resume and parameter checks on a tiny generated dataset."""

from __future__ import annotations

import json
import logging

import numpy as np
import pyarrow.parquet as pq
import pytest

from neuralsim.data.generate import GenerationMismatchError, generate, plan_episode, run_expert
from neuralsim.data.reader import ClipDataset, DatasetError, dataset_scene, list_episodes, read_episode
from neuralsim.data.writer import EPISODES_PATH, read_info
from neuralsim.episode import VIEW_NAMES

PARAMS = dict(seed=7, failure_share=0.5, noise=(0.0, 0.2), families=["put_in_bowl", "stack"], max_steps=30,
              image_size=64, progress=False)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float(10 * np.log10(255.0 ** 2 / max(mse, 1e-12)))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("simdroid")
    summary = generate(root, 2, **PARAMS)
    assert summary.total_episodes == 2 and summary.new_episodes == 2
    return root


def test_layout_and_records(dataset):
    info = read_info(dataset)
    assert info["fps"] == 15.0 and info["image_size"] == 64 and info["total_episodes"] == 2
    assert info["generation"]["seed"] == 7 and info["splits"] == {"train": "0:2"}
    assert set(VIEW_NAMES) <= set(info["features"])
    recs = list_episodes(dataset)
    assert [r["episode_index"] for r in recs] == [0, 1]
    for r in recs:
        for key in ("length", "instruction", "task", "family", "seed", "success", "rubric_level", "failure", "noise",
                    "initial_poses", "final_poses"):
            assert key in r, key
        assert r["rubric_level"] in (0, 2, 4, 5) and 0.0 <= r["noise"] <= 0.2
        for view in VIEW_NAMES:
            assert (dataset / "videos" / view / f"episode_{r['episode_index']:06d}.mp4").is_file()
    table = pq.read_table(dataset / "data" / "episode_000000.parquet")
    assert table.num_rows == recs[0]["length"]
    for col in ("observation.state.joint_position", "observation.state.gripper_position",
                "observation.state.cartesian_position", "action", "action.joint_velocity", "action.gripper_position",
                "timestamp", "frame_index", "episode_index", "next.done", "ground_truth.rubric_level"):
        assert col in table.column_names, col
    assert table.column("ground_truth.rubric_level").to_numpy()[-1] == recs[0]["rubric_level"]


def test_episodes_carry_their_datasets_scene(dataset):
    """The records name no scene; the reader adds the dataset's (``generation.scene``, classic where none is recorded)
    to each episode's metadata, so the judge and the specs made from it know which SimDROID scene it shows
    (a legible dataset: tests/judges/test_judges_offline.py)."""
    assert dataset_scene(dataset) == "classic" and "scene" not in list_episodes(dataset)[0]
    assert read_episode(dataset, 0).metadata["scene"] == "classic"


def test_round_trip_matches_a_fresh_rollout(dataset):
    """The stored episode equals a re-run of its plan: states/actions exactly, frames up to the codec."""
    from neuralsim.envs.experts import ScriptedExpert
    from neuralsim.envs.sim_droid import SimDROIDEnv

    rec = list_episodes(dataset)[1]
    plan = plan_episode(1, PARAMS["seed"], PARAMS["families"], PARAMS["failure_share"], PARAMS["noise"])
    assert (plan.seed, plan.family, plan.failure) == (rec["seed"], rec["family"], rec["failure"])
    env = SimDROIDEnv(reward_fn=None)
    r = run_expert(env, ScriptedExpert(env, noise=plan.noise, failure=plan.failure, seed=plan.seed), plan.seed,
                   plan.family, max_steps=PARAMS["max_steps"])
    env.close()
    ref, ep = r.episode, read_episode(dataset, 1)
    assert ep.num_frames == ref.num_frames == rec["length"]
    assert ep.instruction == ref.instruction == rec["instruction"]
    for name in ("joint_position", "gripper_position", "cartesian_position", "actions"):
        got, want = getattr(ep, name), getattr(ref, name)
        assert got.dtype == np.float32 and got.shape == want.shape, name
        np.testing.assert_array_equal(got, want, err_msg=name)
    for view in VIEW_NAMES:
        assert ep.frames[view].shape == ref.frames[view].shape and ep.frames[view].dtype == np.uint8
        assert psnr(ep.frames[view], ref.frames[view]) > 38.0, view


def test_clip_dataset_items(dataset):
    recs = list_episodes(dataset)
    ds = ClipDataset(dataset, clip_length=8)
    expected = 0
    for r in recs:
        starts = set(range(0, r["length"] - 8 + 1, 4)) | {r["length"] - 8}
        expected += len(starts)
    assert len(ds) == expected
    item = ds[len(ds) - 1]
    shapes = {k: (tuple(v.shape), str(v.dtype)) for k, v in item.items()}
    assert shapes["frames"] == ((8, 3, 64, 64, 3), "torch.uint8")
    assert shapes["cartesian_position"] == ((8, 6), "torch.float32")
    assert shapes["gripper_position"] == ((8, 1), "torch.float32")
    assert shapes["joint_position"] == ((8, 7), "torch.float32")
    assert shapes["actions"] == ((8, 8), "torch.float32")
    assert int(item["frame_index"][-1]) == recs[-1]["length"] - 1  # the last window ends on the last frame
    # deterministic per index, with or without the cache, and independent of access order
    fresh = ClipDataset(dataset, clip_length=8, cache_episodes=False)
    for i in (3, 0, len(ds) - 1, 3):
        a, b = ds[i], fresh[i]
        for k in a:
            assert (a[k] == b[k]).all(), (i, k)
    item["frames"].zero_()  # items are copies: writing into one leaves the cache intact
    assert ds[len(ds) - 1]["frames"].any()
    # views are in VIEW_NAMES order
    ep = read_episode(dataset, 0)
    np.testing.assert_array_equal(ds[0]["frames"][:, 2].numpy(), ep.frames["wrist_image_left"][:8])


def test_short_episodes_are_skipped(dataset, caplog):
    lengths = sorted(r["length"] for r in list_episodes(dataset))
    with pytest.raises(DatasetError, match="clip_length"):
        ClipDataset(dataset, clip_length=lengths[-1] + 1)
    if lengths[0] < lengths[-1]:
        with caplog.at_level(logging.WARNING):
            ds = ClipDataset(dataset, clip_length=lengths[-1])
        assert len(ds) == 1 and "shorter than clip_length" in caplog.text


def test_resume_skips_finished_episodes(dataset):
    before = {p: p.stat().st_mtime_ns for p in (dataset / "data").iterdir()}
    summary = generate(dataset, 3, **PARAMS)
    assert summary.new_episodes == 1 and summary.total_episodes == 3
    assert all(p.stat().st_mtime_ns == t for p, t in before.items())  # finished episodes were not redone
    lines = (dataset / EPISODES_PATH).read_text().splitlines()
    assert [json.loads(x)["episode_index"] for x in lines] == [0, 1, 2]
    assert read_info(dataset)["total_episodes"] == 3
    assert generate(dataset, 3, **PARAMS).new_episodes == 0


def test_torn_last_line_is_redone(dataset, caplog):
    path = dataset / EPISODES_PATH
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2])  # crash mid-append
    with caplog.at_level(logging.WARNING):
        assert [r["episode_index"] for r in list_episodes(dataset)] == list(range(len(lines) - 1))
    assert "torn" in caplog.text
    assert generate(dataset, len(lines), **PARAMS).new_episodes == 1
    assert [json.loads(x)["episode_index"] for x in path.read_text().splitlines()] == list(range(len(lines)))


def test_parameter_mismatch_is_refused(dataset):
    with pytest.raises(GenerationMismatchError, match="seed"):
        generate(dataset, 2, **{**PARAMS, "seed": 8})
    with pytest.raises(GenerationMismatchError, match="families"):
        generate(dataset, 2, **{**PARAMS, "families": ["stack"]})


def test_failure_modes_restrict_and_weight_the_draw(dataset):
    """``failure_modes`` is the pool a failing episode draws from; the default pool keeps the old plans."""
    from neuralsim.envs.experts import FAILURE_MODES

    fams = ["stack"]
    default = [plan_episode(i, 0, fams, 1.0, (0.0, 0.3)) for i in range(200)]
    assert default == [plan_episode(i, 0, fams, 1.0, (0.0, 0.3), FAILURE_MODES) for i in range(200)]
    weighted = [plan_episode(i, 0, fams, 1.0, (0.0, 0.3), ["weak_grip", "weak_grip", "overshoot"]).failure
                for i in range(200)]
    assert set(weighted) == {"weak_grip", "overshoot"}
    assert 0.55 < weighted.count("weak_grip") / 200 < 0.8  # two of three in the pool
    with pytest.raises(GenerationMismatchError, match="failure_modes"):
        generate(dataset, 2, **{**PARAMS, "failure_modes": ["weak_grip"]})


def test_recovery_share_turns_some_clean_picks_into_recovery_demonstrations(dataset):
    """Only clean pick episodes get an approach yaw, within RECOVERY_YAW_DEG of either sign; a share of 0 keeps the
    old plans, and a dataset made without it refuses to be extended with it."""
    from neuralsim.data.generate import RECOVERY_YAW_DEG

    fams = ["put_in_bowl", "push_to_pad", "stack"]
    old = [plan_episode(i, 0, fams, 0.3, (0.0, 0.3)) for i in range(300)]
    assert old == [plan_episode(i, 0, fams, 0.3, (0.0, 0.3), None, 0.0) for i in range(300)]
    new = [plan_episode(i, 0, fams, 0.3, (0.0, 0.3), None, 0.5) for i in range(300)]
    assert [(p.seed, p.family, p.failure, p.noise) for p in new] == [(p.seed, p.family, p.failure, p.noise)
                                                                      for p in old]
    turned = [p for p in new if p.approach_yaw]
    assert all(p.failure is None and p.family != "push_to_pad" for p in turned)
    clean_picks = [p for p in new if p.failure is None and p.family != "push_to_pad"]
    assert 0.35 < len(turned) / len(clean_picks) < 0.65
    deg = np.degrees([abs(p.approach_yaw) for p in turned])
    assert deg.min() >= RECOVERY_YAW_DEG[0] and deg.max() <= RECOVERY_YAW_DEG[1]
    assert 0.3 < np.mean([p.approach_yaw > 0 for p in turned]) < 0.7
    with pytest.raises(GenerationMismatchError, match="recovery_share"):
        generate(dataset, 2, **{**PARAMS, "recovery_share": 0.5})
    with pytest.raises(ValueError, match="recovery_share"):
        generate(dataset, 2, **{**PARAMS, "recovery_share": 1.5})


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="families"):
        generate(tmp_path / "a", 1, families=["juggle"], progress=False)
    with pytest.raises(ValueError, match="failure_modes"):
        generate(tmp_path / "a", 1, failure_modes=["slip"], progress=False)
    with pytest.raises(ValueError, match="noise"):
        generate(tmp_path / "b", 1, noise=(0.3, 0.1), progress=False)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "notes.txt").write_text("mine")
    with pytest.raises(GenerationMismatchError, match="not empty"):
        generate(tmp_path / "c", 1, progress=False)
    with pytest.raises(FileNotFoundError):
        ClipDataset(tmp_path / "missing")
    with pytest.raises(DatasetError, match="not a dataset"):
        ClipDataset(tmp_path / "c")


def test_workers_give_the_same_episodes(dataset, tmp_path):
    """Two spawn workers produce the same records as the single-process run."""
    summary = generate(tmp_path, 2, workers=2, **PARAMS)
    assert summary.total_episodes == 2
    keys = ("length", "instruction", "success", "rubric_level", "failure", "noise", "final_poses")
    ours = [{k: r[k] for k in keys} for r in list_episodes(tmp_path)]
    ref = [{k: r[k] for k in keys} for r in list_episodes(dataset)[:2]]
    assert ours == ref


def test_two_generators_cannot_share_a_directory(tmp_path):
    from neuralsim.data.generate import _exclusive

    with _exclusive(tmp_path):
        with pytest.raises(RuntimeError, match="another"):
            generate(tmp_path, 1, **PARAMS)


def test_frame_cache_is_written_reused_and_rebuilt(dataset, tmp_path):
    import shutil

    from neuralsim.data.reader import FRAME_CACHE_DIR, decode_video, warm_frame_cache

    root = tmp_path / "copy"
    shutil.copytree(dataset, root, ignore=shutil.ignore_patterns(FRAME_CACHE_DIR))
    assert warm_frame_cache(root, 32, progress=False) == len(list_episodes(root)) >= 2
    cache = root / FRAME_CACHE_DIR / "32" / "episode_000000.npy"
    cached = np.load(cache)
    direct = np.stack([decode_video(root / "videos" / v / "episode_000000.mp4", 32) for v in VIEW_NAMES], axis=1)
    assert cached.shape == direct.shape and np.array_equal(cached, direct)
    # the reader now serves the cached array: prove it by changing the cache
    np.save(cache, np.zeros_like(cached))
    assert read_episode(root, 0, image_size=32).frames[VIEW_NAMES[0]].max() == 0
    cache.write_bytes(b"torn")  # an unreadable cache file is decoded again and rewritten
    assert np.array_equal(read_episode(root, 0, image_size=32).frames[VIEW_NAMES[1]], direct[:, 1])
    assert np.array_equal(np.load(cache), direct)


def _copy_with_tiny_autoencoder(dataset, tmp_path):
    """(a writable copy of ``dataset``, a seeded tiny autoencoder, the copy's 6-frame 16x16 ClipDataset)."""
    import shutil

    import torch

    from neuralsim.world_model.config import preset
    from neuralsim.world_model.model import WorldModel

    root = tmp_path / "copy"
    shutil.copytree(dataset, root)
    torch.manual_seed(0)
    return root, WorldModel(preset("tiny")).autoencoder.eval(), ClipDataset(root, clip_length=6, image_size=16)


def test_latent_store_encodes_once_and_serves_windows(dataset, tmp_path):
    import torch

    from neuralsim.world_model.latents import LATENT_CACHE_DIR, LatentStore

    root, ae, ds = _copy_with_tiny_autoencoder(dataset, tmp_path)
    store = LatentStore(ae, ds, progress=False)
    files = sorted((root / LATENT_CACHE_DIR / store.fingerprint).glob("episode_*.npz"))
    assert len(files) == len(list_episodes(root))
    idx = [0, len(ds) - 1]
    z, cond = store.get(idx, "cpu")
    for j, i in enumerate(idx):
        item = ds[i]
        with torch.no_grad():
            direct = ae.encode(item["frames"])
        assert z[j].shape == direct.shape
        torch.testing.assert_close(z[j], direct.half().float())  # stored as fp16
        want = torch.cat([item["cartesian_position"], item["gripper_position"].reshape(-1, 1)], -1)
        torch.testing.assert_close(cond[j], want)
    # a second store reads the files: prove it by changing one
    with np.load(files[0]) as f:
        lat, c = f["latents"], f["cond"]
    np.savez(files[0], latents=np.zeros_like(lat), cond=c)
    assert LatentStore(ae, ds, progress=False).get([0], "cpu")[0].abs().max() == 0
    # a cache file shorter than its episode (written by another dataset version) fails the window, by name
    np.savez(files[0], latents=lat[:-3], cond=c[:-3])
    last_of_first = max(i for i, (pos, _) in enumerate(ds.windows) if pos == 0)
    with pytest.raises(ValueError, match=f"window {last_of_first} .* expected 6"):
        LatentStore(ae, ds, progress=False).get([0, last_of_first], "cpu")
    files[0].write_bytes(b"torn")  # unreadable: encoded again and rewritten
    torch.testing.assert_close(LatentStore(ae, ds, progress=False).get([0], "cpu")[0], z[:1])
    with np.load(files[0]) as f:
        assert np.array_equal(f["latents"], lat)
    # a changed decoder leaves the latents valid; other encoder weights -> another fingerprint, never stale latents
    with torch.no_grad():
        next(ae.vae.decoder.parameters()).add_(0.1)
    assert LatentStore(ae, ds, progress=False).fingerprint == store.fingerprint
    with torch.no_grad():
        next(ae.vae.encoder.parameters()).add_(0.1)
    assert LatentStore(ae, ds, progress=False).fingerprint != store.fingerprint


def test_latent_store_can_serve_the_gripper_command_instead_of_the_measured_gripper(dataset, tmp_path):
    """``gripper="command"``: the conditioning's gripper is the recorded commands through the adapter's lag, from
    each episode's first measured gripper (what NeuralDROID feeds the model); the pose entries and the latents are
    the measured store's, and the disk cache keeps the measured gripper."""
    import torch

    from neuralsim.data.reader import load_episode, read_actions
    from neuralsim.envs.adapter import gripper_trajectory
    from neuralsim.world_model.latents import LatentStore, command_gripper_cond

    root, ae, ds = _copy_with_tiny_autoencoder(dataset, tmp_path)
    measured = LatentStore(ae, ds, progress=False)
    command = LatentStore(ae, ds, progress=False, gripper="command")
    assert LatentStore(ae, ds, progress=False).cond.equal(measured.cond)  # the cache was not rewritten
    torch.testing.assert_close(command.latents, measured.latents)
    torch.testing.assert_close(command.cond[:, :6], measured.cond[:, :6])
    for pos, rec in enumerate(ds.records):
        ep = load_episode(root, rec)
        np.testing.assert_array_equal(read_actions(root, rec), ep.actions)
        rows = slice(int(command.offsets[pos]), int(command.offsets[pos] + command.lengths[pos]))
        want = gripper_trajectory(ep.gripper_position[0, 0], ep.actions[:-1, 7])
        np.testing.assert_allclose(command.cond[rows, 6].numpy(), want, atol=1e-6)
        np.testing.assert_allclose(measured.cond[rows, 6].numpy(), ep.gripper_position[:, 0])
    with pytest.raises(ValueError, match="need 4 actions"):
        command_gripper_cond(np.zeros((5, 7), np.float32), np.zeros((3, 8)))
    with pytest.raises(ValueError, match="gripper must be one of"):
        LatentStore(ae, ds, progress=False, gripper="closed")


def test_latent_store_can_serve_the_arm_replay_instead_of_the_measured_arm(dataset, tmp_path):
    """``arm="replay"``: the conditioning's pose is the forward kinematics of the adapter's replay of each episode's
    recorded actions from its first measured joints (what NeuralDROID feeds the model); the gripper and the latents
    are the measured store's, and the disk cache keeps the measured pose."""
    import torch

    from neuralsim import kinematics as K
    from neuralsim.data.reader import DatasetError, load_episode, read_joints_and_actions, read_simdroid_columns
    from neuralsim.envs.adapter import arm_trajectory
    from neuralsim.world_model.latents import LatentStore, replay_arm_cond

    root, ae, ds = _copy_with_tiny_autoencoder(dataset, tmp_path)
    measured = LatentStore(ae, ds, progress=False)
    replay = LatentStore(ae, ds, progress=False, arm="replay")
    both = LatentStore(ae, ds, progress=False, gripper="command", arm="replay")
    assert LatentStore(ae, ds, progress=False).cond.equal(measured.cond)  # the cache was not rewritten
    torch.testing.assert_close(replay.latents, measured.latents)
    torch.testing.assert_close(replay.cond[:, 6], measured.cond[:, 6])
    torch.testing.assert_close(both.cond[:, :6], replay.cond[:, :6])
    assert not torch.equal(both.cond[:, 6], replay.cond[:, 6])
    for pos, rec in enumerate(ds.records):
        ep = load_episode(root, rec)
        q, a = read_joints_and_actions(root, rec)
        np.testing.assert_array_equal(q, ep.joint_position)
        np.testing.assert_array_equal(a, ep.actions)
        cols = read_simdroid_columns(str(root), rec, {"observation.state.cartesian_position": 6})
        np.testing.assert_array_equal(cols["observation.state.cartesian_position"], ep.cartesian_position)
        rows = slice(int(replay.offsets[pos]), int(replay.offsets[pos] + replay.lengths[pos]))
        want = K.forward_kinematics(arm_trajectory(ep.joint_position[0], ep.actions[:-1, :7]))
        np.testing.assert_allclose(replay.cond[rows, :6].numpy(), want, atol=1e-5)
        # the replay starts from the measured first state
        np.testing.assert_allclose(replay.cond[rows.start, :6].numpy(), measured.cond[rows.start, :6].numpy(),
                                   atol=1e-5)
    assert not torch.allclose(replay.cond[:, :3], measured.cond[:, :3], atol=1e-4)  # and then parts from it
    with pytest.raises(DatasetError, match="has no column 'no.such.column'"):
        read_simdroid_columns(root, ds.records[0], {"no.such.column": 1})
    with pytest.raises(ValueError, match="need 4 actions"):
        replay_arm_cond(np.zeros((5, 7), np.float32), np.zeros(7), np.zeros((3, 8)))
    with pytest.raises(ValueError, match="arm must be one of"):
        LatentStore(ae, ds, progress=False, arm="commanded")


def test_full_horizon_runs_past_the_experts_finish():
    """settle_steps >= max_steps (``--full-horizon``) keeps stepping, arm idle, until max_steps."""
    from neuralsim.envs.experts import ScriptedExpert
    from neuralsim.envs.sim_droid import SimDROIDEnv

    env = SimDROIDEnv(image_size=32, reward_fn=None)
    try:
        short = run_expert(env, ScriptedExpert(env, seed=1_000_000), 1_000_000, "put_in_bowl", max_steps=90)
        assert short.expert_done and short.steps < 85  # the expert finishes at ~70 steps, then settles 5
        full = run_expert(env, ScriptedExpert(env, seed=1_000_000), 1_000_000, "put_in_bowl", max_steps=90,
                          settle_steps=90)
    finally:
        env.close()
    assert full.expert_done and full.steps == 90 and full.episode.num_frames == 91
    assert bool(full.ground_truth["success"][-1]) == bool(short.ground_truth["success"][-1])
    np.testing.assert_array_equal(full.episode.joint_position[: short.steps + 1], short.episode.joint_position)
    with pytest.raises(ValueError, match="settle_steps"):
        generate("unused_dir", 1, settle_steps=-1, progress=False)


def test_npy_frames_are_lossless_and_read_like_the_videos(dataset, tmp_path):
    """``frames_format="npy"`` (no ffmpeg needed) stores the renders bit for bit; the reader takes either format."""
    from neuralsim.data.writer import FRAMES_FORMATS

    root = tmp_path / "raw"
    generate(root, 2, frames_format="npy", **PARAMS)
    assert not list(root.glob("videos/*/*.mp4")) and len(list(root.glob("videos/*/*.npy"))) == 2 * len(VIEW_NAMES)
    for i in (0, 1):
        raw, mp4 = read_episode(root, i), read_episode(dataset, i)
        np.testing.assert_array_equal(raw.actions, mp4.actions)
        for view in VIEW_NAMES:
            assert raw.frames[view].shape == mp4.frames[view].shape and raw.frames[view].dtype == np.uint8
            assert 38.0 < psnr(raw.frames[view], mp4.frames[view]) < 100.0, view  # the mp4s are the lossy copy
    # clips come out the same way as from a video dataset
    a, b = ClipDataset(root, clip_length=8), ClipDataset(dataset, clip_length=8)
    assert 0 < len(a) <= len(b) and a.windows == b.windows[:len(a)]  # (other tests extend the shared dataset)
    np.testing.assert_array_equal(a[1]["cartesian_position"], b[1]["cartesian_position"])
    assert a[1]["frames"].shape == b[1]["frames"].shape
    with pytest.raises(DatasetError, match="read at the size it was written"):
        read_episode(root, 0, image_size=32)
    with pytest.raises(ValueError, match="frames_format"):
        generate(tmp_path / "bad", 1, frames_format="png", **PARAMS)
    assert FRAMES_FORMATS == ("mp4", "npy")


def test_no_skill_actors_run_to_the_horizon_and_are_labelled(tmp_path):
    """``actor="idle"`` holds the reset pose; ``"random"`` wanders (seeded), stays near the table; both run to
    max_steps."""
    from neuralsim import kinematics as K

    common = dict(seed=11, families=["put_in_bowl"], max_steps=20, image_size=32, progress=False, frames_format="npy")
    idle = generate(tmp_path / "idle", 2, actor="idle", **common)
    assert idle.rubric_levels == {0: 2}
    for rec in list_episodes(tmp_path / "idle"):
        assert rec["actor"] == "idle" and rec["steps"] == 20 and rec["failure"] is None and rec["noise"] == 0.0
    ep = read_episode(tmp_path / "idle", 0)
    assert not ep.actions.any()
    np.testing.assert_allclose(ep.joint_position, np.broadcast_to(K.RESET_JOINT_POSITION, (21, 7)), atol=2e-3)

    generate(tmp_path / "random", 2, actor="random", **common)
    a, b = read_episode(tmp_path / "random", 0), read_episode(tmp_path / "random", 1)
    assert a.actions.shape == (20, 8) and np.abs(a.actions[:, :7]).max() <= 1.0
    assert set(np.unique(a.actions[:, 7])) <= {0.0, 1.0}
    assert np.abs(a.joint_position[-1] - a.joint_position[0]).max() > 0.02  # it moved ...
    assert not np.allclose(a.actions, b.actions)  # ... differently per episode seed
    again = generate(tmp_path / "random_again", 1, actor="random", **common)
    assert again.total_episodes == 1
    np.testing.assert_array_equal(read_episode(tmp_path / "random_again", 0).actions, a.actions)  # seeded
    # the actor is part of the dataset's identity, and a typo is named
    with pytest.raises(GenerationMismatchError, match="actor"):
        generate(tmp_path / "idle", 2, actor="random", **common)
    with pytest.raises(GenerationMismatchError, match="actor"):
        generate(tmp_path / "idle", 2, **common)
    with pytest.raises(ValueError, match="actor must be one of"):
        generate(tmp_path / "x", 1, actor="monkey", **common)


def test_concatenated_datasets_train_on_both_with_their_own_latent_caches(dataset, tmp_path):
    """``--data a,b``: clips run through both datasets in order; each keeps its latents; training runs on the mix."""
    import shutil

    import torch

    from neuralsim.data.reader import ConcatClipDataset
    from neuralsim.world_model.config import preset
    from neuralsim.world_model.latents import LATENT_CACHE_DIR, ConcatLatents, LatentStore
    from neuralsim.world_model.model import WorldModel
    from neuralsim.world_model.train import TrainConfig, open_dataset, train

    expert = tmp_path / "expert"
    shutil.copytree(dataset, expert)
    idle = tmp_path / "idle"
    generate(idle, 1, actor="idle", seed=3, families=["stack"], max_steps=12, image_size=64, progress=False)
    mix = open_dataset(f"{expert}, {idle}", clip_length=6, image_size=16)
    a, b = ClipDataset(expert, clip_length=6, image_size=16), ClipDataset(idle, clip_length=6, image_size=16)
    assert isinstance(mix, ConcatClipDataset) and len(mix) == len(a) + len(b)
    assert mix.locate(len(a) - 1) == (0, len(a) - 1) and mix.locate(len(a)) == (1, 0)
    assert mix.locate(-1) == (1, len(b) - 1)
    np.testing.assert_array_equal(mix[len(a) + 1]["frames"].numpy(), b[1]["frames"].numpy())
    with pytest.raises(IndexError, match="out of range"):
        mix.locate(len(mix))

    torch.manual_seed(0)
    ae = WorldModel(preset("tiny")).autoencoder.eval()
    stores = [LatentStore(ae, part, progress=False) for part in mix.parts]
    latents = ConcatLatents(mix, stores)
    order = [len(a), 0, len(a) + 1, 1]  # interleaved parts come back in the asked order
    z, cond = latents.get(order, "cpu")
    za, ca = stores[0].get([0, 1], "cpu")
    zb, cb = stores[1].get([0, 1], "cpu")
    torch.testing.assert_close(z, torch.stack([zb[0], za[0], zb[1], za[1]]))
    torch.testing.assert_close(cond, torch.stack([cb[0], ca[0], cb[1], ca[1]]))
    torch.testing.assert_close(cond[0], cond[0, :1].expand_as(cond[0]), atol=1e-3, rtol=0)  # the idle arm stays put

    out = tmp_path / "run"
    train(TrainConfig(stage="dit", objective="diffusion_forcing", data=f"{expert},{idle}", out=str(out), config="tiny",
                      steps=2, batch_size=2, log_every=1, checkpoint_every=2, sample_every=-1, progress=False))
    assert (out / "model" / "model.safetensors").is_file()
    for root in (expert, idle):  # both datasets got the trained model's latents cached under their own root
        assert list((root / LATENT_CACHE_DIR).glob("*/episode_*.npz"))
    with pytest.raises(ValueError, match="separated by commas"):
        open_dataset(f"{expert},", clip_length=6, image_size=16)
    with pytest.raises(ValueError, match="disagree"):
        ConcatClipDataset([a, ClipDataset(idle, clip_length=4, image_size=16)])


def _tiny_rolling_model(seed: int = 0):
    """The tiny world model with a randomised DiT (AdaLN-Zero would make an untrained one predict zeros)."""
    import torch

    from neuralsim.world_model.config import preset
    from neuralsim.world_model.model import WorldModel

    torch.manual_seed(seed)
    wm = WorldModel(preset("tiny")).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in wm.dit.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return wm


def test_rollout_latents_are_the_models_own_open_loop_frames(dataset, tmp_path):
    """Each episode is rolled out from its encoded first frame on its recorded poses, with its own noise stream:
    the batched, cached result equals stepping that one episode alone; files are reused, torn ones redone."""
    import shutil

    import torch

    from neuralsim.world_model.latents import LatentStore
    from neuralsim.world_model.rollouts import ROLLOUT_CACHE_DIR, RolloutLatents, episode_generator

    root = tmp_path / "copy"
    shutil.copytree(dataset, root)
    wm = _tiny_rolling_model()
    ds = ClipDataset(root, clip_length=6, image_size=16)
    store = LatentStore(wm.autoencoder, ds, progress=False)
    store.lengths = store.lengths.copy()
    store.lengths[-1] -= 11  # episodes of unequal length share a batch
    lengths = [int(n) for n in store.lengths]
    wm.autoencoder.vae.decoder.train()  # as the decoder stage holds it: rolling out leaves every part's mode alone
    roll = RolloutLatents(wm, store, seed=3, batch_size=len(lengths), progress=False)
    assert wm.autoencoder.vae.decoder.training and not wm.dit.training and not wm.training
    files = sorted((root / ROLLOUT_CACHE_DIR / roll.fingerprint).glob("episode_*.npz"))
    assert len(files) == len(ds.records)

    for pos, rec in enumerate(ds.records):
        first, n = int(store.offsets[pos]), lengths[pos]
        got = roll.latents[first:first + n].float()
        true = store.latents[first:first + n].float()
        assert torch.equal(got[0], true[0])  # frame 0 is the given context
        # the reference: this episode alone, through the public stepping API
        state = wm.new_state(1)
        gen = episode_generator(3, rec["episode_index"], "cpu")
        wm.reset_latents(state, None, wm.normalise(true[:1]), store.cond[first:first + 1])
        for t in range(1, n):
            noise = torch.randn(tuple(true.shape[1:]), generator=gen)[None]
            x = wm.generate(state, noise, store.cond[first + t:first + t + 1])
            torch.testing.assert_close(got[t], wm.denormalise(x)[0].half().float(), atol=2e-2, rtol=1e-2)
        assert (got[1:] - true[1:]).abs().mean() > 0.05  # generated, not copied from the encoder

    # windows come back like the latent store's, with the store's conditioning
    z, cond = roll.get([0, 1], "cpu")
    z_true, cond_true = store.get([0, 1], "cpu")
    assert z.shape == z_true.shape and torch.equal(cond, cond_true)
    # a second set reads the files (prove it by changing one); batching does not change the result
    with np.load(files[0]) as f:
        saved = f["latents"]
    np.savez(files[0], latents=np.zeros_like(saved))
    again = RolloutLatents(wm, store, seed=3, batch_size=1, progress=False)
    assert again.latents[:lengths[0]].abs().max() == 0
    files[0].write_bytes(b"torn")  # unreadable: rolled out again (alone this time) and rewritten
    redone = RolloutLatents(wm, store, seed=3, batch_size=1, progress=False)
    torch.testing.assert_close(redone.latents.float(), roll.latents.float(), atol=2e-2, rtol=1e-2)
    # the fingerprint ignores the decoder and follows the DiT and the seed
    with torch.no_grad():
        next(wm.autoencoder.vae.decoder.parameters()).add_(0.1)
    assert RolloutLatents(wm, store, seed=3, progress=False).fingerprint == roll.fingerprint
    assert RolloutLatents(wm, store, seed=4, progress=False).fingerprint != roll.fingerprint
    with torch.no_grad():
        next(wm.dit.parameters()).add_(0.1)
    assert RolloutLatents(wm, store, seed=3, progress=False).fingerprint != roll.fingerprint
    with pytest.raises(ValueError, match="batch_size"):
        RolloutLatents(wm, store, batch_size=0, progress=False)


def _decoder_stage(dataset, tmp_path, **fixed):
    """A copy of ``dataset``, the tiny rolling model saved as the base, and a factory of tiny decoder-stage
    configs from it (``fixed`` and then each call's keywords override the defaults)."""
    import shutil

    from neuralsim.world_model.train import TrainConfig

    root = tmp_path / "copy"
    shutil.copytree(dataset, root)
    base = tmp_path / "base"
    _tiny_rolling_model().save_pretrained(base)

    def cfg(out, **kw):
        return TrainConfig(**{**dict(stage="decoder", data=str(root), out=str(out), init_from=str(base), steps=4,
                                     batch_size=2, log_every=1, checkpoint_every=2, sample_every=-1, progress=False,
                                     warmup=1, lr=3e-3), **fixed, **kw})

    return root, base, cfg


def test_decoder_stage_learns_from_the_models_rollouts(dataset, tmp_path):
    """``--rollout-share``: the decoder stage decodes the DiT's own latents; only the decoder moves, the recipe
    says so, and a resume with another share is refused."""
    import torch

    from neuralsim.world_model.latents import LatentStore
    from neuralsim.world_model.model import WorldModel
    from neuralsim.world_model.rollouts import ROLLOUT_CACHE_DIR, RolloutLatents
    from neuralsim.world_model.train import decoder_batch, train

    root, base, cfg = _decoder_stage(dataset, tmp_path, rollout_share=1.0)

    for bad, match in ((dict(rollout_share=1.5), r"\[0, 1\]"),
                       (dict(stage="dit", objective="step_forcing"), "option of the decoder stage"),
                       (dict(data="synthetic:4"), "needs episodes to roll out")):
        with pytest.raises(ValueError, match=match):
            train(cfg(tmp_path / "bad", **bad))
    out = tmp_path / "dec"
    train(cfg(out, steps=2))
    assert list((root / ROLLOUT_CACHE_DIR).glob("*/episode_*.npz"))
    with pytest.raises(ValueError, match="rollout_share 1.0; refusing to resume it with 0.5"):
        train(cfg(out, rollout_share=0.5))
    train(cfg(out))  # resumes, reusing the rolled-out latents
    a, b = WorldModel.from_pretrained(base), WorldModel.from_pretrained(out / "model")
    changed = {k for (k, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()) if not torch.equal(x, y)}
    decoder = ("autoencoder.vae.decoder.", "autoencoder.vae.post_quant_conv.")
    assert changed and all(k.startswith(decoder) for k in changed)
    stage = b.config.recipe["stages"][-1]
    assert stage["rollout_share"] == 1.0 and stage["rollout_window"] == a.config.window and stage["steps_run"] == 4
    assert stage["rollout_seed"] == 0

    # the rollouts follow the run's seed: another seed rolls out anew, a resume with another is refused
    cached = sorted((root / ROLLOUT_CACHE_DIR).iterdir())
    train(cfg(tmp_path / "seed7", seed=7, steps=2))
    assert len(sorted((root / ROLLOUT_CACHE_DIR).iterdir())) == len(cached) + 1
    assert WorldModel.from_pretrained(tmp_path / "seed7" / "model").config.recipe["stages"][-1]["rollout_seed"] == 7
    with pytest.raises(ValueError, match="rollouts used seed 7"):
        train(cfg(tmp_path / "seed7", seed=3))

    # the pairs: with share 1 every latent is the rollout's latent of the frame beside it, with share 0 the store's
    ds = ClipDataset(root, clip_length=6, image_size=16)
    store = LatentStore(a.autoencoder, ds, progress=False)
    roll = RolloutLatents(a, store, seed=0, progress=False)
    idx = [0, len(ds) - 1]
    for share, source in ((1.0, roll), (0.0, store)):
        z, frames = decoder_batch(store, ds, idx, 16, 3, torch.Generator().manual_seed(5), "cpu", roll, share)
        fi = torch.randint(6, (2, 3), generator=torch.Generator().manual_seed(5))
        want = source.get(idx, "cpu")[0][torch.arange(2)[:, None], fi].flatten(0, 1)
        assert torch.equal(z, want) and frames.shape[0] == 6


def test_decoder_stage_trains_a_reference_head_on_each_episodes_first_frame(dataset, tmp_path):
    """``neuralsim model edit --reference-head W`` then ``--head-only``: only the fresh head trains, each pair
    carrying its episode's first frame; the recipe says so; misuse and a resume without ``head_only`` are refused."""
    import torch

    from neuralsim.world_model.edit import EditConfig, edit_model
    from neuralsim.world_model.model import WorldModel
    from neuralsim.world_model.train import decoder_references, train

    root, base, cfg = _decoder_stage(dataset, tmp_path)
    for bad, match in ((dict(head_only=True), "needs a model with a reference head"),
                       (dict(change_weight=5.0), "needs a model with a reference head"),
                       (dict(change_weight=-1.0), "must be >= 0"), (dict(init_from=None), "give init_from"),
                       (dict(stage="dit", objective="step_forcing", head_only=True), "option of the decoder stage")):
        with pytest.raises(ValueError, match=match):
            train(cfg(tmp_path / "bad", **bad))
    headed = tmp_path / "headed"
    edit_model(EditConfig(checkpoint=str(base), out=str(headed), reference_head=8))
    with pytest.raises(ValueError, match="trains on episodes"):
        train(cfg(tmp_path / "bad", init_from=str(headed), head_only=True, data="synthetic:4"))
    out = tmp_path / "dec"
    train(cfg(out, steps=2, init_from=str(headed), head_only=True, change_weight=4.0))
    with pytest.raises(ValueError, match="head_only True; refusing to resume it with False"):
        train(cfg(out, init_from=str(headed), change_weight=4.0))
    train(cfg(out, init_from=str(headed), head_only=True, change_weight=4.0))  # resumes
    a, b = WorldModel.from_pretrained(headed), WorldModel.from_pretrained(out / "model")
    assert b.config.autoencoder.reference_head_channels == 8 and b.config.recipe["stages"][-1]["head_only"]
    assert b.config.recipe["stages"][-1]["change_weight"] == 4.0
    assert b.config.recipe["edits"] == [{"reference_head": 8}]
    shared, trained = a.state_dict(), b.state_dict()
    moved = {k for k in trained if not torch.equal(trained[k], shared[k])}
    assert moved and all(k.startswith("autoencoder.ref_head.") for k in moved)  # the decoder frozen

    # without head_only the decoder and the head train together
    both = tmp_path / "both"
    train(cfg(both, init_from=str(out / "model"), steps=2))
    c = WorldModel.from_pretrained(both / "model").state_dict()
    moved = {k for k in c if not torch.equal(c[k], trained[k])}
    assert any(k.startswith("autoencoder.ref_head.") for k in moved)
    assert any(k.startswith("autoencoder.vae.decoder.") for k in moved)

    # the references: each pair's episode's frame 0 (clip-major), and its latents as the env's reset encodes them
    ds = ClipDataset(root, clip_length=6, image_size=16)
    idx = [0, len(ds) - 1]
    views, lat = decoder_references(a, ds, idx, 3, 16, "cpu")
    assert views.shape == (6, 3, 16, 16, 3) and lat.shape[:2] == (6, 3)
    for j, i in enumerate(idx):
        pos, _ = ds.windows[i]
        first = torch.from_numpy(np.array(ds.episode(pos).frames[0]))
        assert all(torch.equal(views[3 * j + k], first) for k in range(3))
        torch.testing.assert_close(lat[3 * j], a.autoencoder.encode(first))
    assert ds.windows[idx[0]][0] != ds.windows[idx[1]][0]  # two episodes, two references


def test_perturbed_episodes_replay_the_clean_experts_actions_through_the_wrapper(tmp_path):
    """``perturbation=``: the clean expert to the horizon, its actions replayed through the wrapper; the episode
    holds the actions the wrapper sent, whose plain SimDROID replay gives the recorded labels; misuse is named."""
    from neuralsim.data.generate import perturbation_for, replay_actions
    from neuralsim.envs.sim_droid import SimDROIDEnv
    from neuralsim.wrappers import PERTURBATIONS

    common = dict(seed=6000000, families=["put_in_bowl"], max_steps=120, image_size=32, progress=False,
                  frames_format="npy")
    summary = generate(tmp_path / "pr", 2, perturbation="premature_release", **common)
    assert summary.failed_by_mode == {"perturbation:premature_release": (2, 2)}
    env = SimDROIDEnv(image_size=32, reward_fn=None)
    try:
        for rec in list_episodes(tmp_path / "pr"):
            assert rec["perturbation"] == "premature_release" and rec["severity"] == 0.5 and rec["failure"] is None
            assert rec["perturbation_fired"] and rec["clean_success"] and not rec["success"]
            ep = read_episode(tmp_path / "pr", rec["episode_index"])
            assert ep.actions.shape == (120, 8)
            truth, fired = replay_actions(env, rec["seed"], "put_in_bowl", ep.actions)  # no wrapper this time
            assert not fired and truth.info["success"] == rec["success"]
            assert int(truth.info["rubric_level"]) == rec["rubric_level"]
    finally:
        env.close()
    # "all": each episode's family is drawn among those that apply to its task, by its seed
    generate(tmp_path / "all", 3, perturbation="all", **{**common, "families": ["stack"], "max_steps": 40})
    fams = [rec["perturbation"] for rec in list_episodes(tmp_path / "all")]
    assert all("stack" in PERTURBATIONS[f].task_families for f in fams)
    assert fams == [perturbation_for(plan_episode(i, 6000000, ["stack"], 0.0, (0.0, 0.3)), "all") for i in range(3)]
    # the perturbation and its severity are part of the dataset's identity; misuse is named
    with pytest.raises(GenerationMismatchError, match="severity"):
        generate(tmp_path / "pr", 2, perturbation="premature_release", severity=0.8, **common)
    with pytest.raises(GenerationMismatchError, match="perturbation"):
        generate(tmp_path / "pr", 2, **common)
    for kw, match in ((dict(perturbation="gravity_flip"), "unknown perturbation"),
                      (dict(perturbation="all", actor="idle"), "needs actor 'expert'"),
                      (dict(perturbation="all", severity=1.5), r"severity must be in \[0, 1\]")):
        with pytest.raises(ValueError, match=match):
            generate(tmp_path / "bad", 1, **{**common, **kw})
    unfit = next(f for f, cls in PERTURBATIONS.items() if "push_to_pad" not in cls.task_families)
    with pytest.raises(ValueError, match="restrict the task families"):
        generate(tmp_path / "bad", 1, perturbation=unfit, **{**common, "families": ["push_to_pad"]})


def test_object_state_columns_match_the_simulators_own_state(dataset):
    """Each frame's recorded cube poses and held / touched cube are SimDROID's own state at that frame."""
    from neuralsim.data.reader import load_episode
    from neuralsim.envs.experts import ScriptedExpert
    from neuralsim.envs.sim_droid import SimDROIDEnv

    rec = list_episodes(dataset)[0]
    objects = load_episode(dataset, rec).objects
    assert objects is not None and objects.names == rec["objects"] and len(objects.names) == 3
    assert objects.pose.shape == (rec["length"], 3, 7) and objects.held.shape == (rec["length"],)
    info = read_info(dataset)
    assert info["features"]["ground_truth.object_pose"]["shape"] == [21]
    plan = plan_episode(0, PARAMS["seed"], PARAMS["families"], PARAMS["failure_share"], PARAMS["noise"])
    env = SimDROIDEnv(reward_fn=None)
    expert = ScriptedExpert(env, noise=plan.noise, failure=plan.failure, seed=plan.seed)
    obs, info = env.reset(seed=plan.seed, options={"task": plan.family})
    expert.reset()
    poses, held = [], []
    for t in range(rec["length"]):
        poses.append([np.concatenate([env.cube_position(i), env.cube_quat(i)]) for i in range(3)])
        held.append(-1 if info["grasped_object"] is None else objects.names.index(info["grasped_object"]))
        if t < rec["length"] - 1:
            obs, _, _, _, info = env.step(expert.act(obs))
    env.close()
    poses = np.asarray(poses, np.float32)
    for t in (0, len(poses) // 2, len(poses) - 1):
        np.testing.assert_allclose(objects.pose[t], poses[t], atol=1e-6, err_msg=f"frame {t}")
    np.testing.assert_array_equal(objects.held, held)
    assert set(np.unique(objects.touched)) <= {-1, 0, 1, 2}


def test_a_dataset_without_object_state_still_reads(dataset, tmp_path):
    """Datasets written before the object-state columns load; their object state is absent (None), not zeros."""
    import shutil

    import pyarrow as pa

    from neuralsim.data.reader import OBJECT_STATE_COLUMNS, load_episode, read_object_state
    from neuralsim.data.writer import write_records

    old = tmp_path / "old"
    shutil.copytree(dataset, old)
    path = old / "data" / "episode_000000.parquet"
    table = pq.read_table(path)
    pq.write_table(pa.table({c: table.column(c) for c in table.column_names if c not in OBJECT_STATE_COLUMNS}), path)
    recs = list_episodes(old)
    recs[0] = {k: v for k, v in recs[0].items() if k != "objects"}
    write_records(old, recs)
    assert read_object_state(old, recs[0]) is None
    ep = load_episode(old, recs[0])
    assert ep.objects is None and len(ep) == recs[0]["length"]
    assert load_episode(old, recs[1]).objects is not None  # the other episode kept its columns


def test_contact_phases_and_the_carrying_a_dataset_holds(dataset, capsys):
    """Each frame's contact phase follows a pick's order; ``neuralsim data info`` counts them over the dataset."""
    from neuralsim.cli import main
    from neuralsim.data.reader import ObjectState, read_object_state

    held = np.array([-1, -1, -1, 0, 0, -1, -1, -1])
    touched = np.array([-1, -1, 0, 0, 0, 0, -1, 1])
    state = ObjectState(["a", "b"], np.zeros((8, 2, 7), np.float32), held, touched)
    assert state.contact_phases().tolist() == ["before", "before", "contact", "carry", "carry", "contact", "after",
                                               "contact"]
    assert state[:0].contact_phases().tolist() == []

    assert main(["data", "info", str(dataset)]) == 0
    out = capsys.readouterr().out
    recs = list_episodes(dataset)
    phases = np.concatenate([read_object_state(dataset, r).contact_phases() for r in recs])
    carry = int((phases == "carry").sum())
    assert f"carry {carry} ({100 * carry / len(phases):.1f}%)" in out
    holds = sum(bool((read_object_state(dataset, r).held >= 0).any()) for r in recs)
    assert f"{holds}/{len(recs)} episodes hold a cube" in out
