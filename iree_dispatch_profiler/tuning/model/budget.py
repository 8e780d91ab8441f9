"""Phase 3: the trials spread over the model's tuning targets by expected gain, as TVM's
gradient-based task scheduler does: each target first gets a warm-up, then each further batch
goes to the target whose next trials are expected to save the most model time. That is its
time now (its dispatches' time under IREE, divided by the best verified speedup so far) times
the relative gain of its last batch, plus an exploration credit, and never more than its
distance to the roofline (as TVM's forward gradient bounds a task by what similar tasks
reach): its work at the session's compute ceiling. The credit is a share of that distance
(of its time where no roofline is known), divided by the batches it has had (TVM's forward
gradient falls as 1/trials): credited by its time, a target at 76% of its roofline that found
nothing kept taking every batch from one at 32% (Swin's window projection took 36 of 48
trials, its QK^T 4). A target within MIN_EFFECT of
its roofline is done: no trial could make it a difference the tool claims (ResNeXt's 1x1 convs
at 102% of the ceiling took 16 of its 24 trials). The total is --n-trial per target, as without
a scheduler (less for a target whose search the results store seeds); one target takes at most
CAP times its own."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import pandas as pd

from iree_dispatch_profiler.core import stats
from iree_dispatch_profiler.measure.calibration import CEILING_ELEMENT
from iree_dispatch_profiler.tuning.engine import search
from iree_dispatch_profiler.tuning.model.tuner import ModelTuner, TuningTarget
from iree_dispatch_profiler.tuning.records import OK, TrialWriter
from iree_dispatch_profiler.tuning.space import Space

WARM_UP = 3  # the first trials of every target: --n-trial divided by this (at least one batch)
EXPLORATION = 0.05  # the share of its distance to the roofline a target is credited with
CAP = 3


def floor_ms(target: TuningTarget, peak: dict | None, others: dict[str, float] | None = None
             ) -> float:
    """Its work a model call at the session's compute ceiling (`peak`), or at the ceiling of
    its inputs' element in `others` (element -> GFLOP/s); 0 (unknown) without one: an int8
    matmul past the f32 ceiling would be called done at a quarter of what avx512_vnni runs."""
    element = target.op.input_element
    gflops = peak["gflops"] if peak and element == CEILING_ELEMENT else (others or {}).get(element)
    return target.flops / (gflops * 1e6) if gflops else 0.0


@dataclass
class Task:
    target: TuningTarget
    space: Space
    limit: int  # its share of the trials: --n-trial, or less when the store seeds it
    rows: list[dict] = field(default_factory=list)
    floor_ms: float = 0.0  # its dispatches' work at the compute ceiling (0: either unknown)
    # the best speedup before its first batch (IREE's own config: 1) and after each batch
    bests: list[float] = field(default_factory=lambda: [1.0])
    done: bool = False  # its space, its early stop or the deadline ended it

    @property
    def best(self) -> float:
        """The best verified speedup of its trials; 1 (IREE's own config) when none is faster."""
        return max([float(r["speedup"]) for r in self.rows if r["status"] == OK] + [1.0])

    @property
    def ms(self) -> float:
        """Its dispatches' time per model call with its best config so far."""
        return float(self.target.ms) / self.best

    @property
    def headroom(self) -> float:
        """The time (ms) between its best so far and its roofline."""
        return max(0.0, self.ms - self.floor_ms)

    @property
    def at_roofline(self) -> bool:
        return self.headroom < stats.MIN_EFFECT * self.ms

    def expected_gain(self) -> float:
        """The model time (ms) its next batch is expected to save."""
        batches = len(self.bests) - 1
        last = 1 - self.bests[-2] / self.bests[-1] if batches else 0.0
        return min(self.ms * last + EXPLORATION * self.headroom / max(1, batches),
                   self.headroom)


def schedule(tuner: ModelTuner, tasks: list[Task], earlier: pd.DataFrame, writer: TrialWriter,
             deadline: float) -> None:
    """Each task's trials, by expected gain, in its `rows`; the allocation logged."""
    s = tuner.s
    total = sum(t.limit for t in tasks)

    def run(task: Task, trials: int, first: bool, until: float = deadline) -> None:
        tuner.focus = task.target.dispatches  # the candidates' time: these dispatches'
        before = len(task.rows)
        task.rows = search(tuner, task.target.op, task.space,
                           earlier if first else pd.DataFrame(task.rows), writer, until,
                           limit=min(len(task.rows) + trials, CAP * task.limit), resumed=first)
        task.bests.append(task.best)
        task.done = (len(task.rows) == before or len(task.rows) >= CAP * task.limit
                     or task.at_roofline)

    for task in tasks:
        # every target's first batch runs, however late it starts: its flag points and seeds
        # are measured even where the spaces and the store's lookups (slow on a loaded
        # machine) spent a short budget; past the deadline, that one batch
        late = time.perf_counter() >= deadline
        trials = s.batch_size if late else max(s.batch_size, task.limit // WARM_UP)
        run(task, min(task.limit, trials), first=True, until=math.inf if late else deadline)
    while time.perf_counter() < deadline:
        spent = sum(len(t.rows) for t in tasks)
        open_tasks = [t for t in tasks if not t.done]
        if spent >= total or not open_tasks:
            break
        run(next_task(open_tasks), min(s.batch_size, total - spent), first=False)
    log_allocation(tuner, tasks)


def next_task(open_tasks: list[Task]) -> Task:
    """The task whose next batch is expected to save the most model time."""
    return max(open_tasks, key=Task.expected_gain)


def log_allocation(tuner: ModelTuner, tasks: list[Task]) -> None:
    total_ms = sum(float(t.target.ms) for t in tasks) or 1.0
    tuner.log(f"Trials by expected gain ({sum(len(t.rows) for t in tasks)} over {len(tasks)} "
              f"target(s), --n-trial {tuner.s.n_trial} each on average):")
    for task in tasks:
        roofline = (f", {task.floor_ms / task.ms:.0%} of its roofline"
                    + (" (done there)" if task.at_roofline else "")) if task.floor_ms else ""
        tuner.log(f"  target {task.target.op.index}: {float(task.target.ms) / total_ms:6.1%} of "
                  f"the targets' time, {len(task.rows):>3} trials, best in the search "
                  f"{task.best:.2f}x ({float(task.target.ms):.3f} -> {task.ms:.3f} ms){roofline}")
