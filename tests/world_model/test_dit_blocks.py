"""``WorldModel.with_dit_blocks`` / ``neuralsim train --add-dit-blocks``: a deeper DiT that starts as the old one."""

from __future__ import annotations

import json

import pytest
import torch

from neuralsim.world_model.model import WorldModel
from neuralsim.world_model.objectives import step_forcing_loss
from neuralsim.world_model.sampler import sample_noise
from neuralsim.world_model.train import train

from .conftest import conds, latents
from .test_train import _cfg as train_cfg


def _rollout(wm: WorldModel, first, cond, seed: int) -> torch.Tensor:
    """The env's path: reset on a clean frame, then generate one frame per condition (KV cache, one row)."""
    g = torch.Generator().manual_seed(seed)
    state = wm.new_state(first.shape[0], window=cond.shape[1])
    wm.reset_latents(state, None, first, cond[:, 0])
    return torch.stack([wm.generate(state, sample_noise(first.shape, g, "cpu"), cond[:, j])
                        for j in range(1, cond.shape[1])], dim=1)


def test_deeper_copy_predicts_what_the_model_did_and_can_learn(tiny_model, tmp_path):
    cfg = tiny_model.config
    deeper = tiny_model.with_dit_blocks(2, init="fresh")
    assert deeper.config.dit.depth == cfg.dit.depth + 2
    assert tiny_model.config.dit.depth == cfg.dit.depth  # the original is untouched
    old = tiny_model.state_dict()
    for name, t in old.items():
        assert torch.equal(deeper.state_dict()[name], t), name
    # the training forward (whole clip, causal mask) and the env's cached path give the same frames
    x, a, t = latents(cfg, 2, 5), conds(2, 5), torch.rand(2, 5)
    with torch.no_grad():
        assert torch.equal(tiny_model.dit(x, t, a), deeper.dit(x, t, a))
    first, cond = latents(cfg, 2, seed=3), conds(2, 4, seed=4)
    assert torch.equal(_rollout(tiny_model, first, cond, 7), _rollout(deeper, first, cond, 7))
    # ... and it survives saving and loading
    deeper.save_pretrained(tmp_path / "m")
    loaded = WorldModel.from_pretrained(tmp_path / "m")
    assert loaded.config.dit.depth == cfg.dit.depth + 2
    assert torch.equal(_rollout(loaded, first, cond, 7), _rollout(deeper, first, cond, 7))

    # the new blocks are not dead weight: the loss reaches their gates, and one update changes the prediction
    new_blocks = deeper.dit.blocks[cfg.dit.depth:]
    loss, _ = step_forcing_loss(deeper.dit, x, a, cfg.schedule, torch.Generator().manual_seed(0))
    loss.backward()
    gate_grad = sum(float(b.ada[1].weight.grad.abs().sum()) for b in new_blocks)
    assert gate_grad > 0
    with torch.no_grad():
        for b in new_blocks:
            b.ada[1].weight -= 0.5 * b.ada[1].weight.grad
        assert not torch.allclose(tiny_model.dit(x, t, a), deeper.dit(x, t, a))
    with pytest.raises(ValueError, match="blocks must be >= 1"):
        tiny_model.with_dit_blocks(0)
    with pytest.raises(ValueError, match=r"init must be one of \('fresh', 'copy'\), got 'random'"):
        tiny_model.with_dit_blocks(1, init="random")


