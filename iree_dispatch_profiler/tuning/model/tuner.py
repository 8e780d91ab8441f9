"""The model tuner: candidates are the whole model compiled with a one-entry spec, timed on the
current target's dispatches inside the model; the model lowered past IREE's input phase."""
from __future__ import annotations

import dataclasses
import hashlib
import shlex
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from iree_dispatch_profiler.iree import modules, tunable
from iree_dispatch_profiler.iree.launchers import SPEC_FLAG
from iree_dispatch_profiler.iree.timing import Benchmark
from iree_dispatch_profiler.measure.calibration import CEILING_ELEMENT
from iree_dispatch_profiler.tuning import flags as module_flags
from iree_dispatch_profiler.tuning import space as tuning_space
from iree_dispatch_profiler.tuning import spec as tuning_spec
from iree_dispatch_profiler.tuning.engine import Build, Settings, Toolchain, Tuner
from iree_dispatch_profiler.tuning.records import Log

# Root ops are marked for the spec check; executables are dumped to find them.
SURVEY_FLAGS = ["--iree-codegen-add-tuner-attributes"]


# the seconds a model is tuned in, on 2 cores
MODEL_SECONDS = 600.0


@dataclass
class TuningTarget:
    """Dispatches whose root ops share a spec matcher's key, tuned as one op."""

    op: tunable.TunableOp  # its index is the target's number
    dispatches: tuple[str, ...]
    ms: float
    flops: float = 0.0  # its dispatches' work per model call (0: not known)


class ModelTuner(Tuner):
    """Candidates are the whole model compiled with a one-entry spec; a candidate's time is that
    of the current target's dispatches inside the model."""

    focus: tuple[str, ...] = ()  # the dispatches of the target being tuned
    source = "model"  # its results in the store: an op's time inside its model
    data_tiling: Build | None = None  # the model with IREE's data tiling, compiled once
    # The model as IREE compiles it by default. `default`, what candidates are measured
    # against, is the model with the chosen flags alone (it, when none won): the spec is tuned
    # under the flags it ships with.
    iree_default: Build | None = None
    # The source tuned, compiled with IREE's default flags: the rewritten model's build where
    # a source rewrite was adopted (rewrite_search), whose name `rewrite` then is.
    source_default: Build | None = None
    rewrite: str = ""

    def __init__(self, s: Settings, toolchain: Toolchain, log: Log, lowered: Path, function: str):
        self.lowered, self.function = lowered, function
        self.model = s.input  # the user's model (s.input becomes a rewritten source if adopted)
        self.base_flags: list[str] = []  # the chosen flags: every candidate compiles with them
        # the flags an adopted rewrite needs (Rewrite.flags): last on every build of the source
        self.source_flags: list[str] = []
        self._data_tiling_said = False
        self._at_inputs_said = ""  # at_inputs' last line: said again only where it differs
        # at_inputs' builds of the source at the inputs' sizes: (source, flags) -> its roots
        self._at_inputs_roots: dict[tuple[Path, tuple[str, ...]], dict | None] = {}
        super().__init__(s, toolchain, log)

    def signature_source(self) -> Path:
        return self.lowered

    def flags_build(self, name: str) -> str:
        """The build name of a flag set `name`: under a source rewrite, apart from the model's
        own builds (IREE's data tiling of the model is `model_data_tiling`)."""
        return f"{'source' if self.rewrite else 'model'}_{name}"

    def build(self, name: str, text: str | None, flags: Sequence[str], config=None,
              source: Path | None = None) -> Build:
        """As Tuner.build; the source tuned (not another `source`) with the flags an adopted
        rewrite needs, last: they override a flag set's (ukernels)."""
        extra = self.source_flags if source is None else []
        return super().build(name, text, [*flags, *extra], config, source)

    def without_flags(self) -> None:
        """Candidates compile with no flags and are measured against the source's default."""
        self.default, self.base_flags = self.source_default or self.iree_default, []
        self.reference = Tuner.reference + (" on the rewritten source" if self.rewrite else "")

    def tile_outputs(self) -> str:
        return f"{self.s.paths.tuning_spec.name} (with the other targets' winners)"

    def build_point(self, op, point, name: str) -> Build:
        config = tuning_space.configuration(op, point)
        spec = self.work / f"{name}_spec.mlir"
        spec.write_text(tuning_spec.spec([(op, config)]))
        return self.build(name, None, [*self.base_flags, f"{SPEC_FLAG}={spec}"], config)

    def benchmark(self, build: Build, function: str, per_dispatch: bool = True) -> Benchmark:
        bench = super().benchmark(build, function, per_dispatch=True)  # attributed per dispatch
        bench.dispatches = self.focus
        return bench

    def build_surveyed(self, name: str, flags: list[str],
                       text: str | None = None) -> tuple[Build, dict]:
        """A build (of the model, or of `text`) with its root ops found in its dumped
        executables."""
        dump = self.work / f"{name}_benchmarks"
        build = self.build(name, text, [*flags, *SURVEY_FLAGS,
                                        f"--iree-hal-dump-executable-benchmarks-to={dump}"])
        roots = ({} if build.reason else
                 tunable.dispatch_roots(dump, self.function, self.work / f"{name}_configs"))
        return build, roots

    def at_inputs(self, roots: dict, say: bool = True) -> dict:
        """`roots` (of the source under the candidates' flags) where a root of dynamic shapes
        has the loop bounds it takes at the model's inputs, found (loops_at_inputs) in the
        source compiled with the sizes it reads of its arguments made constants; said unless
        not `say`. Its types stay dynamic, so the spec tuned at these sizes configures the
        model the user runs, at any size (a dynamic batch's matmuls: no tunable dispatch
        before)."""
        dynamic = {d: r for d, r in roots.items() if r.op is not None and not r.op.loops}
        shapes = [a.shape for a in modules.concrete(self.signatures[self.function],
                                                    self.s.inputs).arguments]
        if not dynamic or any(None in shape for shape in shapes):
            return roots
        source = self.lowered if self.s.input == self.model else self.s.input
        key = (source, tuple(self.base_flags))
        if key not in self._at_inputs_roots:  # adopted flags come back: compiled once
            text = modules.with_static_dims(modules.text_of(source), self.function, shapes)
            flags = hashlib.sha256(shlex.join(self.base_flags).encode()).hexdigest()[:8]
            build, found = self.build_surveyed(f"at_inputs_{flags}", self.base_flags, text)
            self._at_inputs_roots[key] = None if build.reason else found
            if build.reason and say:
                self.log(f"Dispatches of dynamic shapes stay untuned: the model at its inputs' "
                         f"sizes does not compile: {build.reason.splitlines()[0][:200]}")
        static = self._at_inputs_roots[key]
        if static is None:
            return roots
        found = dict(roots)
        for dispatch, root in dynamic.items():
            if loops := loops_at_inputs(dispatch, root, static):
                found[dispatch] = dataclasses.replace(
                    root, op=dataclasses.replace(root.op, loops=loops))
        resolved = [found[d].op for d in dynamic if found[d].op.loops]
        line = (f"Dispatches of dynamic shapes at the inputs' sizes: {len(resolved)} of "
                f"{len(dynamic)} ({', '.join(f'{o.name} {o.shape}' for o in resolved)})")
        if say and line != self._at_inputs_said:
            self._at_inputs_said = line
            self.log(line)
        return found

    def ceilings(self, elements) -> dict[str, float]:
        """element -> GFLOP/s: the compute ceilings of contractions of `elements` other than
        the session's (calibration.element_ceilings), each said once when first measured."""
        said = set(self.calibration.elements)
        found = self.calibration.element_ceilings(set(elements) - {CEILING_ELEMENT})
        for element, (kernel, r) in found.items():
            if element not in said:
                self.log(f"Ceiling of {element} contractions: {r.rate:.0f} GFLOP/s "
                         f"[{r.low:.0f}, {r.high:.0f}] ({kernel.about})")
        return {element: r.rate for element, (_, r) in found.items()}

    def data_tiling_build(self) -> Build:
        """IREE's data tiling (compiled once, by the flag search or here); its failure to
        compile the model said once, on a line of its own."""
        if self.data_tiling is None:  # of the model itself, whatever source is tuned
            self.data_tiling = self.build("model_data_tiling", None,
                                          module_flags.DATA_TILING_SET.args,
                                          source=self.model)
        if self.data_tiling.reason and not self._data_tiling_said:
            self._data_tiling_said = True
            self.log("IREE data tiling + ukernels does not compile this model: "
                     f"{self.data_tiling.reason.splitlines()[0][:300]}")
        return self.data_tiling


