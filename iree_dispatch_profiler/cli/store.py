"""The results store: what it holds, stores from other machines merged in, and a CPU's default
tuning spec written from it.

  store.py summary [--store URL]
  store.py merge OTHER [--store URL]            OTHER: a URL or another machine's .sqlite file
  store.py spec --output cpu_spec.mlir [--cpu host|NAME] [--flags "..."] [--store URL]

`spec` writes one tuning spec holding the best stored configuration of every op measured on
the target (default: this machine's CPU as IREE resolves it) with this IREE version under the
same flags, checks that IREE loads it, and lists its entries and the ops left out (why).
Check it on a model, and measure the model with it:

  autotune.py --input model.mlir --model --spec cpu_spec.mlir --spec-library --output checked.csv

Exit status: 0 done, 1 the spec does not load, 2 a user error (nothing written).
"""
from __future__ import annotations

import argparse
import shlex
import tempfile
from pathlib import Path
from typing import Sequence

from iree_dispatch_profiler.cli import options
from iree_dispatch_profiler.core.library import Device, UserError
from iree_dispatch_profiler.iree.target import resolve_target
from iree_dispatch_profiler.iree.tools import IreeTools
from iree_dispatch_profiler.store import results
from iree_dispatch_profiler.store.results import ANSWERS
from iree_dispatch_profiler.tuning import default_spec


def parser() -> options.ArgumentParser:
    p = options.ArgumentParser(description=__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = p.add_subparsers(dest="command", required=True, parser_class=options.ArgumentParser)
    summary = commands.add_parser("summary", help="what the store holds, by target and IREE version")
    merge = commands.add_parser("merge", help="add another store's results and answers")
    merge.add_argument("other", metavar="OTHER", help="its URL, or the path of its .sqlite file")
    spec = commands.add_parser("spec", help="a CPU's default tuning spec from the store")
    spec.add_argument("--output", type=Path, required=True, metavar="SPEC.mlir")
    spec.add_argument("--flags", default="", metavar='"FLAGS"',
                      help="the results measured under these flags (a model's chosen ones; "
                           "default: none)")
    options.add_iree_bin_dir(spec)
    options.add_target(spec, recorded=False)
    for command in (summary, merge, spec):
        command.add_argument("--store", default=None, metavar="URL",
                             help="the store (default: SQLite in the cache folder)")
    return p


def as_url(text: str) -> str:
    """A URL as given, or a file's path as an SQLite URL (it must exist: merging creates none)."""
    if "://" in text:
        return text
    if not Path(text).is_file():
        raise UserError(f"{text}: no such store file")
    return f"sqlite:///{Path(text).resolve()}"


def summary(store: results.Store) -> None:
    by = store.counts(("target", "iree_version", "source"))
    ops = len(store.counts(("signature",)))
    print(f"Results store {store.url}: {sum(n for *_, n in by)} results of {ops} ops, "
          f"{store.count(ANSWERS)} answers")
    for target, version, source, count in sorted(by):
        print(f"  {target.split()[0]:<18} IREE {version:<14} {source:<6} {count:>6} results")


def write_spec(store: results.Store, args: argparse.Namespace) -> int:
    if args.output.suffix != ".mlir":
        raise UserError(f"--output {args.output} must be a .mlir file")
    tools = IreeTools.locate(args.iree_bin_dir)
    target = resolve_target(tools, options.target_from_args(args))
    if target.device is not Device.LLVMCPU:
        raise UserError("store.py spec writes llvm-cpu specs")
    cpu = target.resolved_cpu()
    flags = " ".join(shlex.split(args.flags))
    chosen, left_out = default_spec.choose(store, **default_spec.question(cpu, tools.version(),
                                                                          flags))
    about = f"{cpu.name} with IREE {tools.version()}" + (f" under {flags}" if flags else "")
    if not chosen:
        raise UserError(f"the store {store.url} holds no configuration that beat IREE's default "
                        f"on {about}" + (f" ({len(left_out)} ops without one)" if left_out else ""))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    needed = default_spec.write(chosen, args.output)
    print(f"Tuning spec for {about}: {args.output}, {len(chosen)} entries")
    for entry in chosen:
        print(f"  {entry.line}")
    for line in left_out:
        print(f"  left out: {line}")
    every = [*shlex.split(flags), *needed]
    if needed:
        flags_file = args.output.with_name(f"{args.output.stem}_flags.txt")
        flags_file.write_text(" ".join(every) + "\n")
        print(f"Flags its entries need: {flags_file} ({' '.join(every)})")
    with tempfile.TemporaryDirectory(prefix="store_spec_") as work:
        why = default_spec.check_loads(tools, target, args.output, every, Path(work), 300.0)
    if why:
        print(f"Tuning spec {args.output}: IREE does NOT load it: {why}")
        return 1
    print(f"Tuning spec {args.output}: IREE loads it. On a model: autotune.py --input MODEL "
          f"--model --spec {args.output} --spec-library --output checked.csv"
          + (f' --base-flags="{" ".join(every)}"' if every else ""))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    store = results.open_store(args.store)
    try:
        if args.command == "summary":
            summary(store)
        elif args.command == "merge":
            other = results.open_store(as_url(args.other))
            added, answers = store.merge(other)
            print(f"Merged {other.url} into {store.url}: {added} results and {answers} answers "
                  f"added ({other.count()} and {other.count(ANSWERS)} there; the rest were here)")
        else:
            return write_spec(store, args)
    finally:
        store.close()
    return 0


def run() -> None:
    options.run_main(main)
