"""Estimates, speedups, significance and drift on synthetic samples; the protocol on fake
candidates whose times are known."""
import math

import numpy as np
import pytest

from iree_dispatch_profiler.core import stats
from iree_dispatch_profiler.iree.timing import Sample
from iree_dispatch_profiler.measure.protocol import Candidate, Protocol, measure


def noisy(median: float, cv: float, n: int, seed: int) -> np.ndarray:
    return median * np.exp(np.random.default_rng(seed).normal(0, cv, n))


def test_estimate_interval_contains_median_and_narrows_with_samples():
    few, many = stats.estimate(noisy(10, 0.05, 8, 1)), stats.estimate(noisy(10, 0.05, 200, 1))
    for est in (few, many):
        assert est.low < est.median < est.high
    assert many.low < 10 < many.high
    assert many.relative_half_width < few.relative_half_width / 2
    assert 0.03 < many.cv < 0.07


def test_estimate_of_too_few_or_constant_samples():
    assert math.isnan(stats.estimate([]).median)
    assert math.isnan(stats.estimate([1.0, 2.0]).low)  # no interval from two samples
    constant = stats.estimate([3.0] * 5)
    assert (constant.low, constant.median, constant.high) == (3.0, 3.0, 3.0)


def test_paired_speedup_cancels_drift_common_to_both():
    drift = np.linspace(1.0, 1.5, 30)  # the machine slows down by half during the rounds
    base = 10 * drift * noisy(1, 0.01, 30, 2)
    fast = 5 * drift * noisy(1, 0.01, 30, 3)
    ratio = stats.speedup(base, fast)
    assert ratio.low < 2.0 < ratio.high
    assert ratio.relative_half_width < 0.01
    with pytest.raises(ValueError):
        stats.speedup(base, fast[:-1])


@pytest.mark.parametrize("median, low, high, significant", [
    (2.0, 1.9, 2.1, True),  # clearly faster
    (0.5, 0.45, 0.55, True),  # clearly slower
    (1.05, 0.98, 1.12, False),  # the interval holds 1
    (1.02, 1.01, 1.03, False),  # real but below the minimum effect
    (1.11, 1.014, 1.158, False),  # excludes 1, but its near end is no effect worth naming
    (1.10, 1.04, 1.16, True),
    (0.90, 0.86, 0.96, True),
])
def test_significant(median, low, high, significant):
    ratio = stats.Estimate(median, low, high, 0.0, 10)
    assert stats.significant(ratio, 0.03) is significant
    assert ("no significant difference" not in stats.verdict("b", "a", ratio, 0.03)) is significant


def test_the_across_sessions_interval_adds_the_between_session_spread():
    within = stats.Estimate(2.0, 1.98, 2.03, 0.01, 17)
    across = stats.across_sessions(within, 0.01)
    assert across.median == 2.0 and across.low < within.low and across.high > within.high
    # each side widened in quadrature: 1% + 1.96% -> 2.2%; 1.5% + 1.96% -> 2.47%
    assert across.low == pytest.approx(2.0 * (1 - math.hypot(0.01, 1.96 * 0.01)), rel=1e-3)
    assert across.high == pytest.approx(2.0 * (1 + math.hypot(0.015, 1.96 * 0.01)), rel=1e-3)
    # no spread between sessions: the same interval; no interval: nothing made up
    same = stats.across_sessions(within, 0.0)
    assert (same.low, same.high) == pytest.approx((within.low, within.high))
    assert not stats.across_sessions(stats.NO_ESTIMATE).has_interval
    # another session's 1.96 lies outside this session's interval but inside the wider one
    assert not within.low <= 1.96 <= within.high and across.low <= 1.96 <= across.high


def test_verdict_wording():
    assert stats.verdict("dt", "base", stats.Estimate(2.1, 1.95, 2.24, 0, 9), 0.03) == \
        "dt faster than base by 2.10x [1.95, 2.24]"
    assert stats.verdict("x", "base", stats.Estimate(0.5, 0.4, 0.6, 0, 9), 0.03).startswith(
        "x slower than base by 2.00x")


def test_drift_seen_only_when_early_and_late_rounds_separate():
    steady = noisy(10, 0.03, 12, 4)
    assert stats.drift(steady) == 0.0
    stepped = np.concatenate([noisy(10, 0.02, 6, 5), noisy(14.5, 0.02, 6, 6)])
    assert stats.drift(stepped) == pytest.approx(0.45, abs=0.05)
    assert stats.drift(stepped[:5]) == 0.0  # too few rounds to tell


