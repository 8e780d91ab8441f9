"""Auto-tune the linalg ops of your own MLIR module on llvm-cpu.

  autotune.py --input model.mlir --output results.csv [--op INDEX|all] [--tuner xgb] [--n-trial N]
  autotune.py --config auto-scheduler.cfg          (input and output from its [Env])
  autotune.py --input model.mlir --list

The module is analysed on the IR: every contraction (matmul with any indexing maps,
batch_matmul, contraction-like linalg.generic), 2-D convolution and attention is a tunable op.
Each op's space holds tile configs derived from its shape and the target (kept within IREE's vector-size
rule), narrowed by the config file, plus compile-flag points (data tiling with ukernels) that
apply to the whole module. A candidate is compiled with its compilation_info injected into the
op, checked to carry it, verified against the module compiled with IREE's defaults on the same
seeded inputs, and timed in interleaved rounds against that default. The leaders are measured
again together at the end; a config is recommended only when its interval clears the default.

Outputs, named after the output CSV X.csv: X.csv (every trial), X_best.mlir (the module with the
best tile configs inlined), X_tuning_spec.mlir (the same configs for
--iree-codegen-tuning-spec-path, checked to apply; X_spec_flags.txt holds the data-tiling flags
a data-tiled config in it needs), X_best_flags.txt (when a flag point wins), X.log (phase
timings) and X_progress.png. Rerunning with the same output resumes (X_run.json: the settings
the rerun must share).

With --model, IREE's curated module flags are searched on the whole model first (X_flags.csv),
the hot dispatches are tuned inside the model under the chosen flags, and the answer is
X_best_flags.txt + X_tuning_spec.mlir, compiled together, checked, verified and timed.
"""
from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Sequence

from iree_dispatch_profiler.cli import options
from iree_dispatch_profiler.report import outputs
from iree_dispatch_profiler.core.library import Device, UserError
from iree_dispatch_profiler.core.values import (compile_patterns, parse_num_cpu, parse_positive,
                                                parse_seconds)
from iree_dispatch_profiler.iree import modules, rewrites, tunable
from iree_dispatch_profiler.iree.dask_client import connect
from iree_dispatch_profiler.iree.target import check_runnable, resolve_target
from iree_dispatch_profiler.iree.tools import IreeTools
from iree_dispatch_profiler.tuning import model as model_tuning
from iree_dispatch_profiler.tuning import records, scheduler_config, single_op, strategies
from iree_dispatch_profiler.tuning import spec as tuning_spec
from iree_dispatch_profiler.tuning.engine import Settings, Toolchain
from iree_dispatch_profiler.tuning.model import final


