"""The --html reports of small real runs (a sweep, a tuning, a model tuning, comparisons),
opened from disk in headless Chromium with the network off: no console errors, no request
beyond the file itself, the table rows and charts the run calls for, untrusted text shown as
text, and a screenshot kept in the test's folder."""
import json
import shutil

import pandas as pd
import pytest

from helpers import DATA_DIR as DATA, FAST, QUICK_MODEL, QUICK_TUNING as QUICK, run_script

pytestmark = pytest.mark.iree  # every test here drives the real IREE tools

MLP = DATA / "mlp_torch.mlir"
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@pytest.fixture(scope="module")
def browser():
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("Debian's chromium and chromium-driver are not installed (`make test` "
                    "installs them where it can: apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium (the test extra) is missing")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", {
        "offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0})
    yield driver
    driver.quit()


def open_report(driver, path, shot):
    """Load the report, wait for Bokeh to render every chart; (console errors, requests made)."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get_log("browser"), driver.get_log("performance")  # drop earlier pages' entries
    driver.get(path.resolve().as_uri())
    WebDriverWait(driver, 30).until(lambda d: d.execute_script(
        "return !window.Bokeh || Bokeh.documents.length > 0 && Bokeh.documents.every(d => d.is_idle)"))
    driver.save_screenshot(str(shot))
    errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    requests = [json.loads(e["message"])["message"]["params"]["request"]["url"]
                for e in driver.get_log("performance")
                if json.loads(e["message"])["message"]["method"] == "Network.requestWillBeSent"]
    assert shot.stat().st_size > 10_000  # a page, not a blank
    return errors, [url for url in requests if not url.startswith(("file:", "data:"))]


def rendered_charts(driver) -> int:
    """Charts Bokeh has laid out on the page (each report chart is one root)."""
    return driver.execute_script("return window.Bokeh ? Bokeh.documents.reduce("
                                 "(n, d) => n + d.roots().length, 0) : 0")


def rows(driver, table_id) -> list[str]:
    return driver.execute_script(
        f"return Array.from(document.querySelectorAll('#{table_id} tbody tr'), r => r.innerText)")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    gen = tmp_path_factory.mktemp("sweep")
    shape = ["--problem-m=128", "--problem-n=128", "--problem-k=256", "--data-types=f32"]
    assert run_script("generator.py", "--generated-dir", gen, *shape).returncode == 0
    assert run_script("compile.py", "--generated-dir", gen).returncode == 0
    result = run_script("profiler.py", "--generated-dir", gen, "--output", gen / "data.csv",
                        "--providers=iree,numpy", "--html", gen / "report.html", *FAST)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    return gen, result


def test_a_sweep_report_shows_every_dispatch_and_chart_offline(sweep, browser, tmp_path):
    gen, result = sweep
    assert "HTML report:" in result.stdout
    data = pd.read_csv(gen / "data.csv")
    errors, requests = open_report(browser, gen / "report.html", tmp_path / "sweep.png")
    assert not errors and not requests
    shown = rows(browser, "dispatch-table")
    assert len(shown) == len(data) and any("numpy" in r for r in shown)
    assert rendered_charts(browser) == data["Operation"].nunique() + 1  # + the roofline
    header = browser.find_element("css selector", "table.header").text
    assert "IREE version" in header and "profiler.py" in header and "timing source" in header
    # the verdicts open the page, one per operation, before the charts and the full table
    verdicts = rows(browser, "verdict-table")
    assert len(verdicts) == data["Operation"].nunique()
    assert all(("leader:" in v or "no significant leader" in v) and "SUCCESS" in v for v in verdicts)
    order = browser.execute_script(
        "return Array.from(document.querySelectorAll('section > h2'), h => h.textContent)")
    assert order.index("Verdicts") < order.index("Configurations per operation") < order.index("Dispatches")
    # sorting by runtime puts the fastest row first
    browser.execute_script("document.querySelectorAll('#dispatch-table th')[3].click()")
    first = browser.execute_script(
        "return document.querySelector('#dispatch-table tbody tr td:nth-child(4)').dataset.sort")
    assert float(first) == pytest.approx(data["Runtime(ms)"].min(), rel=1e-3)


def test_untrusted_text_in_a_report_is_text(sweep, browser, tmp_path):
    """A failure reason and a dispatch name holding markup, made into a report by report.py."""
    gen, _ = sweep
    data = pd.read_csv(gen / "data.csv", dtype={"Reason": str})
    evil = "<script>window.pwned = 1</script><img src=x onerror='window.pwned = 2'>"
    data.loc[1, "Reason"] = f"iree-compile failed: {evil}"
    data.loc[1, "Verification"] = "FAILED"
    data.loc[2, "Dispatch"] = f"matmul_{evil}"
    data.to_csv(tmp_path / "evil.csv", index=False)
    result = run_script("report.py", tmp_path / "evil.csv", "--html", tmp_path / "evil.html")
    assert result.returncode == 0, result.stderr
    errors, requests = open_report(browser, tmp_path / "evil.html", tmp_path / "evil.png")
    assert not errors and not requests
    assert browser.execute_script("return window.pwned") is None
    shown = rows(browser, "dispatch-table")
    assert any(evil in r for r in shown) and sum(evil in r for r in shown) == 2


def test_report_py_refuses_what_is_not_a_result(tmp_path):
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    result = run_script("report.py", tmp_path / "x.csv", "--html", tmp_path / "x.html")
    assert result.returncode == 2 and "is not a profiler CSV" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "x.html").exists()


def test_a_tuning_report_shows_progress_knobs_trials_and_the_spec(browser, tmp_path):
    shutil.copy(DATA / "seed_matmul.mlir", tmp_path / "matmul.mlir")
    result = run_script("autotune.py", "--input", tmp_path / "matmul.mlir", "--output",
                        tmp_path / "matmul.csv", "--n-trial", "4", "--tuner", "random",
                        "--html", tmp_path / "tune.html", *QUICK)
    assert result.returncode == 0, result.stdout + result.stderr
    errors, requests = open_report(browser, tmp_path / "tune.html", tmp_path / "tune.png")
    assert not errors and not requests
    assert len(rows(browser, "trials-op0")) == 4
    assert rendered_charts(browser) == 2  # the progress curve and the knob scatters
    text = browser.find_element("tag name", "body").text
    assert "answer:" in text and "ranks" in text
    spec = (tmp_path / "matmul_tuning_spec.mlir")
    if spec.exists():
        assert "transform.named_sequence" in text


def test_a_model_report_shows_the_ranking_before_and_after(browser, tmp_path):
    output = tmp_path / "mlp.csv"
    result = run_script("autotune.py", "--input", MLP, "--model", "--output", output, "--top", "1",
                        "--n-trial", "2", "--tuner", "random", "--base-flags=", "--rewrites=none",
                        "--html", tmp_path / "model.html", *QUICK_MODEL)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((tmp_path / "mlp_model.json").read_text())
    errors, requests = open_report(browser, tmp_path / "model.html", tmp_path / "model.png")
    assert not errors and not requests
    assert len(rows(browser, "model-dispatches")) == len(summary["dispatches"]) > 1
    # the budget's choice: the hot target's 2 trials on its dispatch's row
    assert sorted(d["trials"] for d in summary["dispatches"])[-1] == 2
    targets = [d for d in summary["dispatches"] if d["speedup"] is not None]
    assert rendered_charts(browser) == 1 + bool(targets)
    verdict = browser.find_element("id", "verdict").text
    assert summary["lines"][0].startswith("Inputs: seeded random inputs (seed 0)")
    assert all(line in verdict for line in summary["lines"][:2])


def test_comparison_reports_show_variants_verdicts_and_agreement(browser, tmp_path, sweep):
    (tmp_path / "mm.mlir").write_text((DATA / "seed_matmul.mlir").read_text())
    result = run_script("compare.py", "--calibration=off", "--input", tmp_path / "mm.mlir", "--variant", "base=",
                        "--variant", "dt=--iree-opt-data-tiling", "--random-inputs", "1",
                        "--output", tmp_path / "ab.json", "--time-budget", "3",
                        "--html", tmp_path / "ab.html")
    assert result.returncode == 0, result.stdout + result.stderr
    errors, requests = open_report(browser, tmp_path / "ab.html", tmp_path / "ab.png")
    assert not errors and not requests
    assert [r.split("\t")[0] for r in rows(browser, "variants")] == ["base", "dt"]
    assert len(rows(browser, "agreement")) == 1 and rendered_charts(browser) == 1
    verdict = json.loads((tmp_path / "ab.json").read_text())["comparisons"][0]["verdict"]
    assert verdict in browser.find_element("id", "variants").text
    # the same report, made afterwards from the results file
    again = run_script("report.py", tmp_path / "ab.json", "--html", tmp_path / "again.html")
    assert again.returncode == 0 and verdict in (tmp_path / "again.html").read_text()
    # two profiler CSVs
    gen = sweep[0]
    result = run_script("compare.py", "--csv", gen / "data.csv", gen / "data.csv",
                        "--output", tmp_path / "csv.json", "--html", tmp_path / "csv.html")
    assert result.returncode == 0, result.stdout + result.stderr
    errors, requests = open_report(browser, tmp_path / "csv.html", tmp_path / "csv.png")
    assert not errors and not requests
    assert len(rows(browser, "pairs")) == pd.read_csv(gen / "data.csv")["Runtime(ms)"].notna().sum()
