"""The results store: one schema on SQLite and on a real PostgreSQL server started here; no
record lost or duplicated with four concurrent writers (two processes, two Dask workers); a
writer killed mid-run leaves every committed record; bad stores are one-line errors."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

from helpers import DATA_DIR, FAST, run_script
from iree_dispatch_profiler.core.library import UserError
from iree_dispatch_profiler.store import results
from iree_dispatch_profiler.store.results import open_store

RECORDS = 500
WRITER = """
import sys
from pathlib import Path
from iree_dispatch_profiler.store.results import open_store, record_key
url, name, count, log = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
store = open_store(url)
with open(log, "a") as committed:
    for i in range(count):
        record = {"signature": f"sig{i % 7}", "target": "t", "iree_version": "3.13",
                  "candidate": f"{name}_{i}", "speedup": 1.0 + i / count, "session": name,
                  "source": "test"}
        store.record([record])
        committed.write(name + "_" + str(i) + "\\n")  # after its commit
        committed.flush()
"""


def record(i: int, session: str = "s") -> dict:
    """Candidate c{i} at speedup 1 + i/10, interval +-0.05: c0's does not clear 1.03."""
    return {"signature": "sig", "target": "t", "iree_version": "3.13", "candidate": f"c{i}",
            "speedup": 1.0 + i / 10, "speedup_ci_low": 0.95 + i / 10,
            "speedup_ci_high": 1.05 + i / 10, "session": session, "source": "test"}


def test_records_are_kept_once_and_the_best_come_first(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'r.sqlite'}")
    assert store.record([record(i) for i in range(5)]) == 5
    assert store.record([record(1), record(2)]) == 0  # the same results again: skipped
    assert store.count() == 5
    assert [r["candidate"] for r in store.best("sig", "t", "3.13")] == ["c4", "c3", "c2"]
    assert [r["candidate"] for r in store.best("sig", "t", "3.13", 9)] == ["c4", "c3", "c2", "c1"]
    assert store.best("sig", "t", "3.14") == [] and store.best("sig", "other", "3.13") == []
    other = open_store(f"sqlite:///{tmp_path / 'other.sqlite'}")
    other.record([record(3), record(9, "elsewhere")])
    assert store.merge(other) == 1 and store.merge(other) == 0
    assert store.count() == 6


def test_bad_stores_are_one_line_errors(tmp_path):
    foreign = tmp_path / "foreign.sqlite"
    sqlite3.connect(foreign).execute("CREATE TABLE photos (id INTEGER)").connection.commit()
    newer = tmp_path / "newer.sqlite"
    open_store(f"sqlite:///{newer}").close()
    sqlite3.connect(newer).execute("UPDATE store_meta SET value = '99'").connection.commit()
    cases = {f"postgresql://u:secret@127.0.0.1:{free_port()}/db": "Connection refused",
             f"sqlite:///{foreign}": "not a store of this tool",
             f"sqlite:///{newer}": "schema version 99",
             "nonsense://x": "cannot open it"}
    for url, message in cases.items():
        with pytest.raises(UserError) as error:
            open_store(url)
        text = str(error.value)
        assert message in text and "\n" not in text and "secret" not in text


def writers(url: str, folder: Path) -> list[str]:
    """Four writers of RECORDS records each: two processes, two Dask workers; their logs."""
    from distributed import Client, LocalCluster

    script = folder / "writer.py"
    script.write_text(WRITER)
    logs = [str(folder / f"w{i}.log") for i in range(4)]
    processes = [subprocess.Popen([sys.executable, str(script), url, f"p{i}", str(RECORDS),
                                   logs[i]]) for i in range(2)]
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        futures = [client.submit(subprocess.run, [sys.executable, str(script), url, f"d{i}",
                                                   str(RECORDS), logs[2 + i]], check=True,
                                 pure=False) for i in range(2)]
        client.gather(futures)
    for process in processes:
        assert process.wait(timeout=600) == 0
    return logs


def check_concurrent_writers(url: str, folder: Path) -> None:
    writers(url, folder)
    store = open_store(url)
    rows = [r for r in store.rows() if r["session"] in ("p0", "p1", "d0", "d1")]
    assert len(rows) == 4 * RECORDS  # none lost
    assert len({r["candidate"] for r in rows}) == 4 * RECORDS  # none duplicated


def check_killed_writer(url: str, folder: Path) -> None:
    script = folder / "writer.py"
    script.write_text(WRITER)
    log = folder / "killed.log"
    process = subprocess.Popen([sys.executable, str(script), url, "k", "100000", str(log)])
    deadline = time.time() + 120
    while time.time() < deadline and (not log.is_file() or len(log.read_text().split()) < 50):
        time.sleep(0.1)
    process.send_signal(signal.SIGKILL)
    process.wait()
    committed = set(log.read_text().split())
    assert len(committed) >= 50
    stored = {r["candidate"] for r in open_store(url).rows() if r["session"] == "k"}
    assert committed <= stored  # every committed record is there (one more may be too)
    assert len(stored - committed) <= 1


