"""The tuning database: every verified result kept as it is produced, and the queries that
reuse them. One schema (SQLAlchemy Core) on two engines: SQLite in the cache folder by default
(WAL, so that several processes write at once), or a PostgreSQL server named by a URL for a
team or a cluster. A record's `key` hashes what makes it one result, and inserts skip a key
already there: a writer that retries, or a store merged twice, never duplicates a result.

Two tables: `results`, every verified, timed candidate; `answers`, what a finished search
concluded (an op's winner or IREE's default with the leaders it confirmed; a model's flags and
spec), so that the same question asked again is re-confirmed instead of searched."""
from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass
from typing import Callable
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy import (Column, Float, Integer, MetaData, String, Table, Text, create_engine,
                        event, func, inspect, select)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from iree_dispatch_profiler.core import stats
from iree_dispatch_profiler.core.library import UserError
from iree_dispatch_profiler.iree import compile_cache
from iree_dispatch_profiler.iree.tunable import TunableOp

SCHEMA_VERSION = 2
OFF = "off"

metadata = MetaData()
RESULTS = Table(
    "results", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("key", String(64), nullable=False, unique=True),
    # the op as IREE sees it: a stable hash of its name, operand types, loop bounds and classes
    Column("signature", String(64), nullable=False, index=True),
    Column("kind", String(40)), Column("op_name", String(80)), Column("shape", String(200)),
    Column("types", String(200)), Column("loops", Text), Column("dims", Text),
    Column("operand_types", Text),  # JSON: what a spec's matcher needs to rebuild the op
    # where it was measured and with what
    Column("target", String(400), nullable=False, index=True),
    Column("vector_bytes", Integer), Column("iree_version", String(40), nullable=False, index=True),
    Column("flags", Text), Column("candidate", String(200), nullable=False),
    Column("configuration", Text),  # the candidate's knobs, JSON
    Column("median_ms", Float), Column("ci_low_ms", Float), Column("ci_high_ms", Float),
    Column("speedup", Float), Column("speedup_ci_low", Float), Column("speedup_ci_high", Float),
    Column("default_ms", Float), Column("timing_source", String(40)),
    Column("machine", String(200)), Column("source", String(40)),  # tuner / model / sweep
    Column("session", String(200)),  # which run and session wrote it
    Column("recorded_at", String(40)),
)
ANSWERS = Table(
    "answers", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("key", String(64), nullable=False, unique=True),
    Column("scope", String(10), nullable=False),  # op / model
    # an op's signature (as in results) or a model's: the hash of its text after IREE's input phase
    Column("signature", String(64), nullable=False, index=True),
    Column("target", String(400), nullable=False, index=True),
    Column("iree_version", String(40), nullable=False),
    Column("flags", Text),  # what the search ran under (an op: the model's flags; a model: its
    # --base-flags / --flags): another question, another answer
    Column("answer", Text),  # JSON: an op's winner and leaders; a model's flags and spec
    Column("trials", Integer),
    Column("speedup", Float), Column("speedup_ci_low", Float), Column("speedup_ci_high", Float),
    Column("machine", String(200)), Column("session", String(200)),
    Column("recorded_at", String(40)),
)
META = Table("store_meta", metadata, Column("name", String(40), primary_key=True),
             Column("value", String(200)))
KEY_FIELDS = {RESULTS: ("signature", "target", "iree_version", "flags", "candidate", "session",
                         "source"),
              ANSWERS: ("scope", "signature", "target", "iree_version", "flags", "session")}
# Each step takes a store from the version before it to its own.
MIGRATIONS: list[tuple[int, Callable[[Connection], None]]] = [
    (2, lambda connection: ANSWERS.create(connection, checkfirst=True)),
]


def default_url() -> str:
    """SQLite beside the compile cache: one store per user, shared by their runs."""
    return f"sqlite:///{compile_cache.default_dir().parent / 'results.sqlite'}"


def record_key(record: dict, table: Table = RESULTS) -> str:
    return hashlib.sha256(json.dumps([str(record.get(k, "")) for k in KEY_FIELDS[table]])
                          .encode()).hexdigest()


def fields(table: Table) -> list[str]:
    return [c.name for c in table.columns if c.name not in ("id", "key")]