def parser() -> options.ArgumentParser:
    p = options.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", type=Path, metavar="MODULE.mlir", help="the module to tune")
    p.add_argument("--config", type=Path, metavar="FILE.cfg",
                   help="the seed's auto-scheduler.cfg: [Env], [SearchSpace], [SearchStrategy]; "
                        "command-line options win over it")
    p.add_argument("--output", type=Path, metavar="X.csv", help="every trial; other outputs beside it")
    p.add_argument("--list", action="store_true",
                   help="list the tunable ops (with --model: the dispatch ranking) and exit")
    model = p.add_argument_group("whole models (--model)")
    model.add_argument("--model", action="store_true",
                       help="tune a whole model (any input iree-compile takes: torch, linalg, "
                            "StableHLO, TOSA): rank its dispatches, tune the hot ones, write one "
                            "tuning spec and measure the model with it")
    model.add_argument("--function", default=None,
                       help="the model's function (default: its only public one)")
    model.add_argument("--top", type=parse_positive, default=None, metavar="N",
                       help="tune the N costliest targets (default: those of the dispatches "
                            "that take 90%% of the time)")
    model.add_argument("--dispatches", type=compile_patterns, default=None, metavar="REGEX,...",
                       help="tune only the targets of the dispatches these comma-separated "
                            "regular expressions find in their names under the flags tuned "
                            "under (--list --base-flags=\"...\" ranks them by those names), "
                            "however little time they take; with --top N, the N costliest")
    model.add_argument("--spec", type=Path, default=None, metavar="SPEC.mlir",
                       help="instead of tuning: check that this tuning spec applies to the "
                            "model, and measure the model with it")
    model.add_argument("--spec-library", action="store_true",
                       help="the --spec holds entries for the ops of other models too (a CPU's "
                            "default spec from store.py spec): an entry for an op this model "
                            "lacks is not a problem")
    model.add_argument("--rewrites", default=None, metavar="NAME[,NAME]|all|none",
                       help="the source rewrites the model search may adopt (default: all): "
                            f"{', '.join(r.name for r in rewrites.REWRITES)}")
    model.add_argument("--runtimes", default=None, metavar="NAME[,NAME]|all|none",
                       help="the ways of running the answer whose whole call is timed against "
                            "the tuner's own at the end, the faster said with how to run it "
                            f"(default: all): {', '.join(final.RUNTIME_NAMES)}")
    model.add_argument("--base-flags", default=None, metavar='"FLAGS"',
                       help="compile every candidate and the answer with these iree-compile "
                            "flags instead of searching IREE's curated flag sets first "
                            "(--base-flags='' for IREE's default flags)")
    options.add_parameters(model)
    options.add_inputs(p)
    p.add_argument("--op", default="all", metavar="INDEX[,INDEX]|all",
                   help="which tunable ops (numbers from --list; default: all)")
    p.add_argument("--tuner", choices=[*strategies.NAMES, *strategies.CONFIG_NAMES], default=None,
                   help="search strategy (default: xgb)")
    p.add_argument("--n-trial", type=parse_positive, default=None, metavar="N",
                   help="candidates tried per op (default: 32)")
    p.add_argument("--time-budget", type=parse_seconds, default=None, metavar="SECONDS",
                   help="stop searching after this many seconds in all (default: none)")
    p.add_argument("--early-stop", type=parse_positive, default=None, metavar="N",
                   help="stop an op's search after N trials without a better speedup")
    p.add_argument("--flags", action="append", default=None, metavar='"FLAGS"',
                   help="a compile-flag point (repeatable); replaces the default points "
                        "(data tiling with ukernels; with --model, IREE's curated flag sets, "
                        "each with why in X_flags.csv); --flags='' for none")
    p.add_argument("--seed", type=int, default=None, help="seeds the strategy and the inputs (default: 0)")
    p.add_argument("--batch-size", type=parse_positive, default=4, metavar="N",
                   help="candidates compiled together and timed in one interleaved session "
                        "with the default (default: 4)")
    p.add_argument("--batch-seconds", type=parse_seconds, default=4.0, metavar="SECONDS",
                   help="interleaved timing per batch (default: 4)")
    p.add_argument("--confirm-seconds", type=parse_seconds, default=20.0, metavar="SECONDS",
                   help="interleaved timing of the leaders against the default at the end "
                        "(default: 20)")
    p.add_argument("-j", "--jobs", type=parse_num_cpu, default=os.cpu_count() or 1,
                   help="parallel iree-compile processes (default: all cores)")
    options.add_compile_cluster(p)
    options.add_profile_on(p, scheduler_too=False)
    options.add_timeouts(p, 300.0, 120.0)
    options.add_timing_source(p)
    options.add_store(p)
    options.add_html(p)
    options.add_iree_bin_dir(p)
    options.add_target(p, recorded=False)
    return p


def settings(args: argparse.Namespace) -> Settings:
    config = scheduler_config.load(args.config) if args.config else None

    def pick(value, key: str, default=None):
        """The command line's value, else the config file's, else the default."""
        if value is not None:
            return value
        from_file = getattr(config, key, None) if config else None
        return from_file if from_file is not None else default

    if args.config is None and args.input is None:
        raise UserError("give --input MODULE.mlir or --config FILE.cfg")
    source = pick(args.input, "input_file")
    if source is None:
        raise UserError(f"{args.config} has no [Env] input_file; give --input")
    if not source.is_file():
        raise UserError(f"input {source} does not exist")
    if args.base_flags is not None and not args.model:
        raise UserError("--base-flags applies to --model")
    if args.spec is not None and not args.model:
        raise UserError("--spec applies to --model")
    if args.spec_library and args.spec is None:
        raise UserError("--spec-library describes a --spec")
    for option in ("rewrites", "runtimes", "dispatches"):
        if getattr(args, option) is not None and not args.model:
            raise UserError(f"--{option} applies to --model")
    if args.spec is not None:  # checked now, not after minutes of compiling
        if not args.spec.is_file():
            raise UserError(f"--spec {args.spec} does not exist")
        tuning_spec.read_entries(args.spec)
    for path in args.inputs or []:
        if isinstance(path, Path) and not path.is_file():
            raise UserError(f"--inputs: {path} does not exist")
    warnings = []
    if config and config.gpu:
        warnings.append(f"{', '.join(config.gpu)} apply to GPU targets; ignored on llvm-cpu")
    given = [f for f in args.flags if f.strip()] if args.flags is not None else pick(None, "flags")
    flag_points = None if given is None else {str(i): f for i, f in enumerate(given)}
    tuner = pick(args.tuner, "tuner", "xgb")
    return Settings(source, pick(args.output, "output_file"), args.op,
                    strategies.CONFIG_NAMES.get(tuner, tuner), pick(args.n_trial, "n_trial", 32),
                    pick(args.early_stop, "early_stop"), pick(args.seed, "seed", 0),
                    config.lists if config else {}, flag_points,
                    pick(args.iree_bin_dir, "iree_bin"), warnings, time_budget=args.time_budget,
                    batch_size=args.batch_size, batch_seconds=args.batch_seconds,
                    confirm_seconds=args.confirm_seconds, compile_timeout=args.compile_timeout,
                    run_timeout=args.run_timeout, jobs=args.jobs, function=args.function,
                    top=args.top, dispatches=args.dispatches, spec=args.spec,
                    spec_library=args.spec_library, base_flags=args.base_flags,
                    rewrites=names("--rewrites", args.rewrites, "a rewrite",
                                   [r.name for r in rewrites.REWRITES]),
                    runtimes=names("--runtimes", args.runtimes, "a runtime",
                                   list(final.RUNTIME_NAMES)),
                    list_only=args.list, timing_source=args.timing_source,
                    calibration=args.calibration, store=args.store,
                    command=options.command_line(), inputs=args.inputs)


