"""The measurement protocol: candidates timed in interleaved rounds (baseline, c1, c2, ...,
baseline, c1, ...) so that drift hits them all alike, until every speedup over the baseline is
known to the wanted precision or the time budget runs out. Drift of the baseline between its
early and late rounds is answered by measuring again; a sample that fails is tried once more,
and a candidate is dropped only when that fails too."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from iree_dispatch_profiler.core import stats
from iree_dispatch_profiler.iree.timing import Sample


@dataclass(frozen=True)
class Protocol:
    precision: float = 0.02  # wanted half-width of each speedup interval, relative
    time_budget: float = 20.0  # seconds for all rounds of one set of candidates
    seconds_per_sample: float = 0.05  # timed work per candidate per round
    # Enough for an interval and for the drift check (2 per third): reached whatever the
    # budget, which grows to what they take when one round is long (said in Measurement).
    min_rounds: int = 6
    max_rounds: int = 500
    remeasures: int = 2  # how often a drift may restart the rounds
    # A re-confirmation asks one question: does this candidate still differ from the baseline?
    # Its rounds stop once that candidate's speedup is significant either way.
    settle: str | None = None
    # A confirmation asks which candidate to use: its rounds stop once the fastest one's
    # speedup is significant either way and, when faster, no other can beat it by 3%.
    decide: bool = False


@dataclass
class Candidate:
    name: str
    measure: Callable[[float], Sample]  # seconds wanted -> ms per computation


@dataclass
class Outcome:
    name: str
    samples: list[float] = field(default_factory=list)  # ms, one per round
    reason: str = ""  # why it stopped being measured (a crash, a timeout)
    runtime: stats.Estimate = stats.NO_ESTIMATE
    speedup: stats.Estimate | None = None  # baseline / this; None for the baseline itself
    precision_reached: bool = False
    retried: list[str] = field(default_factory=list)  # failures a second try got past


@dataclass
class Measurement:
    baseline: str | None
    outcomes: dict[str, Outcome]
    rounds: int = 0
    seconds: float = 0.0
    drift: str = "no"  # no / re-measured (seen and measured again) / yes (seen at the end)
    budget: float = 0.0  # the time budget asked for
    # a fixed kernel timed in the same rounds, never ranked: how the machine ran meanwhile
    sentinel: Outcome | None = None

    @property
    def budget_note(self) -> str:
        """'' or why the rounds took longer than the budget."""
        if not self.rounds or self.seconds <= 1.5 * self.budget:
            return ""
        return (f"budget {self.budget:g} s grown to {self.seconds:.0f} s to reach "
                f"{self.rounds} rounds ({self.seconds / self.rounds:.1f} s per round)")

    def timed(self) -> list[Outcome]:
        return [o for o in self.outcomes.values() if not o.reason and o.samples]

    def ranking(self, min_effect: float) -> str:
        """The fastest candidate, named only when it beats the runner-up significantly."""
        # A runtime without an interval is never ranked: one round says nothing of its spread.
        timed = sorted((o for o in self.timed() if o.runtime.has_interval),
                       key=lambda o: o.runtime.median)
        if len(timed) < 2:
            return f"only {timed[0].name} timed" if timed else "nothing timed"
        best, second = timed[:2]
        ratio = stats.speedup(second.samples, best.samples)
        if stats.significant(ratio, min_effect):
            return (f"best {best.name}, faster than runner-up {second.name} by "
                    f"{ratio.median:.2f}x {ratio.interval('.2f')}")
        tied = [o.name for o in timed
                if not stats.significant(stats.speedup(o.samples, best.samples), min_effect)]
        return f"leaders tied (no significant difference): {', '.join(tied)}"


def measure(candidates: Sequence[Candidate], baseline: str | None, protocol: Protocol,
            on_round: Callable[[Measurement], None] | None = None,
            sentinel: Candidate | None = None) -> Measurement:
    """Rounds until precision, budget or max_rounds; candidates that fail drop out with a
    reason. With no baseline, precision applies to each runtime interval instead. A
    `sentinel` is sampled once per round too, and only watched (Measurement.sentinel)."""
    result = Measurement(baseline if any(c.name == baseline for c in candidates) else None,
                         {c.name: Outcome(c.name) for c in candidates},
                         budget=protocol.time_budget,
                         sentinel=Outcome(sentinel.name) if sentinel else None)
    active = list(candidates)
    start = time.perf_counter()
    remeasures, since_restart = protocol.remeasures, 0
    while active and result.rounds < protocol.max_rounds:
        shift = result.rounds % len(active)  # rotate, so no candidate always runs first
        for candidate in active[shift:] + active[:shift]:
            sample = candidate.measure(protocol.seconds_per_sample)
            outcome = result.outcomes[candidate.name]
            if not sample.ok:  # IREE's tools crash now and then on a busy machine: try again
                again = candidate.measure(protocol.seconds_per_sample)
                if again.ok:
                    outcome.retried.append(sample.reason)
                    sample = again
            if sample.ok:
                outcome.samples.append(sample.ms)
            else:
                outcome.reason, outcome.samples = sample.reason, []
        active = [c for c in active if not result.outcomes[c.name].reason]
        watched = result.sentinel
        if sentinel is not None and watched is not None and not watched.reason:
            sample = sentinel.measure(protocol.seconds_per_sample)
            if sample.ok:
                watched.samples.append(sample.ms)
            else:
                watched.reason = sample.reason
        result.rounds += 1
        since_restart += 1
        elapsed = time.perf_counter() - start
        if since_restart >= protocol.min_rounds:
            if remeasures and result.baseline and _drifted(result):
                _keep_last_third(result)
                remeasures -= 1
                result.drift, since_restart = "re-measured", len(result.timed()[0].samples)
                continue
            _estimate(result, protocol, runtimes=False)
            if all(o.precision_reached for o in result.timed()) or _settled(result, protocol):
                break
        if on_round is not None:
            on_round(result)
        if elapsed > protocol.time_budget and since_restart >= protocol.min_rounds:
            break
    result.seconds = time.perf_counter() - start
    if result.sentinel is not None:
        result.sentinel.runtime = stats.estimate(result.sentinel.samples)
    if result.baseline and _drifted(result):
        result.drift = "yes"
    _estimate(result, protocol, runtimes=True)
    return result


def fastest_significant(outcomes: dict[str, Outcome]) -> str | None:
    """The name whose speedup over the baseline is the largest of those significantly faster
    (stats.significant at the minimum effect); None if none is."""
    faster = {n: o.speedup.median for n, o in outcomes.items() if not o.reason
              and o.speedup is not None and o.speedup.median > 1
              and stats.significant(o.speedup, stats.MIN_EFFECT)}
    return max(faster, key=lambda n: faster[n]) if faster else None


def _drifted(result: Measurement) -> bool:
    outcome = result.outcomes[result.baseline]
    return not outcome.reason and stats.drift(outcome.samples) != 0.0


def _keep_last_third(result: Measurement) -> None:
    """Drop the rounds before the change: they measured another machine state."""
    watched = [result.sentinel] if result.sentinel and result.sentinel.samples else []
    for outcome in result.timed() + watched:
        outcome.samples = outcome.samples[-(len(outcome.samples) // 3):]


def _settled(result: Measurement, protocol: Protocol) -> bool:
    asked = result.outcomes.get(protocol.settle) if protocol.settle else None
    if asked is not None:
        return asked.speedup is not None and stats.significant(asked.speedup, stats.MIN_EFFECT)
    return protocol.decide and _decided(result)


def _decided(result: Measurement) -> bool:
    """The fastest candidate is significantly faster or slower than the baseline and, when
    faster, no other can be faster than it by the minimum effect: more rounds would not
    change the choice by an effect worth naming."""
    ranked = sorted(((o.speedup, o) for o in result.timed() if o.speedup is not None),
                    key=lambda pair: -pair[0].median)
    if not ranked or not stats.significant(ranked[0][0], stats.MIN_EFFECT):
        return False
    best = ranked[0][1]
    return ranked[0][0].median < 1 or all(
        stats.speedup(other.samples, best.samples).low > 1 / (1 + stats.MIN_EFFECT)
        for _, other in ranked[1:])


def _estimate(result: Measurement, protocol: Protocol, runtimes: bool) -> None:
    base = result.outcomes.get(result.baseline) if result.baseline else None
    base_ok = base is not None and not base.reason
    for outcome in result.timed():
        if runtimes or not base_ok:
            outcome.runtime = stats.estimate(outcome.samples)
        if base_ok and outcome is not base:
            outcome.speedup = stats.speedup(base.samples, outcome.samples)
            width = outcome.speedup.relative_half_width
        elif not base_ok:
            width = outcome.runtime.relative_half_width
        else:
            continue
        outcome.precision_reached = width <= protocol.precision
    if base_ok:  # the baseline's precision is that of the speedups measured against it
        base.precision_reached = all(o.precision_reached for o in result.timed() if o is not base)
