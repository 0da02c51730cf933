"""Causality of the DiT, KV-cache equivalence with full recomputation, per-row cache reset."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from neuralsim.world_model.dit import featurise_condition, temporal_mask
from neuralsim.world_model.sampler import euler_step, sample_frame

from .conftest import conds, latents, randomise


def test_causality_changing_frame_j_never_changes_earlier_frames(tiny_model_any):
    dit, cfg = tiny_model_any.dit, tiny_model_any.config
    T = 6
    x, c = latents(cfg, 2, T), conds(2, T)
    t = torch.rand(2, T, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        base = dit(x, t, c)
        for j in range(1, T):
            x2, c2, t2 = x.clone(), c.clone(), t.clone()
            x2[:, j:] += torch.randn_like(x2[:, j:])
            c2[:, j:] += 1.0
            t2[:, j:] = 1.0 - t2[:, j:]
            out = dit(x2, t2, c2)
            assert torch.equal(out[:, :j], base[:, :j]), f"frames < {j} changed"
            assert not torch.allclose(out[:, j], base[:, j])


def test_temporal_mask_definition():
    m = temporal_mask(7, window=4, num_sink=1)
    # frame 6 sees: itself, sink 0, and frames 4, 5 (window 4 = self + 1 sink + 2 recent)
    assert m[6].nonzero().flatten().tolist() == [0, 4, 5, 6]
    assert temporal_mask(3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]


def test_euler_angles_are_featurised_periodically():
    a = torch.tensor([[0.1, 0.2, 0.3, 3.1, -0.5, 1.0, 0.5]])
    b = a.clone()
    b[0, 3] -= 2 * torch.pi
    assert torch.allclose(featurise_condition(a), featurise_condition(b), atol=1e-5)


def _recompute_frame(dit, history, hist_cond, noise, cond, schedule, window, num_sink):
    """Reference: every pass recomputes the whole history (clean, t = 0) with the banded mask."""
    ts = [0.0] + list(schedule)
    x = noise
    n = history.shape[1]
    for k in range(len(ts) - 1, 0, -1):
        seq = torch.cat([history, x[:, None]], dim=1)
        t = torch.zeros(seq.shape[:2])
        t[:, -1] = ts[k]
        v = dit(seq, t, torch.cat([hist_cond, cond[:, None]], dim=1), window=window, num_sink=num_sink)[:, n]
        x = euler_step(x, v, ts[k], ts[k - 1])
    return x


@pytest.mark.parametrize("window,num_sink", [(4, 0), (4, 1), (1, 0)])
def test_kv_cache_equals_full_recompute_before_and_after_the_window_slides(tiny_model_any, window, num_sink):
    wm, dit, cfg = tiny_model_any, tiny_model_any.dit, tiny_model_any.config
    B, steps = 2, 3 * window + 2
    state = wm.new_state(B, window=window, num_sink=num_sink)
    frames = [latents(cfg, B, seed=10)]
    cs = [conds(B, seed=11)]
    with torch.no_grad():
        dit.commit(frames[0], cs[0], dit.read_cache(state.cache), state.cache)
        for n in range(1, steps):
            noise, c = latents(cfg, B, seed=100 + n), conds(B, seed=200 + n)
            hist, hist_c = torch.stack(frames, 1), torch.stack(cs, 1)
            ref = _recompute_frame(dit, hist, hist_c, noise, c, cfg.schedule, window, num_sink)
            out = sample_frame(dit, noise, cfg.schedule, c, state.cache)
            assert torch.allclose(out, ref, atol=1e-4, rtol=1e-4), f"frame {n}: max err {(out - ref).abs().max()}"
            frames.append(out)
            cs.append(c)
    # memory is O(window): the cache never grew
    assert state.cache.k[0].shape[3] == window - 1
    assert state.cache.num_frames.tolist() == [steps] * B


def _views(wm, b, seed):
    s = wm.config.autoencoder.image_size
    return torch.randint(0, 256, (b, 3, s, s, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("window,num_sink", [(4, 0), (4, 1), (3, 2), (1, 0)])
def test_fused_commit_generation_equals_full_recompute(tiny_model_any, window, num_sink):
    """WorldModel.generate commits each frame inside the next frame's first pass; the frames must still
    be those of the full causal DiT over the whole history (window slides, sinks, a ring of size 0)."""
    wm, dit, cfg = tiny_model_any, tiny_model_any.dit, tiny_model_any.config
    B, steps = 2, 3 * window + 2
    state = wm.new_state(B, window=window, num_sink=num_sink)
    views, c0 = _views(wm, B, seed=9), conds(B, seed=11)
    wm.reset(state, None, views, c0)
    frames, cs = [wm.encode(views)], [c0]
    with torch.no_grad():
        for n in range(1, steps):
            noise, c = latents(cfg, B, seed=100 + n), conds(B, seed=200 + n)
            ref = _recompute_frame(dit, torch.stack(frames, 1), torch.stack(cs, 1), noise, c, cfg.schedule, window,
                                   num_sink)
            out = wm.generate(state, noise, c)
            assert torch.allclose(out, ref, atol=1e-4, rtol=1e-4), f"frame {n}: max err {(out - ref).abs().max()}"
            frames.append(out)
            cs.append(c)
    assert state.cache.num_frames.tolist() == [steps - 1] * B  # the latest frame is pending
    assert torch.equal(state.pending, frames[-1]) and torch.equal(state.pending_cond, cs[-1])


def test_fused_commit_per_row_steps_and_resets(tiny_model_any):
    """Rows stepped in subsets, and a row reset mid-episode, generate what they would alone."""
    wm, cfg = tiny_model_any, tiny_model_any.config
    B, W = 3, 4
    together, split = wm.new_state(B, window=W), wm.new_state(B, window=W)
    views, c0 = _views(wm, B, seed=1), conds(B, seed=2)
    for s in (together, split):
        wm.reset(s, None, views, c0)
    with torch.no_grad():
        for n in range(6):
            noise, c = latents(cfg, B, seed=30 + n), conds(B, seed=40 + n)
            ref = wm.generate(together, noise, c)
            a = wm.generate(split, noise[[0, 2]], c[[0, 2]], rows=[0, 2])
            b = wm.generate(split, noise[1:2], c[1:2], rows=[1])
            torch.testing.assert_close(torch.cat([a[:1], b, a[1:]]), ref, atol=1e-5, rtol=1e-5)
        v1, c1 = _views(wm, 1, seed=77), conds(1, seed=78)
        wm.reset(together, [1], v1, c1)
        single = wm.new_state(1, window=W)
        wm.reset(single, None, v1, c1)
        for n in range(6):
            noise, c = latents(cfg, B, seed=50 + n), conds(B, seed=60 + n)
            out = wm.generate(together, noise, c)
            torch.testing.assert_close(out[1:2], wm.generate(single, noise[1:2], c[1:2]), atol=1e-5, rtol=1e-5)


def test_per_row_reset_matches_a_fresh_single_row_state(tiny_model):
    wm, dit, cfg = tiny_model, tiny_model.dit, tiny_model.config
    B, W = 3, 4
    state = wm.new_state(B, window=W)
    other = wm.new_state(B, window=W)  # same history, never reset
    with torch.no_grad():
        for s in (state, other):
            dit.commit(latents(cfg, B, seed=1), conds(B, seed=2), dit.read_cache(s.cache), s.cache)
        for n in range(5):
            for s in (state, other):
                sample_frame(dit, latents(cfg, B, seed=30 + n), cfg.schedule, conds(B, seed=40 + n), s.cache)
        # reset row 1 only, with a new first frame
        z0, c0 = latents(cfg, 1, seed=77), conds(1, seed=78)
        rows = torch.tensor([1])
        state.cache.reset(rows)
        dit.commit(z0, c0, dit.read_cache(state.cache, rows), state.cache)
        single = wm.new_state(1, window=W)
        dit.commit(z0, c0, dit.read_cache(single.cache), single.cache)
        assert state.cache.num_frames.tolist() == [6, 1, 6]
        for n in range(6):
            noise, c = latents(cfg, B, seed=50 + n), conds(B, seed=60 + n)
            out = sample_frame(dit, noise, cfg.schedule, c, state.cache)
            ref_other = sample_frame(dit, noise, cfg.schedule, c, other.cache)
            ref_single = sample_frame(dit, noise[1:2], cfg.schedule, c[1:2], single.cache)
            assert torch.allclose(out[1:2], ref_single, atol=1e-5)
            assert torch.allclose(out[[0, 2]], ref_other[[0, 2]], atol=1e-6)


def test_step_requires_reset(tiny_model):
    state = tiny_model.new_state(2)
    with pytest.raises(RuntimeError, match="reset"):
        tiny_model.step(state, torch.zeros(2, 7))


def test_fast_inference_pieces_equal_their_reference_math():
    """The inference-only GELU, the one-frame LayerNorm+AdaLN and the single-query attention agree with the
    plain formulas."""
    import torch.nn.functional as F

    from neuralsim.world_model.dit import TanhGELU, attention

    x = torch.randn(2, 3, 40, 64, generator=torch.Generator().manual_seed(0)) * 4
    x0 = x.clone()
    ref = F.gelu(x, approximate="tanh")
    with torch.no_grad():
        fast = TanhGELU()(x)
    torch.testing.assert_close(fast, ref, rtol=1e-6, atol=1e-6)
    xg = x.clone().requires_grad_(True)  # with autograd recording it is the library kernel itself
    assert torch.equal(TanhGELU()(xg).detach(), ref)
    assert torch.equal(x, x0)  # input untouched (the fast path works in place on temporaries only)

    from neuralsim.world_model.dit import modulate, norm_modulate

    norm = torch.nn.LayerNorm(16, elementwise_affine=False, eps=1e-6)
    h = torch.randn(1, 1, 5, 16) * 3 + 1
    shift, scale1 = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)
    torch.testing.assert_close(norm_modulate(norm, h, shift, scale1), modulate(norm(h), shift, scale1))
    h2, shift2, scale2 = torch.cat([h, -h]), torch.cat([shift, shift * 2]), torch.cat([scale1, scale1 + 1])
    torch.testing.assert_close(norm_modulate(norm, h2, shift2, scale2), modulate(norm(h2), shift2, scale2))

    from neuralsim.world_model.dit import split_modulation

    mod = torch.randn(1, 1, 3 * 16)  # one frame: (D,) vectors, LayerNorm's affine path
    parts = split_modulation(mod, 3)
    assert [p.shape for p in parts] == [(16,)] * 3
    torch.testing.assert_close(norm_modulate(norm, h, parts[0], parts[1]),
                               modulate(norm(h), mod[..., None, :16], mod[..., None, 16:32]))
    mod2 = torch.randn(2, 3, 3 * 16)  # several frames: (B, T, 1, D) that broadcast over tokens
    parts2 = split_modulation(mod2, 3)
    assert [p.shape for p in parts2] == [(2, 3, 1, 16)] * 3
    assert torch.equal(parts2[2][1, 2, 0], mod2[1, 2, 32:])

    g = torch.Generator().manual_seed(1)
    q = torch.randn(6, 2, 1, 8, generator=g)
    k, v = torch.randn(6, 2, 5, 8, generator=g), torch.randn(6, 2, 5, 8, generator=g)
    mask = torch.zeros(6, 1, 1, 5)
    mask[:3, ..., :2] = float("-inf")
    torch.testing.assert_close(attention(q, k, v, mask), F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    torch.testing.assert_close(attention(q, k, v), F.scaled_dot_product_attention(q, k, v))


def test_linear_inference_path_equals_nn_linear_and_follows_weight_changes():
    """The DiT's Linear multiplies by a cached column-major weight at inference; it must give nn.Linear's
    output, rebuild the copy after any in-place change (optimiser step, load_state_dict, device/dtype
    move) and keep the state dict unchanged."""
    import torch.nn.functional as F

    from neuralsim.world_model.dit import Linear

    torch.manual_seed(0)
    lin = Linear(12, 20).eval()
    x = torch.randn(2, 3, 5, 12)
    with torch.no_grad():
        torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias), rtol=1e-6, atol=1e-6)
        assert lin.inference_weight().stride() == (1, 20)  # column-major: weight.t() is row-major (in, out)
    assert set(lin.state_dict()) == {"weight", "bias"}

    opt = torch.optim.SGD(lin.parameters(), lr=0.5)  # an in-place update must not leave a stale copy
    lin.train()
    lin(x).square().mean().backward()
    opt.step()
    lin.eval()
    with torch.inference_mode():
        torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias), rtol=1e-6, atol=1e-6)

    other = Linear(12, 20)
    lin.load_state_dict(other.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(lin(x), F.linear(x, other.weight, other.bias), rtol=1e-6, atol=1e-6)
        lin.double()
        assert lin(x.double()).dtype == torch.float64

    y = lin(x.double())  # grad enabled: the plain path, which autograd can differentiate
    assert y.requires_grad


def _gain_input(tiny_model, flag: str):
    """``tiny_model.with_<flag>()``, checked to set ``DiTConfig.<flag>``, to refuse a second time, and to predict bit
    for bit what ``tiny_model`` does (its new embedding's output starts at zero); returns it with the (x, t, cond)
    it was checked on."""
    wm = getattr(tiny_model, f"with_{flag}")()
    assert getattr(wm.config.dit, flag) and not getattr(tiny_model.config.dit, flag)
    with pytest.raises(ValueError, match="already"):
        getattr(wm, f"with_{flag}")()
    x, c = latents(wm.config, 2, 5), conds(2, 5)
    t = torch.rand(2, 5, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert torch.equal(wm.dit(x, t, c), tiny_model.dit(x, t, c))
    return wm, x, t, c


def test_with_wrist_rays_starts_from_the_same_predictions_then_reads_the_rays(tiny_model):
    """A model that gains the wrist ray embedding predicts bit for bit what it did (zero-initialised output);
    once the embedding is trained it changes the prediction with the flange pose, and it keys on the pose
    alone: a gripper-only change moves no ray."""
    wm, x, t, c = _gain_input(tiny_model, "wrist_rays")
    cfg = wm.config
    with torch.no_grad():
        randomise(wm.dit.ray_embed, seed=9)
        moved = c.clone()
        moved[:, :, 0] += 0.05  # the flange (and so every wrist ray) 5 cm along x
        base = wm.dit.conditioning(t, c)
        assert base.wrist.shape == (2, 5, cfg.dit.tokens_per_view, cfg.dit.dim)
        assert not torch.allclose(wm.dit.conditioning(t, moved).wrist, base.wrist)
        assert not torch.allclose(wm.dit(x, t, moved), tiny_model.dit(x, t, moved))
        gripper = c.clone()
        gripper[:, :, 6] += 1.0
        assert torch.equal(wm.dit.conditioning(t, gripper).wrist, base.wrist)


def test_wrist_rays_reach_only_the_wrist_tokens_directly(tiny_model):
    """With the trunk's blocks gated off (AdaLN-Zero at init), a token's output depends only on its own
    input: the ray embedding then moves the wrist view's prediction and leaves the exterior views alone."""
    torch.manual_seed(0)
    cfg = tiny_model.config
    plain = type(tiny_model)(cfg).eval()  # AdaLN-Zero init: blocks are the identity
    wm = plain.with_wrist_rays()
    with torch.no_grad():
        for module in (wm.dit.final_out, wm.dit.final_ada[1]):
            randomise(module, seed=3)
        plain.load_state_dict({k: v for k, v in wm.state_dict().items() if not k.startswith("dit.ray_embed.")})
        randomise(wm.dit.ray_embed, seed=9)
        x, c, t = latents(cfg, 1, 3), conds(1, 3), torch.full((1, 3), 0.5)
        a, b = plain.dit(x, t, c), wm.dit(x, t, c)
    assert torch.equal(a[:, :, :-1], b[:, :, :-1])  # exterior views untouched
    assert not torch.allclose(a[:, :, -1], b[:, :, -1])  # the wrist view (the last one) moved


def test_a_fresh_dit_with_rays_draws_the_same_initial_weights_as_one_without(tiny_model):
    """From the same seed, a fresh DiT with wrist rays has every weight of one without them, bit for bit, and
    so the same initial predictions: a from-scratch A/B of the rays differs in the ray embedding alone."""
    import dataclasses

    from neuralsim.world_model.dit import CausalDiT

    cfg = tiny_model.config.dit
    torch.manual_seed(7)
    plain = CausalDiT(cfg)
    torch.manual_seed(7)
    rays = CausalDiT(dataclasses.replace(cfg, wrist_rays=True))
    own = rays.state_dict()
    common = plain.state_dict()
    assert set(own) - set(common) and all(k.startswith("ray_embed.") for k in set(own) - set(common))
    for name, value in common.items():
        assert torch.equal(own[name], value), name
    x, c = latents(tiny_model.config, 1, 3), conds(1, 3)
    t = torch.full((1, 3), 0.5)
    randomise(plain.final_out, seed=3)  # a non-zero output layer, the same in both
    rays.final_out.load_state_dict(plain.final_out.state_dict())
    with torch.no_grad():
        assert torch.equal(plain(x, t, c), rays(x, t, c))


def test_tcp_marks_project_the_tool_centre_point_as_the_focus_masks_do(tiny_model):
    """The embedding's projection of the tool centre point through the exterior cameras is focus.py's (the loss
    masks'), in torch, and its bump peaks on the token the point falls in, in each view."""
    from neuralsim.world_model import focus

    wm = tiny_model.with_tcp_marks()
    embed = wm.dit.tcp_embed
    cond = torch.tensor([[0.45, 0.10, 0.30, 3.10, 0.05, 0.20, 0.0],
                         [0.55, -0.20, 0.15, 2.90, -0.10, -0.40, 1.0]])
    uv, depth = embed.image_points(cond)
    want = focus.project_exterior(focus.tool_centre(cond[:, :6].double().numpy()))
    np.testing.assert_allclose(uv.numpy(), want, atol=1e-5)
    assert (depth > 0.3).all()
    feats = embed.features(cond)  # (2 frames, 2 views, G*G, 8)
    g = embed.grid
    assert feats.shape == (2, 2, g * g, embed.FEATURES)
    cells = ((uv + 1) / 2 * g).floor().long().clamp(0, g - 1)  # (frame, view, (column, row))
    peak = feats[..., 2].argmax(-1)
    torch.testing.assert_close(peak, cells[..., 1] * g + cells[..., 0], rtol=0, atol=0)
    assert torch.equal(feats[0, ..., 3], torch.zeros(2, g * g)) and torch.equal(feats[1, ..., 3], torch.ones(2, g * g))


def test_with_tcp_marks_starts_from_the_same_predictions_then_moves_only_the_exterior_views(tiny_model):
    """A model that gains the gripper marks predicts bit for bit what it did (zero-initialised output).  Trained
    (here: randomised), with the trunk's blocks gated off and the head's modulation not reading the condition, a
    token's output depends on its own input alone: the marks then move the exterior views' prediction with the
    hand's pose and with the gripper command, and never the wrist view's."""
    cfg = _gain_input(tiny_model, "tcp_marks")[0].config
    torch.manual_seed(0)
    plain = type(tiny_model)(cfg).eval()  # AdaLN-Zero init: blocks are the identity
    with torch.no_grad():
        randomise(plain.dit.final_out, seed=3)
        randomise(plain.dit.tcp_embed, seed=5)
        plain.dit.final_ada[1].bias.normal_()  # a fixed head modulation that ignores the condition
        c = torch.tensor([0.5, 0.0, 0.3, 3.1, 0.0, 0.0, 0.0]).expand(1, 3, 7).clone()
        x, t = latents(cfg, 1, 3), torch.full((1, 3), 0.5)
        base = plain.dit(x, t, c)
        for index, delta in ((0, 0.05), (6, 1.0)):  # the hand 5 cm along x; the gripper closed
            other = c.clone()
            other[..., index] += delta
            moved = plain.dit(x, t, other)
            assert not torch.allclose(moved[:, :, :2], base[:, :, :2])  # the exterior views moved
            assert torch.equal(moved[:, :, 2], base[:, :, 2])  # the wrist view (the last one) did not


def test_tcp_marks_need_the_three_simdroid_views():
    import dataclasses

    from neuralsim.world_model.config import preset

    with pytest.raises(ValueError, match="tcp_marks needs the three SimDROID views"):
        dataclasses.replace(preset("tiny").dit, num_views=2, tcp_marks=True)


def test_ablate_script_zeroes_one_input_and_keeps_every_other_weight(tiny_model, tmp_path):
    """``scripts/ablate_dit_input.py``: the copy's chosen embedding outputs zero (so it predicts as the model would
    without that input), every other weight is the original's, and a model without the input is refused by name."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    wm = tiny_model.with_tcp_marks().with_wrist_rays()
    randomise(wm.dit.tcp_embed, seed=5)
    randomise(wm.dit.ray_embed, seed=6)
    wm.save_pretrained(tmp_path / "both")
    tiny_model.save_pretrained(tmp_path / "plain")
    script = [sys.executable, str(root / "scripts" / "ablate_dit_input.py")]
    run = subprocess.run(script + [str(tmp_path / "both"), str(tmp_path / "off"), "--data", str(tmp_path / "none")],
                         capture_output=True, text=True, cwd=root)
    assert run.returncode == 0, run.stderr
    off = type(wm).from_pretrained(tmp_path / "off")
    cond = conds(3)
    with torch.no_grad():
        assert torch.equal(off.dit.tcp_embed(cond), torch.zeros(3, 2 * wm.config.dit.tokens_per_view,
                                                                wm.config.dit.dim))
        assert torch.equal(off.dit.ray_embed(cond), wm.dit.ray_embed(cond))
    kept = {k: v for k, v in wm.state_dict().items() if not k.startswith("dit.tcp_embed.mlp.2.")}
    assert all(torch.equal(off.state_dict()[k], v) for k, v in kept.items())
    run = subprocess.run(script + [str(tmp_path / "plain"), str(tmp_path / "x")], capture_output=True, text=True,
                         cwd=root)
    assert run.returncode != 0 and "has no tcp_marks input" in run.stderr
    assert not (tmp_path / "x").exists()
