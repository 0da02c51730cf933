"""Object state inside the model (``DiTConfig.num_objects``): a model without it computes what it did before the
option existed; object tokens round-trip through save/load and the KV cache; training, the reset reader, model edit
and the env's belief."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from neuralsim.world_model.config import WorldModelConfig, preset
from neuralsim.world_model.model import WorldModel
from neuralsim.world_model.sampler import euler_step, sample_frame

from .conftest import conds, latents, randomise

BEFORE = Path(__file__).parent / "data" / "before_object_state.json"
K = 2


def _close_to(t: torch.Tensor, rec: dict) -> None:
    """``t`` against a record of the code before object state (:data:`BEFORE`): its sum, absolute sum and 64 values
    spread over it.  Bit for bit on the machine that recorded them; 1e-5 leaves room for another CPU's kernels."""
    f = t.detach().double().flatten()
    idx = torch.linspace(0, f.numel() - 1, 64).round().long()
    assert f[idx].tolist() == pytest.approx(rec["values"], rel=1e-5, abs=1e-5)
    assert float(f.sum()) == pytest.approx(rec["sum"], rel=1e-5, abs=1e-4)
    assert float(f.abs().sum()) == pytest.approx(rec["abs_sum"], rel=1e-5)


def test_a_model_without_object_state_computes_what_it_did_before_the_option():
    """Recorded with the code before ``num_objects`` existed: a fresh tiny model's initial weights, its forward,
    its generate/observe rollout, both objectives' losses and the shipped checkpoint's first latents."""
    from neuralsim.world_model.objectives import diffusion_forcing_loss, step_forcing_loss

    from .test_checkpoint_format import SHIPPED

    rec = json.loads(BEFORE.read_text())
    torch.manual_seed(0)
    wm = WorldModel(preset("tiny")).eval()
    assert "num_objects" not in wm.config.to_dict()["dit"]  # its config.json is written as before
    sums = {k: float(v.double().sum()) for k, v in wm.state_dict().items()}
    assert sums.keys() == rec["tiny_fresh_state_sum"].keys()
    assert list(sums.values()) == pytest.approx(list(rec["tiny_fresh_state_sum"].values()), rel=1e-6, abs=1e-6)
    randomise(wm.dit, 0)
    x, c = latents(wm.config, 2, 5), conds(2, 5)
    t = torch.rand(2, 5, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        _close_to(wm.dit(x, t, c), rec["tiny_forward"])
    state = wm.new_state(2, window=3)
    views = torch.randint(0, 256, (2, 3, 16, 16, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(9))
    wm.reset(state, None, views, conds(2, seed=11))
    frames = []
    for n in range(5):
        if n == 2:
            wm.observe(state, latents(wm.config, 2, seed=50), conds(2, seed=51))
        frames.append(wm.generate(state, latents(wm.config, 2, seed=100 + n), conds(2, seed=200 + n)))
    _close_to(torch.stack(frames), rec["tiny_generate"])

    ship = WorldModel.from_pretrained(SHIPPED).eval()
    state = ship.new_state(1)
    with np.load("neuralsim/assets/episodes/default.npz", allow_pickle=False) as f:
        v0 = torch.from_numpy(f["views"][:1])
    from neuralsim import kinematics as Kin

    def cond(i):
        q = Kin.RESET_JOINT_POSITION + 0.02 * i * np.array([1, -1, 1, 0.5, -0.5, 1, 0])
        return torch.tensor(np.concatenate([Kin.forward_kinematics(q), [min(1.0, 0.1 * i)]])[None],
                            dtype=torch.float32)

    ship.reset(state, [0], v0, cond(0))
    g = torch.Generator().manual_seed(0)
    _close_to(torch.stack([ship.step_latents(state, cond(i), g) for i in range(1, 5)]), rec["shipped_step_latents"])

    torch.manual_seed(0)
    wm2 = WorldModel(preset("tiny"))
    randomise(wm2.dit, 4)
    z, cc = latents(wm2.config, 2, 6), conds(2, 6)
    sf, _ = step_forcing_loss(wm2.dit, z, cc, wm2.config.schedule, torch.Generator().manual_seed(5))
    df, _ = diffusion_forcing_loss(wm2.dit, z, cc, wm2.config.schedule, torch.Generator().manual_seed(6))
    assert [float(sf.detach()), float(df.detach())] == pytest.approx(rec["losses"], rel=1e-6)


# ----------------------------------------------------------------------------- a tiny model with objects
def object_config(base: str = "tiny", k: int = K) -> WorldModelConfig:
    d = preset(base).to_dict()
    d["dit"]["num_objects"] = k
    return WorldModelConfig.from_dict(d)


def _with_objects(seed: int = 0, base: str = "tiny") -> WorldModel:
    torch.manual_seed(seed)
    wm = WorldModel(object_config(base))
    randomise(wm.dit, seed)
    with torch.no_grad():
        wm.object_mean.copy_(torch.tensor([0.5, 0.0, 0.03, 0.9, 0.0, 0.0, 0.1]))
        wm.object_std.copy_(torch.tensor([0.1, 0.1, 0.02, 0.1, 0.05, 0.05, 0.3]))
    return wm.eval()


def objects(*lead: int, seed: int = 3) -> torch.Tensor:
    return torch.randn(*lead, K, 7, generator=torch.Generator().manual_seed(seed))


def _recompute_frame(dit, history, hist_obj, hist_cond, noise, obj_noise, cond, schedule, window, num_sink):
    """Reference: every pass recomputes the whole history (clean, t = 0) and its objects with the banded mask."""
    ts = [0.0] + list(schedule)
    x, o = noise, obj_noise
    n = history.shape[1]
    for k in range(len(ts) - 1, 0, -1):
        seq, oseq = torch.cat([history, x[:, None]], dim=1), torch.cat([hist_obj, o[:, None]], dim=1)
        t = torch.zeros(seq.shape[:2])
        t[:, -1] = ts[k]
        v, vo = dit(seq, t, torch.cat([hist_cond, cond[:, None]], dim=1), window=window, num_sink=num_sink,
                    objects=oseq)
        x, o = euler_step(x, v[:, n], ts[k], ts[k - 1]), euler_step(o, vo[:, n], ts[k], ts[k - 1])
    return x, o


@pytest.mark.parametrize("base", ["tiny", "tiny_grounded"])
@pytest.mark.parametrize("window,num_sink", [(4, 0), (3, 1)])
def test_cached_generation_with_objects_equals_full_recompute(base, window, num_sink):
    """WorldModel.generate (fused pending commit) and observe carry the objects through the KV cache: every frame
    and its objects equal the full causal DiT over the whole history, before and after the window slides."""
    wm = _with_objects(base=base)
    dit, cfg = wm.dit, wm.config
    assert cfg.dit.tokens_per_frame == cfg.dit.image_tokens_per_frame + K
    B, steps = 2, 3 * window + 1
    state = wm.new_state(B, window=window, num_sink=num_sink)
    s = cfg.autoencoder.image_size
    views = torch.randint(0, 256, (B, 3, s, s, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(9))
    c0, poses0 = conds(B, seed=11) * 0.1, wm.denormalise_objects(objects(B, seed=12))
    wm.reset(state, None, views, c0, objects=poses0)
    frames, objs, cs = [wm.encode(views)], [wm.normalise_objects(poses0)], [c0]
    torch.testing.assert_close(wm.object_poses(state), poses0, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        for n in range(1, steps):
            noise, on, c = latents(cfg, B, seed=100 + n), objects(B, seed=300 + n), conds(B, seed=200 + n) * 0.1
            if n == 4:  # teacher forcing: a given frame and given objects
                given, given_poses = latents(cfg, B, seed=7), wm.denormalise_objects(objects(B, seed=8))
                wm.observe(state, given, c, objects=given_poses)
                frames.append(given)
                objs.append(wm.normalise_objects(given_poses))
                cs.append(c)
                continue
            ref, ref_o = _recompute_frame(dit, torch.stack(frames, 1), torch.stack(objs, 1), torch.stack(cs, 1),
                                          noise, on, c, cfg.schedule, window, num_sink)
            out = wm.generate(state, noise, c, object_noise=on)
            assert torch.allclose(out, ref, atol=1e-4, rtol=1e-4), f"frame {n}: {(out - ref).abs().max()}"
            assert torch.allclose(state.pending_objects, ref_o, atol=1e-4, rtol=1e-4), f"frame {n} objects"
            frames.append(out)
            objs.append(ref_o)
            cs.append(c)


def test_separate_commit_sampling_with_objects_equals_full_recompute():
    """sample_frame (a separate commit pass) with objects: the same frames as the full forward."""
    wm = _with_objects(1)
    dit, cfg, B, W = wm.dit, wm.config, 2, 4
    state = wm.new_state(B, window=W)
    frames, objs, cs = [latents(cfg, B, seed=1)], [objects(B, seed=2)], [conds(B, seed=3)]
    with torch.no_grad():
        dit.commit(frames[0], cs[0], dit.read_cache(state.cache), state.cache, objects=objs[0])
        for n in range(1, 2 * W):
            noise, on, c = latents(cfg, B, seed=100 + n), objects(B, seed=300 + n), conds(B, seed=200 + n)
            ref, ref_o = _recompute_frame(dit, torch.stack(frames, 1), torch.stack(objs, 1), torch.stack(cs, 1),
                                          noise, on, c, cfg.schedule, W, 0)
            out, out_o = sample_frame(dit, noise, cfg.schedule, c, state.cache, object_noise=on)
            torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(out_o, ref_o, atol=1e-4, rtol=1e-4)
            frames.append(out)
            objs.append(out_o)
            cs.append(c)


def test_object_tokens_are_read_by_the_image_tokens_and_stay_causal():
    """Changing frame j's objects changes frame j's image velocity (the spatial attention reads them) and never an
    earlier frame's; a DiT with objects refuses to run without them."""
    wm = _with_objects(2)
    x, c, o = latents(wm.config, 1, 5), conds(1, 5), objects(1, 5)
    t = torch.full((1, 5), 0.5)
    with torch.no_grad():
        v, vo = wm.dit(x, t, c, objects=o)
        o2 = o.clone()
        o2[:, 3] += 1.0
        v2, vo2 = wm.dit(x, t, c, objects=o2)
    assert torch.equal(v[:, :3], v2[:, :3]) and torch.equal(vo[:, :3], vo2[:, :3])
    assert not torch.allclose(v[:, 3], v2[:, 3])
    with pytest.raises(ValueError, match="carries 2 objects"):
        wm.dit(x, t, c)
    with pytest.raises(ValueError, match="no object state"):
        _plain().dit(x, t, c, objects=o)


def _plain() -> WorldModel:
    torch.manual_seed(0)
    return WorldModel(preset("tiny")).eval()


def test_object_model_round_trips_through_save_and_load(tmp_path):
    wm = _with_objects(3)
    wm.save_pretrained(tmp_path / "m")
    assert json.loads((tmp_path / "m" / "config.json").read_text())["dit"]["num_objects"] == K
    back = WorldModel.from_pretrained(tmp_path / "m")
    assert back.config.to_dict() == wm.config.to_dict()
    sd, back_sd = wm.state_dict(), back.state_dict()
    assert sd.keys() == back_sd.keys() and {"dit.object_mean", "dit.object_std", "dit.object_out.weight"} <= set(sd)
    for k in sd:
        assert torch.equal(sd[k], back_sd[k]), k
    x, c, o = latents(wm.config, 1, 3), conds(1, 3), objects(1, 3)
    t = torch.full((1, 3), 0.5)
    with torch.no_grad():
        a, b = wm.dit(x, t, c, objects=o), back.dit(x, t, c, objects=o)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_grounded_objects_project_like_the_hand():
    """An object at the tool point's world position gets the tool point's own per-token features (exterior views
    and the wrist view, which goes through the flange pose); a grounded model's image tokens see where the objects
    are."""
    from neuralsim import kinematics as Kin
    from neuralsim.world_model.grounding import FEATURES_PER_POINT, ViewProjector, scene_geometry

    projector = ViewProjector(scene_geometry("legible"), grid=4)
    q = torch.as_tensor(Kin.RESET_JOINT_POSITION, dtype=torch.float32) + 0.2
    cond = torch.cat([Kin.forward_kinematics(q), torch.tensor([0.3])])[None]  # (1, 7)
    hand = projector(cond).view(1, 48, -1, FEATURES_PER_POINT)  # (1, N, P, F)
    tool = Kin.tool_pose(q.double().numpy())[0]
    at_tool = projector.object_features(cond, torch.tensor(tool, dtype=torch.float32)[None, None])
    torch.testing.assert_close(at_tool, hand[:, :, 0], atol=1e-4, rtol=1e-4)
    wm = _with_objects(4, base="tiny_grounded")
    x, c, o = latents(wm.config, 1, 3), conds(1, 3) * 0.1, objects(1, 3)
    t = torch.full((1, 3), 0.5)
    o2 = o.clone()
    o2[..., :3] += 0.5
    with torch.no_grad():
        a, b = wm.dit(x, t, c, objects=o)[0], wm.dit(x, t, c, objects=o2)[0]
        wm.dit.blocks[0].object_gate.zero_(), wm.dit.blocks[1].object_gate.zero_()  # no attention path to them
        a0, b0 = wm.dit(x, t, c, objects=o)[0], wm.dit(x, t, c, objects=o2)[0]
    assert not torch.allclose(a, b) and not torch.allclose(a0, b0)  # the projection alone moves the image tokens


def test_object_normalisation_round_trips_and_takes_w_positive():
    wm = _with_objects()
    q = torch.nn.functional.normalize(torch.randn(5, K, 4, generator=torch.Generator().manual_seed(0)), dim=-1)
    poses = torch.cat([torch.rand(5, K, 3), q], dim=-1)
    back = wm.denormalise_objects(wm.normalise_objects(poses))
    torch.testing.assert_close(back[..., :3], poses[..., :3], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(back[..., 3:], q * torch.sign(q[..., :1]), atol=1e-6, rtol=1e-6)
    assert (back[..., 3] >= 0).all()


# ----------------------------------------------------------------------------- training
def _train_cfg(out, **kw):
    from neuralsim.world_model.train import TrainConfig

    base = dict(stage="dit", objective="step_forcing", data="synthetic:8:2", out=str(out), config="tiny",
                num_objects=K, steps=3, batch_size=2, log_every=1, checkpoint_every=100, sample_every=-1,
                progress=False, warmup=2)
    return TrainConfig(**{**base, **kw})


def _metrics(out) -> list[dict]:
    return [r for r in map(json.loads, (Path(out) / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A tiny model with 2 objects, 150 Diffusion Forcing steps (batch 16) on 1024 synthetic clips with objects."""
    from neuralsim.world_model.train import train

    out = tmp_path_factory.mktemp("objects") / "run"
    torch.set_num_threads(1)
    train(_train_cfg(out, objective="diffusion_forcing", data="synthetic:1024:2", steps=150, batch_size=16,
                     lr=3e-3, warmup=5))
    return out


def test_a_tiny_model_with_objects_trains_and_its_object_loss_falls(trained):
    rows = _metrics(trained)
    assert len(rows) == 150 and {"loss_image", "loss_object", "loss_object_reader"} <= set(rows[0])
    for r in rows:
        assert r["loss"] == pytest.approx(r["loss_image"] + r["loss_object"] + r["loss_object_reader"], rel=1e-5)
    first, last = (float(np.mean([r["loss_object"] for r in part])) for part in (rows[:10], rows[-10:]))
    assert last < 0.5 * first, (first, last)  # measured: 1.6 -> 0.2
    wm = WorldModel.from_pretrained(trained / "model")
    assert wm.config.recipe["object_stats_fitted"] and wm.config.recipe["stages"][-1]["num_objects"] == K
    assert wm.object_std[:2].min() > 0.1  # fitted: the synthetic objects spread over about +-0.7
    assert wm.dit.object_out.weight.abs().sum() > 0  # the zero head learned


def test_reset_infers_object_state_from_the_first_frame_within_a_stated_error(trained):
    """The object reader, trained beside the DiT on each clip's first frame, on 128 held-out synthetic clips: its
    position error (under the best matching of objects) is well below that of predicting the training mean.

    Measured on the tiny model (16x16 views, an untrained autoencoder, 150 steps): 0.32 synthetic units (1.8 px of
    the 16 px view, an object being 3.2 px wide) against 0.55 for the mean; 300 steps: 0.23.  A reset from images
    through the env uses exactly this reader."""
    import itertools

    from neuralsim.world_model.synthetic import SyntheticClipDataset

    wm = WorldModel.from_pretrained(trained / "model")
    ds = SyntheticClipDataset(num_clips=1024 + 128, clip_length=6, image_size=16, num_objects=K)
    items = [ds[i] for i in range(1024, 1024 + 128)]  # clips the model never saw
    views = torch.stack([it["frames"][0] for it in items])
    true = torch.stack([it["object_pose"][0] for it in items])
    state = wm.new_state(len(items))
    wm.reset(state, None, views, torch.zeros(len(items), 7))  # no poses given: the reader infers them
    pred = wm.object_poses(state)

    def error(p):
        per = [(p[:, list(q), :2] - true[:, :, :2]).norm(dim=-1).mean(-1) for q in itertools.permutations(range(K))]
        return float(torch.stack(per).min(0).values.mean())

    reader, mean = error(pred), error(wm.object_mean[:3].expand(len(items), K, 3))
    assert reader < 0.7 * mean, (reader, mean)
    assert reader < 0.45


@pytest.fixture(scope="module")
def simdroid_data(tmp_path_factory) -> Path:
    """Two short legible SimDROID episodes at 16x16 (2 cubes with recorded poses)."""
    from neuralsim.data.generate import generate

    root = tmp_path_factory.mktemp("simdroid_objects")
    generate(root, 2, seed=3, max_steps=12, image_size=16, progress=False, frames_format="npy", scene="legible",
             families=["put_in_bowl"], settle_steps=0)
    return root


def test_step_forcing_with_objects_trains_on_simdroid_data_and_a_model_without_them_still_does(simdroid_data,
                                                                                               tmp_path):
    from neuralsim.world_model.train import train

    train(_train_cfg(tmp_path / "objects", data=str(simdroid_data)))
    rows = _metrics(tmp_path / "objects")
    assert len(rows) == 3 and all(np.isfinite(r["loss_object"]) for r in rows)
    wm = WorldModel.from_pretrained(tmp_path / "objects" / "model")
    assert wm.config.scene == "legible" and 0.4 < float(wm.object_mean[0]) < 0.7  # the cubes' x [m]
    train(_train_cfg(tmp_path / "plain", data=str(simdroid_data), num_objects=0))  # the poses are simply not used
    assert "loss_object" not in _metrics(tmp_path / "plain")[0]
    # a stage asking for object state on a model without it gives it fresh ones (as `model edit --objects` does)
    train(_train_cfg(tmp_path / "more", data=str(simdroid_data), init_from=str(tmp_path / "plain" / "model")))
    more = WorldModel.from_pretrained(tmp_path / "more" / "model")
    assert more.config.dit.num_objects == K and more.config.recipe["object_stats_fitted"]
    with pytest.raises(ValueError, match="carries 2 objects"):
        train(_train_cfg(tmp_path / "x", data=str(simdroid_data), init_from=str(tmp_path / "more" / "model"),
                         num_objects=3))
    train(_train_cfg(tmp_path / "plain_synthetic", num_objects=0))
    assert "num_objects" not in json.loads((tmp_path / "plain_synthetic" / "model" / "config.json").read_text())["dit"]


def test_the_object_loss_weight_weighs_both_object_terms(simdroid_data, tmp_path):
    from neuralsim.world_model.train import train

    train(_train_cfg(tmp_path / "w", data=str(simdroid_data), object_loss_weight=0.25))
    for r in _metrics(tmp_path / "w"):
        assert r["loss"] == pytest.approx(r["loss_image"] + 0.25 * (r["loss_object"] + r["loss_object_reader"]),
                                          rel=1e-5)
    with pytest.raises(ValueError, match="object_loss_weight"):
        _train_cfg(tmp_path / "x", object_loss_weight=-1.0)


def test_the_decoder_stage_of_a_model_with_objects_needs_no_poses_and_rolls_out(simdroid_data, tmp_path):
    """Only the DiT stage reads the poses: a decoder stage trains on data without them, and on the model's own
    rollouts (the object reader starts each episode's objects, the DiT carries them)."""
    from neuralsim.world_model.train import train

    train(_train_cfg(tmp_path / "dit", data=str(simdroid_data), steps=2))
    model = str(tmp_path / "dit" / "model")
    assert train(_train_cfg(tmp_path / "dec", stage="decoder", data="synthetic:4", steps=1, num_objects=None,
                            init_from=model))["step"] == 1
    assert train(_train_cfg(tmp_path / "roll", stage="decoder", data=str(simdroid_data), steps=1, num_objects=None,
                            init_from=model, rollout_share=0.5))["step"] == 1


def test_a_model_with_objects_on_data_without_poses_is_refused_naming_the_data(simdroid_data, tmp_path,
                                                                              monkeypatch):
    """Data recorded before the object-state columns (the reader gives no object state: tests/data) or synthetic
    clips without objects: the run stops before its first step, naming the data."""
    from neuralsim.data import reader
    from neuralsim.world_model.batches import ObjectStateMissing
    from neuralsim.world_model.train import train

    with pytest.raises(ObjectStateMissing, match="SyntheticClipDataset item .* records no object poses"):
        train(_train_cfg(tmp_path / "b", data="synthetic:8"))
    monkeypatch.setattr(reader, "read_object_state", lambda root, record: None)
    with pytest.raises(ObjectStateMissing, match=f"dataset '{simdroid_data}' .*records no object poses"):
        train(_train_cfg(tmp_path / "a", data=str(simdroid_data)))
    assert not (tmp_path / "a" / "metrics.jsonl").exists()


# ----------------------------------------------------------------------------- model edit, env
@pytest.mark.parametrize("base", ["tiny", "tiny_grounded"])
def test_model_edit_adds_object_state_without_changing_the_image_predictions(tmp_path, base):
    from neuralsim.world_model.edit import EditConfig, edit_model
    from neuralsim.world_model.info import checkpoint_info, format_checkpoint_info

    torch.manual_seed(0)
    plain = WorldModel(preset(base)).eval()
    randomise(plain.dit, 2)
    plain.save_pretrained(tmp_path / "plain")
    edit_model(EditConfig(checkpoint=str(tmp_path / "plain"), out=str(tmp_path / "objects"), objects=K))
    back = WorldModel.from_pretrained(tmp_path / "objects")
    assert back.config.dit.num_objects == K and back.config.recipe["edits"][-1] == {"objects": K}
    x, c, t = latents(plain.config, 2, 4), conds(2, 4) * 0.1, torch.full((2, 4), 0.6)
    with torch.no_grad():
        want = plain.dit(x, t, c)
        v, vo = back.dit(x, t, c, objects=objects(2, 4))
    torch.testing.assert_close(v, want, atol=1e-6, rtol=1e-6)  # the image tokens' gate on the objects is zero
    assert torch.equal(vo, torch.zeros_like(vo))  # and the fresh object head predicts no motion
    # rolled out through the cache, the frames are the plain model's too
    s_plain, s_obj = plain.new_state(2, window=3), back.new_state(2, window=3)
    views = torch.randint(0, 256, (2, 3, 16, 16, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    plain.reset(s_plain, None, views, conds(2, seed=2) * 0.1)
    back.reset(s_obj, None, views, conds(2, seed=2) * 0.1)
    for n in range(4):
        noise, cn = latents(plain.config, 2, seed=10 + n), conds(2, seed=20 + n) * 0.1
        torch.testing.assert_close(back.generate(s_obj, noise, cn), plain.generate(s_plain, noise, cn), atol=1e-5,
                                   rtol=1e-5)
    assert "object state: 2 object tokens per frame" in format_checkpoint_info(checkpoint_info(tmp_path / "objects"))
    edit_model(EditConfig(checkpoint=str(tmp_path / "objects"), out=str(tmp_path / "removed"), objects=0))
    removed = WorldModel.from_pretrained(tmp_path / "removed")
    assert removed.state_dict().keys() == plain.state_dict().keys()
    with torch.no_grad():
        assert torch.equal(removed.dit(x, t, c), want)


@pytest.fixture
def env_checkpoint(tmp_path) -> Path:
    """A tiny classic-scene model carrying the classic scene's 3 cubes (random DiT weights)."""
    torch.manual_seed(0)
    wm = WorldModel(object_config(k=3))
    randomise(wm.dit, 5)
    with torch.no_grad():
        wm.object_mean.copy_(torch.tensor([0.53, 0.0, 0.025, 0.7, 0.0, 0.0, 0.0]))
        wm.object_std.copy_(torch.tensor([0.1, 0.15, 0.01, 0.2, 0.05, 0.05, 0.5]))
    return wm.save_pretrained(tmp_path / "objects")


def test_the_env_reports_the_models_object_belief(env_checkpoint, tiny_checkpoint, one_torch_thread):
    import warnings

    import gymnasium as gym
    from gymnasium.utils.env_checker import check_env

    from neuralsim.envs.episodes import EpisodeSpec, default_episodes
    from neuralsim.envs.neural_droid import NeuralDROIDEnv, NeuralDROIDVectorEnv

    env = gym.make("NeuralDROID-v0", checkpoint=str(env_checkpoint), reward_fn=None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    assert [str(w.message) for w in caught] == []
    spec = default_episodes("classic")["put_in_bowl_1000000"]
    truth = np.stack([np.asarray(v, np.float32) for n, v in spec.metadata["object_poses"].items()
                      if n.endswith("_cube")])
    obs, info = env.reset(seed=0, options={"episode": spec.name})
    assert info["object_poses"].shape == (3, 7) and info["object_poses"].dtype == np.float32
    np.testing.assert_allclose(info["object_poses"][:, :3], truth[:, :3], atol=1e-5)  # the spec's true poses
    for _ in range(2):
        info = env.step(env.action_space.sample())[-1]
        poses = info["object_poses"]
        assert poses.shape == (3, 7) and np.isfinite(poses).all()
        np.testing.assert_allclose(np.linalg.norm(poses[:, 3:], axis=-1), 1.0, atol=1e-5)
        assert (poses[:, 3] >= 0).all()
    images = EpisodeSpec.from_images(*(spec.views[v] for v in spec.views), instruction="x")  # no poses: read
    info = env.reset(seed=1, options={"episode": images})[1]
    assert info["object_poses"].shape == (3, 7) and np.isfinite(info["object_poses"]).all()
    venv = NeuralDROIDVectorEnv(num_envs=2, checkpoint=str(env_checkpoint), reward_fn=None)
    info = venv.reset(seed=0)[1]
    assert info["object_poses"].shape == (2, 3, 7)
    assert venv.step(np.stack([env.action_space.sample()] * 2))[-1]["object_poses"].shape == (2, 3, 7)
    plain = NeuralDROIDEnv(checkpoint=str(tiny_checkpoint), reward_fn=None)  # no object state: no key
    assert "object_poses" not in plain.reset(seed=0)[1]
    assert "object_poses" not in plain.step(plain.action_space.sample())[-1]
