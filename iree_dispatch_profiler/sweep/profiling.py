"""Profiling a sweep: each operation's dispatches verified against its reference, then timed
(with numpy beside them when asked) in interleaved rounds, into PerformanceResults."""
from __future__ import annotations

import shlex
from pathlib import Path

from iree_dispatch_profiler.core.library import Target
from iree_dispatch_profiler.iree.machines import Here, Remote
from iree_dispatch_profiler.iree.launchers import run_module
from iree_dispatch_profiler.iree.target import machine_facts, target_summary
from iree_dispatch_profiler.iree.tools import IreeTools
from iree_dispatch_profiler.iree.timers import DEFAULT_SOURCE, Timer, Timers
from iree_dispatch_profiler.store import results as results_store
from iree_dispatch_profiler.sweep.baselines import NumpyKernel
from iree_dispatch_profiler.sweep.build import CompileRecord
from iree_dispatch_profiler.sweep.manifest import Dispatch, Manifest
from iree_dispatch_profiler.iree import tunable
from iree_dispatch_profiler.ops import cuda_tiles
from iree_dispatch_profiler.measure import calibration
from iree_dispatch_profiler.measure.calibration import MachineState
from iree_dispatch_profiler.measure.protocol import Candidate, Protocol, measure
from iree_dispatch_profiler.sweep.performance_report import (MACHINE_STATE_DURING, PROVIDER_IREE,
                                                             PROVIDER_NUMPY, PerformanceResult)
from iree_dispatch_profiler.measure.verification import ReferenceCache


