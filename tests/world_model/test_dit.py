"""Causality of the DiT, KV-cache equivalence with full recomputation, per-row cache reset."""

from __future__ import annotations

import pytest
import torch

from neuralsim.world_model.dit import featurise_condition, temporal_mask
from neuralsim.world_model.sampler import euler_step, sample_frame

from .conftest import conds, latents


def test_causality_changing_frame_j_never_changes_earlier_frames(tiny_model):
    dit, cfg = tiny_model.dit, tiny_model.config
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
def test_kv_cache_equals_full_recompute_before_and_after_the_window_slides(tiny_model, window, num_sink):
    wm, dit, cfg = tiny_model, tiny_model.dit, tiny_model.config
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
def test_fused_commit_generation_equals_full_recompute(tiny_model, window, num_sink):
    """WorldModel.generate commits each frame inside the next frame's first pass; the frames must still
    be those of the full causal DiT over the whole history (window slides, sinks, a ring of size 0)."""
    wm, dit, cfg = tiny_model, tiny_model.dit, tiny_model.config
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


def test_fused_commit_per_row_steps_and_resets(tiny_model):
    """Rows stepped in subsets, and a row reset mid-episode, generate what they would alone."""
    wm, cfg = tiny_model, tiny_model.config
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