class Fake:
    """A candidate whose time per call follows `times` (ms), one per round."""

    def __init__(self, name, times):
        self.times = iter(times)
        self.candidate = Candidate(name, self.sample)

    def sample(self, seconds):
        value = next(self.times)
        return Sample(True, ms=value) if value > 0 else Sample(False, "crashed (SIGSEGV)")


def test_protocol_stops_at_precision_and_reports_speedups():
    base, fast = Fake("default", noisy(10, 0.01, 500, 7)), Fake("c1", noisy(5, 0.01, 500, 8))
    result = measure([base.candidate, fast.candidate], "default",
                     Protocol(precision=0.02, time_budget=60))
    assert result.rounds == Protocol.min_rounds  # 1% noise: precise from the first check
    outcome = result.outcomes["c1"]
    assert outcome.precision_reached and outcome.speedup.low < 2.0 < outcome.speedup.high
    assert result.drift == "no"


def test_a_sentinel_is_sampled_every_round_and_only_watched():
    base, fast = Fake("default", [10.0] * 50), Fake("fast", [5.0] * 50)
    # a sentinel as noisy as can be: were it a candidate, precision would never be reached
    watch = Fake("sentinel", [1.0, 3.0] * 25)
    result = measure([base.candidate, fast.candidate], "default",
                     Protocol(precision=0.05, time_budget=60, min_rounds=6), sentinel=watch.candidate)
    assert result.rounds == 6 and "sentinel" not in result.outcomes
    assert len(result.sentinel.samples) == result.rounds and result.sentinel.runtime.n == 6
    assert result.outcomes["fast"].speedup.median == pytest.approx(2.0)


def test_a_re_confirmation_stops_once_its_candidate_is_settled_and_not_before():
    """A noisy bystander (never precise) would hold the rounds to the budget; the asked-about
    candidate's significant speedup ends them. One within the minimum effect does not."""
    def run(asked_ms):
        base, asked = Fake("default", noisy(10, 0.01, 500, 3)), Fake("answer", noisy(asked_ms, 0.01, 500, 4))
        bystander = Fake("data_tiling", noisy(10, 0.4, 500, 5))
        return measure([base.candidate, asked.candidate, bystander.candidate], "default",
                       Protocol(time_budget=60, max_rounds=60, settle="answer"))
    assert run(5.0).rounds == Protocol.min_rounds  # 2x: settled at the first check
    assert run(9.9).rounds == 60  # 1%: never significant, so the rounds run on
    assert run(5.0).outcomes["answer"].speedup.low > 1.5


def test_a_confirmation_stops_once_its_choice_is_decided_and_not_before():
    """A clear leader ends the rounds while a noisy bystander is still imprecise, and so does a
    runner-up shown within the minimum effect of it; a runner-up that may still beat it by
    more, or a leader within the minimum effect of the baseline, does not."""
    def run(leader_ms, runner_ms, cv=0.01):
        base = Fake("default", noisy(10, 0.01, 500, 3))
        leader, runner = Fake("a", noisy(leader_ms, cv, 500, 4)), Fake("b", noisy(runner_ms, cv, 500, 6))
        bystander = Fake("c", noisy(30, 0.4, 500, 5))
        return measure([base.candidate, leader.candidate, runner.candidate, bystander.candidate],
                       "default", Protocol(time_budget=60, max_rounds=60, decide=True))
    assert run(5.0, 8.0).rounds == Protocol.min_rounds  # 2x, and 1.6x ahead of the runner-up
    assert run(20.0, 25.0).rounds == Protocol.min_rounds  # all slower: the default stays
    assert run(5.0, 5.02).rounds == Protocol.min_rounds  # tied within 1%: either will do
    assert run(5.0, 5.02, cv=0.05).rounds > Protocol.min_rounds  # at first, b may be 3% faster
    assert run(9.9, 12.0).rounds == 60  # 1% over the baseline: never significant
    plain = Protocol(time_budget=60, max_rounds=60)
    assert measure([Fake("default", noisy(10, 0.01, 500, 3)).candidate,
                    Fake("a", noisy(5, 0.01, 500, 4)).candidate,
                    Fake("c", noisy(30, 0.4, 500, 5)).candidate], "default", plain).rounds == 60


def test_protocol_drops_a_failing_candidate_and_measures_the_rest():
    good = Fake("default", [10.0] * 100)
    bad = Fake("c1", [5.0, 5.0, -1, -1] + [5.0] * 100)  # fails, and fails again
    result = measure([good.candidate, bad.candidate], "default", Protocol(time_budget=60))
    assert result.outcomes["c1"].reason == "crashed (SIGSEGV)"
    assert result.outcomes["c1"].samples == []
    assert result.outcomes["default"].runtime.median == 10.0


