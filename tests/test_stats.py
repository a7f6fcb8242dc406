"""validate's statistics on synthetic samples: the interleaved schedule, percentiles, the bootstrap interval,
verdicts."""

import statistics

import pytest

from roofline.measure import stats


def test_schedule_interleaves_and_rotates():
    # Every batch once per round; each round starts one batch later, so no batch always runs first.
    assert stats.schedule([1, 4, 16], 3) == [(0, 1), (0, 4), (0, 16), (1, 4), (1, 16), (1, 1), (2, 16), (2, 1), (2, 4)]
    assert stats.schedule([8], 2) == [(0, 8), (1, 8)]


def test_percentile_by_hand():
    # 10 values 1..10: p10 at position 0.9 -> 1.9; p90 at 8.1 -> 9.1; the median 5.5 (numpy's linear method).
    values = list(range(1, 11))
    assert stats.percentile(values, 0.1) == pytest.approx(1.9)
    assert stats.percentile(values, 0.9) == pytest.approx(9.1)
    assert stats.percentile(values, 0.5) == pytest.approx(5.5) == statistics.median(values)


def test_interval_of_identical_rounds_is_a_point():
    rounds = [[2.0] * 10, [2.0] * 10, [2.0] * 10]
    assert stats.median_interval(rounds) == (2.0, 2.0)


def test_round_to_round_drift_widens_the_interval():
    # Three steady rounds at 10, 11, 12 ms: the median is 11, and resampling rounds spans 10-12.
    drift = [[0.010] * 30, [0.011] * 30, [0.012] * 30]
    low, high = stats.median_interval(drift)
    assert low == pytest.approx(0.010) and high == pytest.approx(0.012)
    # The same 90 values in one round would give a narrower interval: the drift is what widens it.
    one = stats.median_interval([[s for r in drift for s in r]])
    assert one[1] - one[0] < high - low


def test_interval_is_seeded_and_contains_the_median():
    rounds = [[0.01 + 0.001 * ((7 * i + r) % 5) for i in range(31)] for r in range(3)]
    assert stats.median_interval(rounds) == stats.median_interval(rounds)
    low, high = stats.median_interval(rounds)
    assert low <= statistics.median([s for r in rounds for s in r]) <= high


@pytest.mark.parametrize(
    "low, high, expected",
    [
        (0.90, 1.10, "within"),
        (0.85, 1.15, "within"),  # inside +-15%, bounds included
        (0.70, 0.80, "outside"),
        (1.20, 1.40, "outside"),  # wholly beyond one bound
        (0.80, 0.95, "inconclusive"),
        (1.10, 1.30, "inconclusive"),
        (0.5, 1.5, "inconclusive"),  # straddles
    ],
)
def test_verdict(low, high, expected):
    assert stats.verdict(low, high, 0.15) == expected