def test_sqlite_concurrent_writers_lose_and_duplicate_nothing(tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.sqlite'}"
    check_concurrent_writers(url, tmp_path)
    check_killed_writer(url, tmp_path)


# --------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def postgresql():
    """A real PostgreSQL server in a temporary folder, as the postgres user when we are root
    (the server refuses to run as root); skipped, saying why, where it cannot start."""
    # Debian keeps them out of PATH, in /usr/lib/postgresql/<version>/bin
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    where = os.pathsep.join([os.environ.get("PATH", ""), *map(str, found)])
    initdb, pg_ctl = shutil.which("initdb", path=where), shutil.which("pg_ctl", path=where)
    if not initdb or not pg_ctl:
        pytest.skip("PostgreSQL's initdb/pg_ctl are not installed (`make test` installs "
                    "Debian's postgresql where it can)")
    folder = Path(tempfile.mkdtemp(prefix="idp_pg_"))
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser: PostgreSQL cannot be started")
        shutil.chown(folder, "postgres", "postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    data, port = folder / "data", free_port()
    made = subprocess.run([*prefix, initdb, "-D", str(data), "-A", "trust", "-U", "postgres"],
                          capture_output=True, text=True, timeout=120)
    if made.returncode != 0:
        pytest.skip(f"initdb failed: {made.stderr.strip().splitlines()[-1:]}")
    started = subprocess.run([*prefix, pg_ctl, "-D", str(data), "-w", "-l", str(folder / "log"),
                              "-o", f"-p {port} -k {folder} -c listen_addresses=127.0.0.1",
                              "start"], capture_output=True, text=True, timeout=120)
    if started.returncode != 0:
        pytest.skip(f"the PostgreSQL server did not start: {started.stderr.strip()[-300:]}")
    yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "stop"],
                   capture_output=True, timeout=120)
    shutil.rmtree(folder, ignore_errors=True)


def test_postgresql_has_the_same_schema_and_concurrent_writers_lose_nothing(postgresql, tmp_path):
    store = open_store(postgresql)
    assert store.record([record(i) for i in range(3)]) == 3
    assert store.record([record(0)]) == 0
    assert [r["candidate"] for r in store.best("sig", "t", "3.13")] == ["c2", "c1"]  # not c0
    assert open_store(postgresql).count() == 3  # opening again: the schema is checked, kept
    check_concurrent_writers(postgresql, tmp_path)
    check_killed_writer(postgresql, tmp_path)
    assert results.SCHEMA_VERSION == 1


# --------------------------------------------------------------------------------------------
TUNE = ["--input", DATA_DIR / "seed_matmul.mlir", "--n-trial", "4", "--batch-size", "2",
        "--tuner", "random", "--batch-seconds", "1", "--confirm-seconds", "4",
        "--calibration=off"]


@pytest.mark.iree
def test_a_second_tuning_reuses_the_stored_answer_and_a_bad_store_only_warns(tmp_path):
    store = f"sqlite:///{tmp_path / 'team.sqlite'}"
    start = time.perf_counter()
    first = run_script("autotune.py", *TUNE, "--store", store, "--output", tmp_path / "first.csv")
    first_seconds = time.perf_counter() - start
    assert first.returncode == 0, first.stdout + first.stderr
    assert "answer:" in first.stdout and "no answer reused (1 searched)" in first.stdout
    kept = open_store(store).rows()
    assert kept and all(r["source"] == "tuner" and r["speedup"] > 0 for r in kept)
    start = time.perf_counter()
    second = run_script("autotune.py", *TUNE, "--store", store, "--output", tmp_path / "second.csv")
    second_seconds = time.perf_counter() - start
    assert second.returncode == 0, second.stdout + second.stderr
    if "answer: keep IREE's default" in first.stdout:
        pytest.skip("the first run found nothing faster than IREE's default to reuse")
    assert "op 0: answer from the results store" in second.stdout
    assert "1 of 1 answered from it" in second.stdout and "answer:" in second.stdout
    assert not (tmp_path / "second.csv").exists()  # no trial ran
    assert second_seconds < first_seconds
    # an unreachable store: said in one line, and the op is searched as without one
    bad = run_script("autotune.py", *TUNE, "--n-trial", "2", "--output", tmp_path / "bad.csv",
                     "--store", f"postgresql://x@127.0.0.1:{free_port()}/db")
    assert bad.returncode == 0, bad.stdout + bad.stderr
    assert "warning: results store postgresql://x@127.0.0.1" in bad.stdout
    assert len(pd.read_csv(tmp_path / "bad.csv")) == 2


@pytest.mark.iree
def test_sweep_rows_are_kept_under_the_signature_the_tuner_sees(tmp_path):
    from iree_dispatch_profiler.iree import tunable

    gen, store = tmp_path / "gen", f"sqlite:///{tmp_path / 's.sqlite'}"
    assert run_script("generator.py", "--generated-dir", gen, "--problem-m=1024",
                      "--problem-n=512", "--problem-k=256", "--data-types=f32t_f32t_f32t",
                      "--dispatches=_default$").returncode == 0
    assert run_script("compile.py", "--generated-dir", gen).returncode == 0
    profiled = run_script("profiler.py", "--generated-dir", gen, "--store", store, *FAST)
    assert profiled.returncode == 0, profiled.stderr
    rows = open_store(store).rows()
    assert rows and {r["source"] for r in rows} == {"sweep"}
    assert "default" in {r["candidate"] for r in rows}
    seed = tunable.find(DATA_DIR / "seed_matmul.mlir")[0]  # the same matmul, written by hand
    assert {r["signature"] for r in rows} == {results.op_fields(seed)["signature"]}