def op_fields(op) -> dict:
    """A tunable op (iree.tunable.TunableOp) as the store names it: its signature is the hash
    of what a tuning spec's matcher and a configuration depend on."""
    loops, dims = list(op.loops), [[d, list(p)] for d, p in op.dims]
    identity = json.dumps([op.name, list(op.operand_types), loops, dims])
    return {"signature": hashlib.sha256(identity.encode()).hexdigest()[:32], "kind": op.kind,
            "op_name": op.name, "shape": op.shape, "types": op.types,
            "loops": json.dumps(loops), "dims": json.dumps(dims),
            "operand_types": json.dumps(list(op.operand_types))}


def op_of(record: dict, index: int = 0) -> TunableOp:
    """The op a stored record was measured on, as the tuner read it: op_fields read back."""
    element, accumulator = (x.strip() for x in str(record["types"]).split("->"))
    return TunableOp(index, "", record["op_name"], record["kind"],
                     tuple(json.loads(record["loops"])),
                     tuple((d, tuple(p)) for d, p in json.loads(record["dims"])),
                     tuple(json.loads(record["operand_types"])), element, accumulator)


def target_fields(cpu) -> dict:
    """The target a result holds for (core.library.CpuTarget): CPU, triple and features."""
    return {"target": f"{cpu.name} {cpu.triple or cpu.arch} {cpu.features}",
            "vector_bytes": cpu.native_vector_bytes}