def test_a_sample_that_fails_once_is_taken_again_and_said():
    """IREE's benchmark tool crashed once in 166 dispatches while a second test suite ran."""
    good = Fake("default", [10.0] * 100)
    once = Fake("c1", [5.0, -1] + [5.0] * 100)
    result = measure([good.candidate, once.candidate], "default", Protocol(time_budget=60))
    outcome = result.outcomes["c1"]
    assert not outcome.reason and outcome.retried == ["crashed (SIGSEGV)"]
    assert outcome.speedup.median == 2.0


def test_protocol_answers_drift_by_measuring_again():
    times = [10.0] * 6 + [15.0] * 200  # the machine changes state after six rounds
    base, other = Fake("default", times), Fake("c1", [t / 2 for t in times])
    result = measure([base.candidate, other.candidate], "default",
                     Protocol(time_budget=60, min_rounds=12))
    assert result.drift == "re-measured"
    assert result.outcomes["default"].runtime.median == 15.0  # only the new state counts


def test_rounds_longer_than_the_budget_still_reach_the_minimum_and_say_so():
    """A big problem: one round takes longer than the whole budget. The minimum rounds are
    reached anyway (an interval, a ranking), and the grown budget is said."""
    import time

    class Slow(Fake):
        def sample(self, seconds):
            time.sleep(0.03)
            return super().sample(seconds)

    base, fast = Slow("default", noisy(10, 0.02, 50, 9)), Slow("c1", noisy(5, 0.02, 50, 10))
    result = measure([base.candidate, fast.candidate], "default",
                     Protocol(time_budget=0.01, min_rounds=6))
    assert result.rounds == 6 and result.outcomes["c1"].speedup.has_interval
    assert result.budget_note.startswith("budget 0.01 s grown to") and "6 rounds" in result.budget_note
    assert result.ranking(0.03).startswith("best c1")


def test_an_estimate_without_an_interval_says_so_and_is_never_ranked():
    one = stats.estimate([8234.589])
    assert not one.has_interval and one.interval() == "[no interval: 1 round]"
    assert stats.estimate([1.0, 1.1, 1.2]).has_interval
    base, other = Fake("default", [10.0]), Fake("c1", [5.0])
    result = measure([base.candidate, other.candidate], "default",
                     Protocol(time_budget=0, min_rounds=1))
    assert result.rounds == 1 and result.ranking(0.03) == "nothing timed"


def test_a_device_profile_drops_the_runs_of_both_cold_calls():
    """A process's first two calls fault their transients in (2048x1280x5120 f32, packed: 110,
    109, then 80 ms a call); a sample is the median of the runs after them (two runs a call
    here: 10 ms cold, 1 and 1.2 ms warm); with one call dropped, a 3-call sample was 5.6."""
    from iree_dispatch_profiler.iree.timing import WARMUP_CALLS, steady_median

    assert WARMUP_CALLS == 2
    assert steady_median([10.0] * 4 + [1.0, 1.2] * 2, runs=2) == pytest.approx(1.1)
    assert steady_median([10.0] * 4 + [1.0, 1.2], runs=2) == pytest.approx(1.1)


def test_a_call_s_span_runs_from_its_first_dispatch_to_its_last_one_s_end():
    """A device profile's runs, `runs` a call, in calls one after another: each call's span
    (what is beyond it is between calls), not the profile's whole span nor one dispatch's."""
    import json

    from iree_dispatch_profiler.iree.timing import call_spans, host_events

    runs = [(0, 2_000_000, "a"), (2_500_000, 1_000_000, "b"),  # call 1: 3.5 ms
            (9_000_000, 2_000_000, "a"), (11_000_000, 3_000_000, "b")]  # call 2: 5 ms
    text = "\n".join(json.dumps({"type": "host_dispatch_event", "key": k, "duration_ns": d,
                                 "start_host_time_ns": s}) for s, d, k in reversed(runs))
    events = host_events(text + '\n{"type": "dispatch_summary"}\nnot json')
    assert events == runs  # in start order, the summary and a stray line skipped
    assert call_spans(events, 2) == pytest.approx([3.5, 5.0])
    assert call_spans(events, 4) == pytest.approx([14.0])  # one call of four runs
    assert call_spans(events[:3], 2) == pytest.approx([3.5])  # a call cut short: not counted