def test_copied_blocks_hold_the_last_blocks_weights_behind_closed_gates(tiny_model):
    cfg = tiny_model.config
    depth = cfg.dit.depth
    for n in (1, depth + 1):  # the last block; more blocks than the DiT has: the stack repeated
        deeper = tiny_model.with_dit_blocks(n, init="copy")
        default = tiny_model.with_dit_blocks(n).state_dict()  # copy is the default
        assert all(torch.equal(default[k], v) for k, v in deeper.state_dict().items())
        d = cfg.dit.dim
        for j in range(n):
            src = tiny_model.dit.blocks[(depth - n + j) % depth].state_dict()
            got = deeper.dit.blocks[depth + j].state_dict()
            for name, t in src.items():
                if name.startswith("ada.1."):
                    rows = t.clone()
                    for g in deeper.dit.blocks[depth + j].GATE_CHUNKS:
                        rows[g * d:(g + 1) * d] = 0
                    assert torch.equal(got[name], rows), name
                    assert rows.abs().sum() < t.abs().sum() or t.abs().sum() == 0
                else:
                    assert torch.equal(got[name], t), name
    # with real (non-zero) modulation behind them, the closed gates still make the block the identity
    with torch.no_grad():
        for b in tiny_model.dit.blocks:
            b.ada[1].weight.normal_(0, 0.02)
            b.ada[1].bias.normal_(0, 0.02)
    deeper = tiny_model.with_dit_blocks(2, init="copy")
    x, a, t = latents(cfg, 2, 5), conds(2, 5), torch.rand(2, 5)
    with torch.no_grad():
        assert torch.equal(tiny_model.dit(x, t, a), deeper.dit(x, t, a))
    first, cond = latents(cfg, 2, seed=3), conds(2, 4, seed=4)
    assert torch.equal(_rollout(tiny_model, first, cond, 7), _rollout(deeper, first, cond, 7))
    # the copies' shift and scale rows are the trained ones, so the loss reaches the gates through a working block
    new = deeper.dit.blocks[depth]
    assert new.ada[1].weight[:d].abs().sum() > 0
    loss, _ = step_forcing_loss(deeper.dit, x, a, cfg.schedule, torch.Generator().manual_seed(0))
    loss.backward()
    assert float(new.ada[1].weight.grad[2 * d:3 * d].abs().sum()) > 0


def test_trainer_grows_an_init_from_model_records_it_and_refuses_misuse(tmp_path):
    base = tmp_path / "base"
    train(train_cfg(base, steps=2))
    depth = WorldModel.from_pretrained(base / "model").config.dit.depth
    out = tmp_path / "grown"
    train(train_cfg(out, steps=2, checkpoint_every=1, init_from=str(base / "model"), add_dit_blocks=1,
                    dit_block_init="fresh"))
    grown = WorldModel.from_pretrained(out / "model")
    assert grown.config.dit.depth == depth + 1
    assert grown.config.recipe["stages"][-1]["added_dit_blocks"] == 1
    # resuming the same run keeps its depth (the blocks are not added twice)
    train(train_cfg(out, steps=3, checkpoint_every=1, init_from=str(base / "model"), add_dit_blocks=1,
                    dit_block_init="fresh"))
    assert WorldModel.from_pretrained(out / "model").config.dit.depth == depth + 1
    assert json.loads((out / "checkpoint" / "trainer.json").read_text())["step"] == 3
    with pytest.raises(ValueError, match="refusing to resume it with 2"):
        train(train_cfg(out, steps=4, init_from=str(base / "model"), add_dit_blocks=2))
    with pytest.raises(ValueError, match="needs --stage dit and --init-from"):
        train(train_cfg(tmp_path / "fresh", add_dit_blocks=1))
    with pytest.raises(ValueError, match="needs --stage dit and --init-from"):
        train(train_cfg(tmp_path / "ae", stage="autoencoder", init_from=str(base / "model"), add_dit_blocks=1))
    with pytest.raises(ValueError, match="a number of DiT blocks"):
        train(train_cfg(tmp_path / "neg", init_from=str(base / "model"), add_dit_blocks=-1))
    with pytest.raises(ValueError, match="give --add-dit-blocks too"):
        train(train_cfg(tmp_path / "copy0", init_from=str(base / "model"), dit_block_init="copy"))
    with pytest.raises(ValueError, match="refusing to resume it with copy"):  # the default with blocks is copy
        train(train_cfg(out, steps=4, init_from=str(base / "model"), add_dit_blocks=1))
    copied = tmp_path / "copied"
    train(train_cfg(copied, steps=1, init_from=str(base / "model"), add_dit_blocks=1))
    stage = WorldModel.from_pretrained(copied / "model").config.recipe["stages"][-1]
    assert (stage["added_dit_blocks"], stage["dit_block_init"]) == (1, "copy")