def context(op, cpu, iree_version: str, session: str, machine: str, source: str) -> dict:
    """The fields every record of one op from one run shares (tuner and profiler alike)."""
    return {**op_fields(op), **target_fields(cpu), "iree_version": iree_version,
            "session": session, "machine": machine, "source": source, "recorded_at": now()}


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class Store:
    engine: Engine
    url: str  # as given, without a password

    def record(self, records: list[dict], table: Table = RESULTS) -> int:
        """Insert each record (unknown fields dropped), skipping keys already there; the
        number inserted. One transaction: all of them or none."""
        rows = []
        for record in records:
            row = {k: _cell(record.get(k)) for k in fields(table)}
            row["key"] = record_key(row, table)
            rows.append(row)
        if not rows:
            return 0
        insert = _insert(self.engine)
        with self.engine.begin() as connection:
            # RETURNING counts the rows inserted on both engines (rowcount of a batch does not)
            result = connection.execute(insert(table).on_conflict_do_nothing(
                index_elements=["key"]).returning(table.c.key), rows)
            return len(result.all())

    def remember(self, answer: dict) -> bool:
        """A finished search's answer (ANSWERS' fields; `answer` JSON-encoded here)."""
        return self.record([{**answer, "answer": json.dumps(answer["answer"])}], ANSWERS) == 1

    def answer(self, scope: str, signature: str, target: str, iree_version: str,
               flags: str) -> dict | None:
        """The latest answer to this question (its `answer` decoded), or None."""
        query = (select(ANSWERS).where(ANSWERS.c.scope == scope, ANSWERS.c.signature == signature,
                                       ANSWERS.c.target == target,
                                       ANSWERS.c.iree_version == iree_version,
                                       ANSWERS.c.flags == flags)
                 .order_by(ANSWERS.c.recorded_at.desc(), ANSWERS.c.id.desc()).limit(1))
        with self.engine.connect() as connection:
            row = connection.execute(query).mappings().first()
        return None if row is None else _decoded(dict(row))

    def best(self, signature: str, target: str, iree_version: str, flags: str, limit: int = 3,
             names: list[str] | None = None) -> list[dict]:
        """The fastest verified candidates recorded for one op on one target with one IREE
        version under the same flags: each candidate's best record, best first. Without
        `names`, only those that beat IREE's default significantly when measured (the others
        are not worth re-confirming); with `names`, those candidates whatever they measured."""
        query = select(RESULTS).where(RESULTS.c.signature == signature, RESULTS.c.target == target,
                                      RESULTS.c.iree_version == iree_version,
                                      RESULTS.c.flags == flags)
        query = (query.where(RESULTS.c.candidate.in_(names)) if names is not None else
                 query.where(RESULTS.c.speedup_ci_low > 1 + stats.MIN_EFFECT))
        return _best_per_candidate(self._all(query.order_by(RESULTS.c.speedup.desc())), limit)

    def near(self, fields_of_op: dict, target: str, iree_version: str) -> list[dict]:
        """Verified records of other ops of the same name, kind, element types and number of
        loops, on this target and IREE version, that beat IREE's default, best first: what a
        search of a nearby shape starts from (under any flags: a seed is only a first guess,
        built and measured anew)."""
        query = self._near(fields_of_op, target, iree_version).where(
            RESULTS.c.speedup_ci_low > 1 + stats.MIN_EFFECT)
        return _same_loops(self._all(query.order_by(RESULTS.c.speedup.desc())), fields_of_op)

    def near_answers(self, fields_of_op: dict, target: str, iree_version: str) -> list[dict]:
        """The op answers of those other ops (as `near` finds them, whatever they measured),
        each with its op's `loops`, latest first: what nearby shapes' searches concluded."""
        shapes = {r["signature"]: r["loops"] for r in _same_loops(self._all(
            self._near(fields_of_op, target, iree_version)
            .with_only_columns(RESULTS.c.signature, RESULTS.c.loops).distinct()), fields_of_op)}
        query = (select(ANSWERS).where(ANSWERS.c.scope == "op", ANSWERS.c.target == target,
                                       ANSWERS.c.iree_version == iree_version,
                                       ANSWERS.c.signature.in_(list(shapes)))
                 .order_by(ANSWERS.c.recorded_at.desc(), ANSWERS.c.id.desc()))
        decoded = (_decoded(row) for row in self._all(query))
        return [{**row, "loops": shapes[row["signature"]]} for row in decoded if row is not None]

    def answered_flags(self, target: str, iree_version: str) -> list[tuple[str, str]]:
        """The flag sets (name, flags) that the model answers on this target and IREE version
        were tuned under, latest first: under them, those models' ops have results here."""
        query = (select(ANSWERS).where(ANSWERS.c.scope == "model", ANSWERS.c.target == target,
                                       ANSWERS.c.iree_version == iree_version)
                 .order_by(ANSWERS.c.recorded_at.desc(), ANSWERS.c.id.desc()))
        decoded = (_decoded(row) for row in self._all(query))
        return list(dict.fromkeys((row["answer"]["flags"][0], row["answer"]["flags"][1])
                                  for row in decoded if row and row["answer"].get("flags")))

    @staticmethod
    def _near(fields_of_op: dict, target: str, iree_version: str):
        return select(RESULTS).where(RESULTS.c.op_name == fields_of_op["op_name"],
                                     RESULTS.c.kind == fields_of_op["kind"],
                                     RESULTS.c.types == fields_of_op["types"],
                                     RESULTS.c.signature != fields_of_op["signature"],
                                     RESULTS.c.target == target,
                                     RESULTS.c.iree_version == iree_version)

    def counts(self, columns: tuple[str, ...], **equal) -> list[tuple]:
        """Results counted by `columns` (those whose columns equal `equal`): tuples of the
        columns' values, then the count."""
        grouped = [RESULTS.c[c] for c in columns]
        query = (select(*grouped, func.count())
                 .where(*(RESULTS.c[k] == v for k, v in equal.items())).group_by(*grouped))
        with self.engine.connect() as connection:
            return [tuple(row) for row in connection.execute(query).all()]

    def where(self, table: Table, **equal) -> list[dict]:
        """The rows of `table` whose columns equal these values, oldest first."""
        return self._all(select(table).where(*(table.c[k] == v for k, v in equal.items()))
                         .order_by(table.c.id))

    def _all(self, query) -> list[dict]:
        with self.engine.connect() as connection:
            return [dict(r) for r in connection.execute(query).mappings()]

    def rows(self, table: Table = RESULTS) -> list[dict]:
        return self.where(table)

    def count(self, table: Table = RESULTS) -> int:
        with self.engine.connect() as connection:
            return int(connection.execute(select(func.count()).select_from(table)).scalar() or 0)

    def merge(self, other: "Store") -> tuple[int, int]:
        """Every result and answer of `other` not yet here; the numbers added."""
        return (self.record(other.rows(RESULTS), RESULTS),
                self.record(other.rows(ANSWERS), ANSWERS))

    def close(self) -> None:
        self.engine.dispose()


def _best_per_candidate(rows: list[dict], limit: int) -> list[dict]:
    """Each candidate's first row (rows come best first), at most `limit` of them."""
    chosen: dict[str, dict] = {}
    for row in rows:
        chosen.setdefault(row["candidate"], row)
        if len(chosen) == limit:
            break
    return list(chosen.values())


def _cell(value):
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _insert(engine: Engine):
    """The dialect's INSERT, which has ON CONFLICT DO NOTHING."""
    from sqlalchemy.dialects import postgresql, sqlite
    return postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert


