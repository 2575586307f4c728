"""Counter-based random streams (rlvr.rollout.streams): keys named by what a sample is."""

from __future__ import annotations

import torch

from rlvr.rollout.streams import derive, group_keys, sample_keys, stream_key, uniforms


def test_derived_keys_equal_keys_of_the_longer_tuple():
    base = stream_key(7, 3)
    got = derive(torch.tensor([base, base]), torch.tensor([11, 12]))
    assert got.tolist() == [stream_key(7, 3, 11), stream_key(7, 3, 12)]
    assert sample_keys(base, [2], [5]).tolist() == [stream_key(7, 3, 2, 5)]


def test_group_keys_follow_the_engines_sample_order():
    keys = group_keys(stream_key(1), 2, 3, first_prompt=4).tolist()
    want = [stream_key(1, p, j) for p in (4, 5) for j in range(3)]
    assert keys == want and len(set(keys)) == 6


def test_keys_of_nearby_tuples_are_unrelated():
    keys = {stream_key(0, step, 0, p, j) for step in range(5) for p in range(8) for j in range(8)}
    assert len(keys) == 5 * 8 * 8
    assert stream_key(1, 2) != stream_key(2, 1) and stream_key(0) != stream_key(0, 0)


def test_uniforms_are_in_the_unit_interval_and_uniform():
    keys = group_keys(stream_key(3), 1000, 20)
    u = torch.cat([uniforms(keys, t) for t in range(5)])
    assert u.shape == (5 * 20000, 1) and u.dtype == torch.float64
    assert (u >= 0).all() and (u < 1).all()
    counts = torch.histc(u.float(), bins=10, min=0, max=1)
    expected = len(u) / 10
    chi2 = ((counts - expected) ** 2 / expected).sum().item()
    assert chi2 < 30  # 9 degrees of freedom: p < 0.001 above ~27.9
    # positions of one stream are uncorrelated
    a, b = uniforms(keys, 0)[:, 0], uniforms(keys, 1)[:, 0]
    assert abs(torch.corrcoef(torch.stack([a, b]))[0, 1].item()) < 0.02
