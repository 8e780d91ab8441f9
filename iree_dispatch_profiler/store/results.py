"""The tuning database: every verified result kept as it is produced, and the queries that
reuse them. One schema (SQLAlchemy Core) on two engines: SQLite in the cache folder by default
(WAL, so that several processes write at once), or a PostgreSQL server named by a URL for a
team or a cluster. A record's `key` hashes what makes it one result, and inserts skip a key
already there: a writer that retries, or a store merged twice, never duplicates a result."""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy import (Column, Float, Integer, MetaData, String, Table, Text, create_engine,
                        event, inspect, select)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from iree_dispatch_profiler.core import stats
from iree_dispatch_profiler.core.library import UserError
from iree_dispatch_profiler.iree import compile_cache

SCHEMA_VERSION = 1
# Each step takes a store from the version before it to its own: (version, SQL statements).
MIGRATIONS: list[tuple[int, list[str]]] = []
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
META = Table("store_meta", metadata, Column("name", String(40), primary_key=True),
             Column("value", String(200)))
FIELDS = [c.name for c in RESULTS.columns if c.name not in ("id", "key")]
KEY_FIELDS = ("signature", "target", "iree_version", "flags", "candidate", "session", "source")


def default_url() -> str:
    """SQLite beside the compile cache: one store per user, shared by their runs."""
    return f"sqlite:///{compile_cache.default_dir().parent / 'results.sqlite'}"


def record_key(record: dict) -> str:
    return hashlib.sha256(json.dumps([str(record.get(k, "")) for k in KEY_FIELDS])
                          .encode()).hexdigest()


def op_fields(op) -> dict:
    """A tunable op (iree.tunable.TunableOp) as the store names it: its signature is the hash
    of what a tuning spec's matcher and a configuration depend on."""
    loops, dims = list(op.loops), [[d, list(p)] for d, p in op.dims]
    identity = json.dumps([op.name, list(op.operand_types), loops, dims])
    return {"signature": hashlib.sha256(identity.encode()).hexdigest()[:32], "kind": op.kind,
            "op_name": op.name, "shape": op.shape, "types": op.types,
            "loops": json.dumps(loops), "dims": json.dumps(dims),
            "operand_types": json.dumps(list(op.operand_types))}


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

    def record(self, records: list[dict]) -> int:
        """Insert each record (unknown fields dropped), skipping keys already there; the
        number inserted. One transaction: all of them or none."""
        rows = []
        for record in records:
            row = {k: _cell(record.get(k)) for k in FIELDS}
            row["key"] = record_key(row)
            rows.append(row)
        if not rows:
            return 0
        insert = _insert(self.engine)
        with self.engine.begin() as connection:
            # RETURNING counts the rows inserted on both engines (rowcount of a batch does not)
            result = connection.execute(insert(RESULTS).on_conflict_do_nothing(
                index_elements=["key"]).returning(RESULTS.c.key), rows)
            return len(result.all())

    def best(self, signature: str, target: str, iree_version: str, limit: int = 3) -> list[dict]:
        """The fastest verified candidates recorded for one op on one target with one IREE
        version that beat IREE's default significantly when measured (the others are not
        worth re-confirming): each candidate's best record, best first."""
        query = (select(RESULTS).where(RESULTS.c.signature == signature,
                                       RESULTS.c.target == target,
                                       RESULTS.c.iree_version == iree_version,
                                       RESULTS.c.speedup_ci_low > 1 + stats.MIN_EFFECT)
                 .order_by(RESULTS.c.speedup.desc()))
        chosen: dict[str, dict] = {}
        with self.engine.connect() as connection:
            for row in connection.execute(query).mappings():
                if row["candidate"] not in chosen:
                    chosen[row["candidate"]] = dict(row)
                if len(chosen) == limit:
                    break
        return list(chosen.values())

    def rows(self) -> list[dict]:
        with self.engine.connect() as connection:
            return [dict(r) for r in connection.execute(select(RESULTS).order_by(RESULTS.c.id))
                    .mappings()]

    def count(self) -> int:
        with self.engine.connect() as connection:
            return len(connection.execute(select(RESULTS.c.id)).all())

    def merge(self, other: "Store") -> int:
        """Every record of `other` not yet here; the number added."""
        return self.record(other.rows())

    def close(self) -> None:
        self.engine.dispose()


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


def open_store(url: str | None = None) -> Store:
    """The store at `url` (default: SQLite in the cache folder), its schema created or migrated;
    a UserError in one line when it cannot be reached or is not ours."""
    url = url or default_url()
    shown = _shown(url)
    try:
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
        _prepare(engine, shown)
    except UserError:
        raise
    except (SQLAlchemyError, ArgumentError, OSError, ImportError) as error:
        detail = str(getattr(error, "orig", None) or error).strip().splitlines()[0]
        raise UserError(f"results store {shown}: cannot open it ({detail})") from None
    return Store(engine, shown)


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
        try:  # tables and version in one transaction: another opener sees both or neither
            with engine.begin() as connection:
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
    with engine.connect() as connection:
        version = connection.execute(select(META.c.value).where(
            META.c.name == "schema_version")).scalar()
    if version is None or not str(version).isdigit() or int(version) > SCHEMA_VERSION:
        raise UserError(f"results store {shown}: schema version {version}, this tool knows "
                        f"up to {SCHEMA_VERSION}")
    for step, statements in MIGRATIONS:
        if step > int(version):
            with engine.begin() as connection:
                for statement in statements:
                    connection.exec_driver_sql(statement)
                connection.execute(META.update().where(META.c.name == "schema_version")
                                   .values(value=str(step)))
    columns = {c["name"] for c in inspect(engine).get_columns("results")}
    missing = sorted({c.name for c in RESULTS.columns} - columns)
    if missing:
        raise UserError(f"results store {shown}: the results table lacks {', '.join(missing)}")

