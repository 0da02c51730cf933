"""``scripts/guided_fidelity.py``: action guidance wrapped around a DiT's denoising passes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from .conftest import conds, latents

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("guided_fidelity", ROOT / "scripts" / "guided_fidelity.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rollout(wm, cond: torch.Tensor) -> torch.Tensor:
    """Three generated frames of two rows from fixed latents and noise; cond (T=4, 2, 7)."""
    state = wm.new_state(2)
    wm.reset_latents(state, None, latents(wm.config, 2, seed=3), cond[0])
    out = []
    for j in range(1, cond.shape[0]):
        out.append(wm.generate(state, latents(wm.config, 2, seed=10 + j), cond[j]))
    return torch.stack(out)


@pytest.fixture
def guide():
    return _script().guide


def test_guidance_changes_frames_only_where_the_negative_differs(tiny_model, guide):
    """'open' at scale 2 leaves frames whose gripper is already open as they were, and moves those with it closed;
    and scale 1 is no guidance at all."""
    open_cond = conds(4, 2)
    open_cond[..., 6] = 0.0
    closed = open_cond.clone()
    closed[..., 6] = 1.0
    plain = {name: _rollout(tiny_model, c) for name, c in (("open", open_cond), ("closed", closed))}

    guide(tiny_model.dit, 1.0, "open")
    assert torch.equal(_rollout(tiny_model, closed), plain["closed"])

    guide(tiny_model.dit, 2.0, "open")  # wraps the scale-1 wrapper: the same passes
    torch.testing.assert_close(_rollout(tiny_model, open_cond), plain["open"], rtol=1e-5, atol=1e-5)
    gap = (_rollout(tiny_model, closed) - plain["closed"]).abs().mean()
    assert gap > 1e-2, gap


def test_still_guidance_amplifies_motion_only(tiny_model, guide):
    """'still' changes nothing while the condition holds, and moves frames whose condition changes."""
    held = conds(1, 2).expand(4, -1, -1).clone()
    moving = conds(4, 2)
    plain_held, plain_moving = _rollout(tiny_model, held), _rollout(tiny_model, moving)
    guide(tiny_model.dit, 2.0, "still")
    torch.testing.assert_close(_rollout(tiny_model, held), plain_held, rtol=1e-5, atol=1e-5)
    assert (_rollout(tiny_model, moving) - plain_moving).abs().mean() > 1e-2


def test_unknown_negative_is_refused(tiny_model, guide):
    with pytest.raises(ValueError, match="negative must be one of"):
        guide(tiny_model.dit, 2.0, "closed")
