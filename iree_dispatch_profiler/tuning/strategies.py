"""Search strategies behind one small interface, as in Kernel Tuner: a strategy proposes points
of a space (by index) and learns their scores. Scores are speedups over IREE's default: higher
is better; None is a point that failed (compile error, wrong result) and is never proposed
again.

grid and random need nothing; xgb is autotvm's recipe (an XGBoost rank model over point
features, refit on every batch, proposals by simulated annealing on the model, epsilon-greedy
exploration); tpe is Optuna's Tree-structured Parzen Estimator.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

NAMES = ("grid", "random", "xgb", "tpe")
# The seed's config names them after autotvm's classes.
CONFIG_NAMES = {"GridTuner": "grid", "RandomTuner": "random", "XGBoostTuner": "xgb",
                "TPETuner": "tpe"}


class Strategy:
    def __init__(self, knobs: Sequence[dict], features: np.ndarray, seed: int):
        self.knobs = list(knobs)
        self.features = features
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.scores: dict[int, float | None] = {}
        self.pending: set[int] = set()

    @property
    def size(self) -> int:
        return len(self.knobs)

    def untried(self) -> list[int]:
        return [i for i in range(self.size) if i not in self.scores and i not in self.pending]

    def ask(self, n: int) -> list[int]:
        chosen = self._propose(min(n, len(self.untried())))
        self.pending.update(chosen)
        return chosen

    def claim(self, indices: Sequence[int]) -> None:
        """Points tried whatever the strategy would propose (the space's seeds)."""
        self.pending.update(indices)

    def tell(self, index: int, score: float | None) -> None:
        self.pending.discard(index)
        self.scores[index] = score

    def _propose(self, n: int) -> list[int]:
        raise NotImplementedError

    def _random(self, n: int, exclude: Sequence[int] = ()) -> list[int]:
        pool = [i for i in self.untried() if i not in set(exclude)]
        return [int(i) for i in self.rng.permutation(pool)[:n]]


class GridStrategy(Strategy):
    def _propose(self, n: int) -> list[int]:
        return self.untried()[:n]


class RandomStrategy(Strategy):
    def _propose(self, n: int) -> list[int]:
        return self._random(n)


class XGBoostStrategy(Strategy):
    """autotvm's XGBTuner: until `plan_size` points are known, random; then a pairwise-rank
    model predicts every point's relative speed and annealing walks find the best predicted
    untried points; each slot is a random point with probability `epsilon`."""

    plan_size = 8
    epsilon = 0.05
    walkers = 32
    steps = 40

    def _propose(self, n: int) -> list[int]:
        known = [i for i, s in self.scores.items()]
        if len(known) < self.plan_size or n == 0:
            return self._random(n)
        predicted = self._fit_predict(known)
        candidates = self._anneal(predicted)
        chosen: list[int] = []
        for index in candidates:
            if len(chosen) == n:
                break
            if self.rng.random() < self.epsilon:
                chosen += self._random(1, chosen)
            elif index not in chosen:
                chosen.append(index)
        return chosen + self._random(n - len(chosen), chosen)

    def _fit_predict(self, known: list[int]) -> np.ndarray:
        import xgboost

        scores = np.array([self.scores[i] or 0.0 for i in known])
        labels = scores / max(scores.max(), 1e-9)
        data = xgboost.DMatrix(self.features[known], label=labels)
        params = {"objective": "rank:pairwise", "max_depth": 3, "eta": 0.3, "gamma": 1e-4,
                  "min_child_weight": 1, "subsample": 1.0, "seed": self.seed, "nthread": 1,
                  "verbosity": 0}
        booster = xgboost.train(params, data, num_boost_round=40)
        return booster.predict(xgboost.DMatrix(self.features))

    def _anneal(self, predicted: np.ndarray) -> list[int]:
        """Untried points visited by annealing walks over one-knob moves, best predicted first."""
        untried = set(self.untried())
        if not untried:
            return []
        neighbours = self._neighbours()
        walkers = [int(i) for i in self.rng.choice(sorted(untried), min(self.walkers, len(untried)),
                                                   replace=False)]
        seen = set(walkers)
        for step in range(self.steps):
            temperature = max(1e-3, 1.0 - step / self.steps)
            for w, current in enumerate(walkers):
                options = neighbours[current]
                if not options:
                    continue
                proposal = options[int(self.rng.integers(len(options)))]
                gain = predicted[proposal] - predicted[current]
                if gain > 0 or self.rng.random() < math.exp(gain / temperature):
                    walkers[w] = proposal
                    seen.add(proposal)
        return sorted((i for i in seen if i in untried), key=lambda i: -predicted[i])

    def _neighbours(self) -> list[list[int]]:
        if not hasattr(self, "_neighbour_lists"):
            keys = [tuple(sorted(k.items())) for k in self.knobs]
            by_rest: dict = {}
            for index, key in enumerate(keys):
                for position in range(len(key)):
                    by_rest.setdefault((position, key[:position] + key[position + 1:]), []).append(index)
            self._neighbour_lists = [
                sorted({j for position in range(len(key))
                        for j in by_rest[(position, key[:position] + key[position + 1:])]} - {i})
                for i, key in enumerate(keys)]
        return self._neighbour_lists


class TPEStrategy(Strategy):
    """Optuna's TPE over the knobs as categorical parameters. A combination that is not a point
    of the space is told the worst score, so the sampler learns where the space ends."""

    def __init__(self, knobs: Sequence[dict], features: np.ndarray, seed: int):
        super().__init__(knobs, features, seed)
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.study = optuna.create_study(
            direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=8))
        self.values = {name: sorted({k[name] for k in self.knobs}, key=str)
                       for name in (self.knobs[0] if self.knobs else {})}
        self.index = {tuple(sorted(k.items())): i for i, k in enumerate(self.knobs)}
        self.trials: dict[int, object] = {}

    def _propose(self, n: int) -> list[int]:
        chosen: list[int] = []
        for _ in range(50 * max(n, 1)):
            if len(chosen) == n:
                break
            trial = self.study.ask()
            point = {name: trial.suggest_categorical(name, values) for name, values in self.values.items()}
            index = self.index.get(tuple(sorted(point.items())))
            if index is None:
                self.study.tell(trial, 0.0)
            elif index in self.scores:
                self.study.tell(trial, self.scores[index] or 0.0)
            elif index in self.pending or index in chosen:
                self.study.tell(trial, state=_pruned())
            else:
                self.trials[index] = trial
                chosen.append(index)
        return chosen + self._random(n - len(chosen), chosen)

    def tell(self, index: int, score: float | None) -> None:
        super().tell(index, score)
        trial = self.trials.pop(index, None)
        if trial is not None:
            self.study.tell(trial, score or 0.0)


def _pruned():
    import optuna

    return optuna.trial.TrialState.PRUNED


STRATEGIES = {"grid": GridStrategy, "random": RandomStrategy, "xgb": XGBoostStrategy,
              "tpe": TPEStrategy}


def make(name: str, knobs: Sequence[dict], features: np.ndarray, seed: int) -> Strategy:
    return STRATEGIES[name](knobs, features, seed)