def _shown(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        from sqlalchemy.engine import make_url
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def _decoded(row: dict) -> dict | None:
    """An ANSWERS row with its `answer` JSON decoded; None when that is unreadable."""
    try:
        return {**row, "answer": json.loads(row["answer"])}
    except (TypeError, ValueError):
        return None


def _same_loops(rows: list[dict], fields_of_op: dict) -> list[dict]:
    """The rows of ops with as many loops as this op (JSON `loops` of each)."""
    loops = len(json.loads(fields_of_op["loops"]))
    return [r for r in rows if len(json.loads(r["loops"] or "[]")) == loops]


# SQLite answers "database is locked" at once, without its busy timeout, where waiting would
# deadlock (two openers switching a new file to WAL together): opening again settles it
LOCKED_RETRY_SECONDS = 60.0


def open_store(url: str | None = None) -> Store:
    """The store at `url` (default: SQLite in the cache folder), its schema created or migrated;
    a UserError in one line when it cannot be reached or is not ours."""
    url = url or default_url()
    shown = _shown(url)
    deadline = time.monotonic() + LOCKED_RETRY_SECONDS
    while True:
        try:
            return Store(_engine(url, shown), shown)
        except UserError:
            raise
        except (SQLAlchemyError, ArgumentError, OSError, ImportError) as error:
            detail = str(getattr(error, "orig", None) or error).strip().splitlines()[0]
            if "database is locked" in detail and time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            raise UserError(f"results store {shown}: cannot open it ({detail})") from None


def _engine(url: str, shown: str) -> Engine:
    """An engine on `url`, its schema created or migrated (disposed again if that fails)."""
    if url.startswith("postgresql://"):  # the driver this project installs
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    sqlite = url.startswith("sqlite")
    if sqlite and url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": 60} if sqlite else
                           {"connect_timeout": 10})
    if sqlite:
        @event.listens_for(engine, "connect")
        def _wal(connection, _record):
            # several writers at once; a killed writer leaves the last commit intact
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA busy_timeout=60000")
            # Python's sqlite3 commits before DDL on its own: a new store's tables would
            # appear one by one to another opener. Our own BEGIN below instead.
            connection.isolation_level = None

        @event.listens_for(engine, "begin")
        def _begin(connection):
            # the write lock first (waiting for it): a transaction that read, then writes,
            # never fails on a snapshot another writer made stale meanwhile
            connection.exec_driver_sql("BEGIN IMMEDIATE")
    try:
        _prepare(engine, shown)
    except BaseException:
        engine.dispose()
        raise
    return engine


def open_optional(url: str | None, say) -> Store | None:
    """The store at `url`, or None: `off`, or it cannot be opened (said through `say` in one
    line; the run goes on without it, a tuner searching as it would)."""
    if url == OFF:
        return None
    try:
        return open_store(url)
    except UserError as error:
        say(f"warning: {error}; results are not kept or reused")
        return None


def _prepare(engine: Engine, shown: str) -> None:
    """Create the tables of a new store; check and migrate an existing one."""
    if not inspect(engine).get_table_names():
        try:  # tables and version in one transaction: another opener sees all or none
            with engine.begin() as connection:
                if not inspect(connection).get_table_names():  # not made while we waited
                    metadata.create_all(connection)
                    connection.execute(META.insert().values(name="schema_version",
                                                            value=str(SCHEMA_VERSION)))
                    return
        except SQLAlchemyError:
            pass  # another process created the store meanwhile: check it as any other
    tables = set(inspect(engine).get_table_names())
    if not {"results", "store_meta"} <= tables:
        raise UserError(f"results store {shown}: not a store of this tool (tables "
                        f"{', '.join(sorted(tables))})")
    version = _version(engine)
    if version < 0 or version > SCHEMA_VERSION:
        raise UserError(f"results store {shown}: schema version {version if version >= 0 else '?'}"
                        f", this tool knows up to {SCHEMA_VERSION}")
    for step, migrate in MIGRATIONS:
        if step > int(version):
            try:
                with engine.begin() as connection:  # one step at a time, each all or nothing
                    migrate(connection)
                    connection.execute(META.update().where(META.c.name == "schema_version")
                                       .values(value=str(step)))
            except SQLAlchemyError:
                if _version(engine) < step:  # not another opener's migration meanwhile
                    raise
    for table in (RESULTS, ANSWERS):
        columns = {c["name"] for c in inspect(engine).get_columns(table.name)}
        missing = sorted({c.name for c in table.columns} - columns)
        if missing:
            raise UserError(f"results store {shown}: the {table.name} table lacks "
                            f"{', '.join(missing)}")



def _version(engine: Engine) -> int:
    """The store's schema version (-1: none readable)."""
    with engine.connect() as connection:
        version = connection.execute(select(META.c.value).where(
            META.c.name == "schema_version")).scalar()
    return int(version) if version is not None and str(version).isdigit() else -1