def loops_at_inputs(dispatch: str, root: tunable.DispatchRoot,
                    static: dict[str, tunable.DispatchRoot]) -> tuple[int, ...]:
    """The loop bounds of the dynamic `root` of `dispatch` at the inputs' sizes, from the roots
    in `static` (the model at those sizes) of its name and kind: one whose bounds agree with
    its static ones gives its own; else one whose bounds hold its static ones and one size
    besides gives that size to each dynamic bound (at static sizes IREE's data tiling may swap
    a matmul's operands). Those of the dispatch of its number first; () where they differ."""
    if root.op is None or None not in root.bounds:
        return ()
    known = Counter(b for b in root.bounds if b is not None)
    fills: dict[str, tuple[int, ...]] = {}
    for name, other in static.items():
        if (other.op is None or other.op.kind != root.op.kind or other.name != root.name
                or len(other.op.loops) != len(root.bounds)):
            continue
        loops, rest = other.op.loops, Counter(other.op.loops) - known
        if all(b in (None, s) for b, s in zip(root.bounds, loops)):
            fills[name] = loops
        elif not known - Counter(loops) and len(rest) == 1:
            fills[name] = tuple(next(iter(rest)) if b is None else b for b in root.bounds)
    same = {v for d, v in fills.items() if _number(d) == _number(dispatch)}
    options = same or set(fills.values())
    return options.pop() if len(options) == 1 else ()


def _number(dispatch: str) -> str:
    """A dispatch's number in its function (`main$async_dispatch_3_...` -> '3')."""
    return dispatch.partition("_dispatch_")[2].partition("_")[0]
