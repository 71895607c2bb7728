"""The outside split's procedural photos (`ebm_jax.data.procedural_textures`) and the
"outside" split of the generated tracking benchmark made of them."""

import numpy as np
import pytest

from ebm_jax.data import procedural_textures as pt
from ebm_jax.data.tracking import PHOTO_POOLS, TrackingSpec, plan_sequence


def test_a_texture_is_a_pure_function_of_its_seed_and_index():
    a, b = pt.procedural_texture(3, 1), pt.procedural_texture(3, 1)
    assert a.shape == (pt.SIDE, pt.SIDE, 3) and a.dtype == np.float32
    assert np.array_equal(a, b)
    assert 0.0 <= a.min() and a.max() <= 1.0 and a.std() > 0.1  # not flat
    # another index, another draw: other images
    assert not np.allclose(a, pt.procedural_texture(3, 2), atol=0.1)
    assert not np.allclose(a, pt.procedural_texture(4, 1), atol=0.1)


def test_names_round_trip_and_other_names_are_not_textures():
    assert pt.outside_pool(7) == tuple(f"texture-7-{k}" for k in range(pt.OUTSIDE_POOL_SIZE))
    assert pt.parse_texture_name("texture-7-3") == (7, 3)
    for name in ("chelsea", "texture-7", "texture--1-2", "texture-a-1", "texture-1-2-3"):
        assert pt.parse_texture_name(name) is None
    with pytest.raises(ValueError, match="seed and index must be integers >= 0"):
        pt.procedural_texture(-1, 0)


@pytest.mark.parametrize("seed", [0, 5])
def test_the_outside_split_is_made_of_its_draws_photos_alone(seed):
    """Background, target, distractors and occluders of every sequence come from the
    seed's procedural pool: no photo of either pool, and another seed another pool."""
    spec = TrackingSpec(split="outside", num_sequences=4, num_frames=6, height=96,
                        width=128, seed=seed)
    pool = set(pt.outside_pool(seed))
    pools = set(PHOTO_POOLS["train"]) | set(PHOTO_POOLS["test"])
    for i in range(spec.num_sequences):
        plan = plan_sequence(spec, i)
        photos = {plan.background, plan.target.texture,
                  *(o.texture for o in plan.behind + plan.front)}
        assert photos <= pool and not photos & pools, photos


def test_the_outside_split_is_written_and_read_back(tmp_path):
    from ebm_jax.data.sequences import read_got10k
    from ebm_jax.data.tracking import generate_tracking_split

    spec = TrackingSpec(split="outside", num_sequences=2, num_frames=3, height=64,
                        width=80, seed=1)
    seqs = read_got10k(generate_tracking_split(tmp_path / "outside", spec, progress=False,
                                               workers=1))
    assert [s.name for s in seqs] == ["outside_00001", "outside_00002"]
    assert all(len(s) == 3 and np.all(s.boxes[:, 2:] > 0) for s in seqs)
