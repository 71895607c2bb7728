"""The report's statistics against direct transcriptions of their definitions on
hand-written values: mean +- sample sd over seeds, paired differences with their
standard errors over seeds and over sequences."""

import math

import numpy as np
import pytest

from ebm_jax.report.statistics import (
    aggregate,
    arm_difference,
    mean_sd,
    paired_difference,
    paired_seeds_and_sequences,
    sequence_difference,
    stratified_difference,
)


def _sd(xs):
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def test_mean_sd_skips_missing_values_and_has_no_sd_for_one():
    m, sd = mean_sd([0.5, None, 0.7, 0.9])
    assert m == pytest.approx(0.7, rel=1e-15) and sd == pytest.approx(_sd([0.5, 0.7, 0.9]))
    assert mean_sd([0.25]) == (0.25, None)
    assert mean_sd([None]) == (None, None) and mean_sd([]) == (None, None)


def test_aggregate_gives_none_where_a_seed_lacks_the_figure():
    rows = [{"acc": 0.5, "fps": None}, {"acc": 0.75, "fps": 3.0}]
    out = aggregate(rows, ("acc", "fps"))
    assert out["acc"] == 0.625 and out["sd"]["acc"] == pytest.approx(_sd([0.5, 0.75]))
    assert out["fps"] is None and out["sd"]["fps"] is None


def test_paired_difference_is_mean_and_standard_error_of_differences():
    a, b = [0.6, 0.7, 0.65], [0.5, 0.55, 0.6]
    d = [x - y for x, y in zip(a, b)]
    out = paired_difference(a, b)
    assert out["mean"] == pytest.approx(sum(d) / 3, rel=1e-12) and out["n"] == 3
    assert out["se"] == pytest.approx(_sd(d) / math.sqrt(3), rel=1e-12)
    assert out["beyond_2se"] is (abs(out["mean"]) > 2 * out["se"])
    one = paired_difference([0.6], [0.5])
    assert one["se"] is None and one["beyond_2se"] is False


def test_sequence_difference_averages_seeds_before_pairing_sequences():
    a = [[0.2, 0.4, 0.9], [0.4, 0.6, 0.7]]  # two seeds x three sequences
    b = [[0.1, 0.5, 0.5]]  # a seedless arm
    d = [0.3 - 0.1, 0.5 - 0.5, 0.8 - 0.5]
    out = sequence_difference(a, b)
    assert out["num_sequences"] == 3
    assert out["mean"] == pytest.approx(sum(d) / 3, abs=1e-15)
    assert out["se"] == pytest.approx(_sd(d) / math.sqrt(3), rel=1e-12)


def test_paired_seeds_and_sequences_matches_seeds_and_gives_both_errors():
    a = [{"seed": 0, "auc": 0.6, "sequence_auc": [0.5, 0.7]},
         {"seed": 1, "auc": 0.7, "sequence_auc": [0.6, 0.8]},
         {"seed": 2, "auc": 0.9, "sequence_auc": [0.9, 0.9]}]  # no partner: left out
    b = [{"seed": 1, "auc": 0.5, "sequence_auc": [0.3, 0.5]},
         {"seed": 0, "auc": 0.5, "sequence_auc": [0.4, 0.6]}]
    out = paired_seeds_and_sequences(a, b)
    assert out["seeds"] == [0, 1]
    assert out["per_seed"] == pytest.approx([0.1, 0.2], abs=1e-15)
    assert out["mean"] == pytest.approx(0.15, abs=1e-15)
    assert out["se_seeds"] == pytest.approx(0.05, rel=1e-12)  # sd of (0.1, 0.2) / sqrt 2
    assert out["se_sequences"] == pytest.approx(0.0, abs=1e-15)  # both sequences +0.2
    assert out["real"] is True  # 0.15 > 2 x 0.05
    single = paired_seeds_and_sequences(a[:1], b[1:])
    assert single["se_seeds"] is None and single["real"] is False


