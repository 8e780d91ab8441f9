"""Turn results already on disk into the HTML report the scripts write with --html:

  report.py gen/data.csv --html gen/report.html        (profiler.py --output)
  report.py matmul.csv --html tune.html                (autotune.py --output; X_answer.json,
                                                        the spec and flags beside it are read)
  report.py mlp.csv --html model.html                  (autotune.py --model: X_model.json)
  report.py results.json --html ab.html                (compare.py --output)

One file, no server, no network: it opens from disk in a browser; its tables read without
JavaScript. Exit status: 0 written, 2 a user error (nothing written).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Sequence

from iree_dispatch_profiler.cli import options
from iree_dispatch_profiler.report import outputs


def parser() -> options.ArgumentParser:
    p = options.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, metavar="RESULTS", help="a CSV or JSON a script wrote")
    options.add_html(p, required=True)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    options.write_html(args.html, outputs.page_for(args.results, options.command_line()))
    return 0


def run() -> None:
    options.run_main(main)