def names(option: str, given: str | None, what: str, known: list[str]) -> tuple[str, ...] | None:
    """`NAME[,NAME]|all|none` as the names it allows of `known` (None: all of them)."""
    if given is None or given == "all":
        return None
    if given == "none":
        return ()
    chosen = tuple(n.strip() for n in given.split(",") if n.strip())
    unknown = [n for n in chosen if n not in known]
    if unknown or not chosen:
        raise UserError(f"{option} {given}: not {what} ({', '.join(unknown) or 'none named'}); "
                        f"give all, none, or of: {', '.join(known)}")
    return chosen


def prepare(args: argparse.Namespace, s: Settings) -> Toolchain:
    """Checks the output, finds the tools, connects to the cluster, resolves the target (`host`:
    the machine that times, this one or --profile-on's)."""
    if s.output is None:
        raise UserError("give --output X.csv (or output_file in the config's [Env])")
    if s.output.suffix != ".csv":
        raise UserError(f"--output {s.output} must be a .csv file")
    tools = IreeTools.locate(s.iree_bin)
    version = tools.version()
    client = connect(args.scheduler, version) if args.scheduler else None
    machine = options.machine_from_args(args, version, client)
    target = resolve_target(tools, options.target_from_args(args), machine.run)
    if target.device is not Device.LLVMCPU:
        raise UserError(f"autotune.py tunes llvm-cpu; {target.device.value} is not supported yet")
    check_runnable(tools, target, machine.run, machine.name)
    try:
        s.output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"cannot write {s.output}: {error.strerror}") from None
    builder = options.builder_from_args(args, tools, target, version, client)
    toolchain = Toolchain(tools, target, builder, machine, options.runtime_device(args, target),
                          options.parameter_flags(args))
    if not args.list:  # a listing reads nothing back
        s.begun_with = s.run_settings(toolchain, version, args.model)
        records.check_same_run(s.paths.run, s.begun_with, s.output)
    return toolchain


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    s = settings(args)
    # a listing without --output writes its files to a scratch folder removed at the end
    with tempfile.TemporaryDirectory(prefix="autotune_") as scratch:
        if s.output is None and args.list:
            s.output = Path(scratch) / "list.csv"
        work = s.paths.work if s.output is not None else Path(scratch)
        created = [p for p in (work, *work.parents) if not p.exists()]
        try:
            return run_mode(args, s)
        except UserError:
            # input refused before anything was written: leave no empty folders behind
            for folder in created:
                if folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()
            raise


def run_mode(args: argparse.Namespace, s: Settings) -> int:
    """--model, or a single op: listed or tuned."""
    if args.model:
        status = model_tuning.run_model(s, prepare(args, s))
    else:
        # the single-op tuner edits the module's text: MLIR bytecode is read as text, written
        # beside the run's other files
        given = s.input
        toolchain = None if args.list else prepare(args, s)  # a listing needs no tools
        s.input = modules.as_text(given, s.paths.work)
        found = tunable.find(s.input)
        if toolchain is None:
            single_op.print_list(given, found)
            return 0
        if not found:
            raise UserError(f"{s.input} has no tunable op (contraction, convolution or attention)")
        chosen = single_op.choose_ops(found, s.ops)
        status = single_op.tune(s, toolchain, chosen)
    if args.html is not None and not args.list:
        options.write_html(args.html, outputs.page_for(s.output))
    return status


def run() -> None:
    options.run_main(main)