def test_arm_difference_gives_both_errors_from_two_seeds_and_pairs_a_seedless_arm():
    a = [{"seed": 0, "auc": 0.6, "sequence_auc": [0.5, 0.7]},
         {"seed": 1, "auc": 0.7, "sequence_auc": [0.6, 0.8]}]
    static = [{"seed": None, "auc": 0.5, "sequence_auc": [0.4, 0.6]}]
    out = arm_difference(a, static)
    # by sequence: a's seed mean (0.55, 0.75) - (0.4, 0.6) = (0.15, 0.15)
    assert out["num_sequences"] == 2 and out["se"] == pytest.approx(0.0, abs=1e-15)
    # by seed: the static row pairs with each seed: (0.1, 0.2)
    assert out["seeds"] == [0, 1]
    assert out["per_seed"] == pytest.approx([0.1, 0.2], abs=1e-15)
    assert out["mean"] == pytest.approx(0.15, abs=1e-15)
    assert out["se_seeds"] == pytest.approx(0.05, rel=1e-12)  # sd (0.1, 0.2) / sqrt 2
    assert out["real"] is True  # 0.15 > 2 x max(0.05, 0)
    one = arm_difference(a[:1], static)  # one seed: over sequences only
    assert "se_seeds" not in one and one["se"] == pytest.approx(0.0, abs=1e-15)
    assert one["mean"] == pytest.approx(0.1, abs=1e-15)


def test_a_seedless_arm_pairs_with_every_seed_when_paired_by_seed_and_sequence():
    """The tracker that never moves (one row, seed None) against a two-seed arm: each
    seed's difference is against the same row; the sequences' difference is the
    seed-averaged arm's; with one seed there is no standard error over seeds."""
    static = [{"seed": None, "auc": 0.1, "sequence_auc": [0.1, 0.1, 0.1]}]
    arm = [{"seed": 0, "auc": 0.3, "sequence_auc": [0.2, 0.3, 0.4]},
           {"seed": 1, "auc": 0.5, "sequence_auc": [0.4, 0.5, 0.6]}]
    d = paired_seeds_and_sequences(arm, static)
    assert d["seeds"] == [0, 1] and np.allclose(d["per_seed"], [0.2, 0.4])
    assert np.isclose(d["mean"], 0.3) and np.isclose(d["se_seeds"], 0.1)
    assert np.isclose(d["se_sequences"], 0.1 / np.sqrt(3))  # [0.2, 0.3, 0.4] over 3
    one = paired_seeds_and_sequences(arm[:1], static)
    assert one["se_seeds"] is None and not one["real"] and np.isclose(one["mean"], 0.2)


def test_stratified_difference_is_welchs_per_stratum_averaged_over_strata():
    """Two datasets' ensembles: each stratum's difference of means with Welch's
    standard error, the strata averaged (se sqrt(sum se_k^2) / K)."""
    a = [[1.0, 2.0, 3.0], [0.0, 4.0]]
    b = [[0.0, 1.0], [1.0, 1.0, 4.0]]
    got = stratified_difference(a, b)
    d1, v1 = 2.0 - 0.5, 1.0 / 3 + 0.5 / 2        # var([1,2,3]) = 1, var([0,1]) = 0.5
    d2, v2 = 2.0 - 2.0, 8.0 / 2 + 3.0 / 3        # var([0,4]) = 8, var([1,1,4]) = 3
    assert got["mean"] == pytest.approx((d1 + d2) / 2, rel=1e-12)
    assert got["se"] == pytest.approx(np.sqrt(v1 + v2) / 2, rel=1e-12)
    assert got["dropped"] == 0 and got["beyond_2se"] is False
    far = stratified_difference([[10.0, 10.5, 11.0]], [[0.0, 0.5, 1.0]])
    assert far["beyond_2se"] is True and far["mean"] == pytest.approx(10.0)


def test_stratified_difference_leaves_out_and_counts_a_diverged_model():
    got = stratified_difference([[1.0, np.inf, 3.0]], [[0.0, np.nan, 1.0, 2.0]])
    assert got["dropped"] == 2 and got["mean"] == pytest.approx(1.0)
    one = stratified_difference([[1.0, np.nan]], [[0.0, 1.0]])  # one finite model left
    assert one["se"] is None and one["beyond_2se"] is False and one["dropped"] == 1
    none = stratified_difference([[np.nan]], [[0.0]])
    assert none["mean"] is None and none["dropped"] == 1
    with pytest.raises(ValueError, match="1 and 2 strata"):
        stratified_difference([[1.0]], [[1.0], [2.0]])
