#!/usr/bin/env python3
"""How big an HTML report is, how long it takes to write, and how long headless Chromium takes
to open it from disk until every chart is drawn (goal: under 2 s and 5 MB for `make run`'s).

  python3 benchmarks/bench_report.py [RESULTS ...]      (default: gen/data.csv of `make run`)

Each report is opened --repetitions times with the network off; the load time is reported as
a median with its range.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT
from iree_dispatch_profiler.core.library import UserError
from iree_dispatch_profiler.report import outputs


def load_seconds(driver, path: Path) -> float:
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get("about:blank")
    start = time.perf_counter()
    driver.get(path.resolve().as_uri())
    WebDriverWait(driver, 60, poll_frequency=0.01).until(lambda d: d.execute_script(
        "return !window.Bokeh || Bokeh.documents.length > 0 && Bokeh.documents.every(d => d.is_idle)"))
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, nargs="*", default=[ROOT / "gen" / "data.csv"])
    parser.add_argument("--repetitions", type=int, default=5)
    args = parser.parse_args()
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        sys.exit("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", {
        "offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0})
    folder = Path(tempfile.mkdtemp(prefix="bench_report_"))
    print(f"{'results':<40} {'rows':>6} {'MB':>6} {'write s':>8}  open s: median [min, max]")
    try:
        for results in args.results:
            start = time.perf_counter()
            try:
                page = outputs.page_for(results)
            except UserError as error:
                sys.exit(f"bench_report.py: error: {error}")
            html = folder / f"{results.stem}.html"
            size = outputs.write(html, page)
            written = time.perf_counter() - start
            rows = sum(len(b.table.rows) for s in page.sections for b in s.blocks if b.table)
            times = [load_seconds(driver, html) for _ in range(args.repetitions)]
            print(f"{str(results)[-40:]:<40} {rows:>6} {size / 1e6:>6.2f} {written:>8.2f}  "
                  f"{statistics.median(times):.3f} [{min(times):.3f}, {max(times):.3f}]")
    finally:
        driver.quit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
