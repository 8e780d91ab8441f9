"""Every file the tuner writes, named after its output CSV X.csv: the one place for their names
(the tuner writes them, report/outputs.py finds them)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TuningPaths:
    output: Path  # X.csv: every trial

    @classmethod
    def beside(cls, path: Path, suffix: str) -> "TuningPaths":
        """The paths of the run whose file `path` is the one ending in `suffix`."""
        return cls(path.with_name(path.name.removesuffix(suffix) + ".csv"))

    def _named(self, suffix: str) -> Path:
        return self.output.with_name(self.output.stem + suffix)

    @property
    def work(self) -> Path:
        """Candidates' modules, builds, inputs and outputs."""
        return self._named("_work")

    @property
    def log(self) -> Path:
        return self.output.with_suffix(".log")

    @property
    def run(self) -> Path:
        """What the run was begun with: a rerun resumes only the same run."""
        return self._named("_run.json")

    @property
    def machine(self) -> Path:
        """The machine's state at the start and end of each session of the run."""
        return self._named("_machine.json")

    # single ops and models
    @property
    def tuning_spec(self) -> Path:
        return self._named("_tuning_spec.mlir")

    @property
    def best_flags(self) -> Path:
        """A winning flag point's flags (single op), or the flags a model ships with."""
        return self._named("_best_flags.txt")

    # single ops
    @property
    def best_module(self) -> Path:
        return self._named("_best.mlir")

    @property
    def spec_flags(self) -> Path:
        """The flags a data-tiled config in the spec needs."""
        return self._named("_spec_flags.txt")

    @property
    def answer(self) -> Path:
        return self._named("_answer.json")

    @property
    def progress_plot(self) -> Path:
        return self._named("_progress.png")

    # models
    @property
    def flags_record(self) -> Path:
        return self._named("_flags.csv")

    @property
    def rewrites_record(self) -> Path:
        return self._named("_rewrites.csv")

    @property
    def rewritten_source(self) -> Path:
        """The model rewritten (after IREE's input phase) where a source rewrite won: what the
        answer compiles in place of the model."""
        return self._named("_source.mlir")

    @property
    def ranking(self) -> Path:
        return self._named("_dispatches.csv")

    def ranking_under(self, flags: str) -> Path:
        """The ranking under flags adopted after tuning (flags and spec compounding)."""
        return self._named(f"_dispatches_{flags}.csv")

    @property
    def rejected_spec(self) -> Path:
        """A spec whose model's outputs disagree, kept to look at."""
        return self._named("_tuning_spec_rejected.mlir")

    @property
    def compile_script(self) -> Path:
        return self._named("_compile.sh")

    @property
    def tuned_vmfb(self) -> str:
        """What the compile script writes, beside where it is run."""
        return f"{self.output.stem}_tuned.vmfb"

    @property
    def answer_build(self) -> Path:
        """The model's answer as the tuner built and timed it (benchmarks time it again)."""
        return self.work / "model_tuned.vmfb"

    @property
    def model_report(self) -> Path:
        return self._named("_model_report.md")

    @property
    def model_plot(self) -> Path:
        return self._named("_model.png")

    @property
    def model_summary(self) -> Path:
        return self._named("_model.json")