class Profiler:
    """Verifies and times the dispatches of one manifest, operation by operation, on `machine`
    (this one, or a --profile-on worker)."""

    def __init__(self, manifest: Manifest, target: Target, tools: IreeTools, machine: Here | Remote,
                 device: str, protocol: Protocol, verify: bool, profile: bool, run_timeout: float,
                 timing_source: str = DEFAULT_SOURCE):
        self.runner = machine.run  # where dispatches run
        self.timers = Timers(timing_source, tools, machine.run, manifest.root)
        self.manifest = manifest
        self.device = device
        self.tools = tools
        self.protocol = protocol
        self.verification_enabled, self.profiling_enabled = verify, profile
        self.run_timeout = run_timeout
        cpu = target.cpu_target
        self.environment = {
            "target": target.name, **machine_facts(device, machine.facts, machine.label),
            "IREE version": manifest.iree_version,
            "vector bytes": cpu.native_vector_bytes if cpu else "N/A",
            "cpu features": " ".join(cpu.enabled_features) if cpu else "N/A",
        }
        self.target_summary = target_summary(target)
        # set by the caller: the calibration's sentinel, and the state it is compared with
        self.sentinel: Candidate | None = None
        self.machine_start: MachineState | None = None
        self.store: results_store.Store | None = None  # where verified, timed rows are kept
        self.target = target
        self.session = results_store.now()

    def result_for(self, operation, configuration: str, provider: str = PROVIDER_IREE) -> PerformanceResult:
        return PerformanceResult(
            dispatch=f"{operation.name}_{configuration}", operation=operation.name,
            configuration=configuration, arguments=operation.arguments,
            operation_fields=operation.report_fields(), flops=operation.flops,
            bytes=operation.bytes, provider=provider, target_summary=self.target_summary,
            environment=dict(self.environment))

    def profile_operation(self, operation, dispatches: list[Dispatch], with_numpy: bool,
                          on_round=None) -> list[PerformanceResult]:
        """Verify each configuration, then time the verified ones (and numpy) in interleaved
        rounds, so that their speedups over default come from the same machine state;
        `on_round(measurement)` after each round (progress)."""
        cache = ReferenceCache(self.manifest.reference_folder(operation), operation,
                               cuda_tiles.truncating_block(self.target, operation))
        results, candidates = [], []
        for dispatch in dispatches:
            result, benchmark = self.prepare(dispatch, cache)
            results.append(result)
            if benchmark is not None:
                candidates.append((result.configuration, benchmark))
        if with_numpy:
            result, kernel = self.prepare_numpy(operation, cache)
            results.append(result)
            candidates.append((result.configuration, kernel))
        if self.profiling_enabled and candidates:
            measured = measure([Candidate(name, timer.sample) for name, timer in candidates],
                               "default", self.protocol, on_round, self.sentinel)
            sources = dict(candidates)
            meanwhile = calibration.during(measured.sentinel)
            disturbed = calibration.disturbed(self.machine_start, meanwhile)
            for result in results:
                if result.configuration in measured.outcomes:
                    note = "; ".join(n for n in (measured.budget_note, disturbed) if n)
                    result.set_timing(measured.outcomes[result.configuration], measured.drift,
                                      note, sources[result.configuration].source)
                    if meanwhile is not None:
                        result.environment[MACHINE_STATE_DURING] = meanwhile.to_json()
            self.keep(dispatches, results)
        return results

    def close(self) -> None:
        self.timers.close()

    def keep(self, dispatches: list[Dispatch], rows: list[PerformanceResult]) -> None:
        """The operation's verified, timed IREE rows into the results store, under the op's
        signature as the tuner sees it (read from its MLIR), so that a tuning of the same op
        finds them; a failing store is said once and left."""
        timed = [r for r in rows if r.provider == PROVIDER_IREE and r.verification == "SUCCESS"
                 and r.runtime.has_interval and r.config_applied != "no"]
        default = next((r.runtime.median for r in timed if r.configuration == "default"), None)
        if self.store is None or not timed or not dispatches or self.target.cpu_target is None:
            return
        try:
            found = tunable.find(self.manifest.paths(dispatches[0]).mlir)
        except Exception:  # an op the tuner cannot read is not kept
            return
        if len(found) != 1:
            return
        fields = results_store.context(found[0], self.target.cpu_target,
                                       self.manifest.iree_version,
                                       f"{self.manifest.root} {self.session}",
                                       self.environment.get("timed on", ""), "sweep")
        records = [{**fields, "candidate": r.configuration,
                    "flags": r.environment.get("compile flags", ""),
                    "median_ms": r.runtime.median, "ci_low_ms": r.runtime.low,
                    "ci_high_ms": r.runtime.high, "default_ms": default,
                    # the default is the reference: 1 by definition
                    "speedup": r.speedup.median if r.speedup else 1.0,
                    "speedup_ci_low": r.speedup.low if r.speedup else None,
                    "speedup_ci_high": r.speedup.high if r.speedup else None,
                    "timing_source": r.timing_source} for r in timed]
        try:
            self.store.record(records)
        except Exception as error:
            print(f"warning: results store {self.store.url}: {type(error).__name__}; "
                  "no longer recording")
            self.store = None

    def prepare_numpy(self, operation, cache: ReferenceCache) -> tuple[PerformanceResult, NumpyKernel]:
        """numpy/OpenBLAS on the same inputs: its own row, verified like a dispatch."""
        result = self.result_for(operation, "numpy", PROVIDER_NUMPY)
        kernel = NumpyKernel(operation, cache.load_inputs())
        result.environment.update({"target": kernel.description, "IREE version": "",
                                   "vector bytes": "N/A", "cpu features": "N/A"})
        result.target_summary = kernel.description
        if self.verification_enabled:
            self.check(kernel.result, cache, result)
        return result, kernel

    def prepare(self, dispatch: Dispatch,
                cache: ReferenceCache) -> tuple[PerformanceResult, Timer | None]:
        """The dispatch's row so far, and its benchmark when it is fit to be timed."""
        result = self.result_for(dispatch.operation, dispatch.configuration.name)
        paths = self.manifest.paths(dispatch)
        record = CompileRecord.load(paths.compile_record)
        result.environment["compile log"] = str(paths.compile_log)
        if record is None:
            result.verification, result.reason = "ERROR", "not compiled (run compile.py)"
            return result, None
        result.environment.update({"compile time(s)": record.compile_seconds,
                                   "compiled on": record.compiled_on, "compile cache": record.cache,
                                   "vmfb bytes": record.vmfb_bytes,
                                   "compile flags": shlex.join(record.flags)})
        result.config_applied = record.config_applied
        if record.status != "ok":
            result.verification, result.reason = "ERROR", record.reason
            return result, None
        inputs = cache.ensure_inputs()
        if self.verification_enabled:
            self.verify(dispatch, paths.vmfb, cache, result)
            if result.verification != "SUCCESS":
                return result, None  # a wrong or crashing dispatch is not worth timing
        if not self.profiling_enabled:
            return result, None
        return result, self.timers.benchmark(paths.vmfb, dispatch.name, self.device,
                                             [b.flag for b in inputs], record.repeat_count,
                                             timeout=self.run_timeout)

    def verify(self, dispatch: Dispatch, vmfb: Path, cache: ReferenceCache,
               result: PerformanceResult) -> None:
        output = cache.folder / f"result_{dispatch.configuration.name}.bin"
        run = run_module(self.tools, vmfb, dispatch.name, self.device,
                         [b.flag for b in cache.buffers], [output], self.run_timeout,
                         runner=self.runner)
        if not run.ok:
            result.verification, result.reason = "ERROR", run.reason
            return
        try:
            got = cache.read_result(output)
        except ValueError:
            result.verification, result.reason = "ERROR", "result has the wrong size"
            return
        finally:
            output.unlink(missing_ok=True)
        self.check(got, cache, result)

    @staticmethod
    def check(got, cache: ReferenceCache, result: PerformanceResult) -> None:
        check = cache.compare(got)
        result.max_abs_error = check.max_abs_error
        result.verification = "SUCCESS" if check.passed else "FAILED"
        if not check.passed:
            result.reason = check.detail
