"""SPINE's entropy band (Wu et al. 2025, arXiv:2511.17938): the penalty by hand with its
gradient, a run from YAML that trains the forking tokens under the band, the refusals."""

from __future__ import annotations

import math

import pytest
import torch
import yaml
from test_trainer import step_rows, tiny_config

from rlvr import algorithms
from rlvr.config import ConfigError, build_config, load_config
from rlvr.trainer import train


def test_the_band_penalty_and_its_gradient_by_hand():
    # row 0's masked entropies 1..5: q10 = 1 + 0.4 * (2 - 1) = 1.4, q50 = 3 (linear interpolation)
    entropy = torch.tensor(
        [[1.0, 2.0, 3.0, 4.0, 5.0, 9.0], [0.5, 0.5, 0.5, 0.5, 0.5, 0.5]], requires_grad=True
    )
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 0, 0, 0, 0]])
    band = algorithms.entropy_band(entropy, mask)
    # max(0, H - 3) + max(0, 1.4 - H); the unmasked 9.0 is 0; row 1 is all within its band
    want = torch.tensor([[0.4, 0.0, 0.0, 1.0, 2.0, 0.0], [0.0] * 6])
    torch.testing.assert_close(band, want)
    band.sum().backward()
    # below the band: raise the entropy (-1), above it: lower it (+1), the bounds detached
    assert entropy.grad.tolist() == [[-1.0, 0.0, 0.0, 1.0, 1.0, 0.0], [0.0] * 6]
    # other quantiles: [q25, q75] = [2, 4]
    wide = algorithms.entropy_band(entropy.detach(), mask, low=0.25, high=0.75)
    assert wide[0].tolist() == [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="0 <= low < high <= 1"):
        algorithms.entropy_band(entropy, mask, low=0.5, high=0.5)


def spine_config(run_dir, band: float, steps: int = 1) -> dict:
    entropy = {"top_rho": 0.2, "band": band}  # SPINE's forking tokens: the top 20% by entropy
    return tiny_config(run_dir, steps=steps, algorithm={"preset": "grpo", "entropy": entropy})


def test_spine_trains_the_forking_tokens_under_the_band_from_yaml(tmp_path):
    path = tmp_path / "spine.yaml"
    path.write_text(yaml.safe_dump(spine_config(tmp_path / "band", 1.0, steps=2)))
    train(load_config(path))
    rows = step_rows(tmp_path / "band")
    assert all(math.isfinite(rows[s]["policy/loss"]) for s in (1, 2))
    assert all(rows[s]["policy/entropy_band"] > 0 for s in (1, 2))
    train(build_config(spine_config(tmp_path / "plain", 0.0, steps=1)))
    plain = step_rows(tmp_path / "plain")
    assert "policy/entropy_band" not in plain[1]
    # the same samples (step 1 of the same seed): the band's term moves the loss and gradient
    assert rows[1]["reward/mean"] == plain[1]["reward/mean"]
    assert rows[1]["policy/loss"] != plain[1]["policy/loss"]
    assert rows[1]["policy/grad_norm"] != plain[1]["policy/grad_norm"]


def test_the_band_is_refused_where_it_has_no_meaning(tmp_path):
    cfg = spine_config(tmp_path / "a", 1.0)
    cfg["algorithm"]["entropy"].update(band_low=0.6, band_high=0.5)
    with pytest.raises(ConfigError, match="band_low < band_high"):
        build_config(cfg)
    cfg = spine_config(tmp_path / "b", 1.0)
    cfg["algorithm"]["preset"] = "dpo"
    with pytest.raises(ConfigError, match="entropy.band and value heads apply"):
        build_config(cfg)
