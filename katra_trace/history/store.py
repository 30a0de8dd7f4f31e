"""History storage: a DuckDB file (opens retry on the lock; a writer holds it only to insert) or
Parquet files per CI runner. DuckDB is optional (exit 3). See docs/history.md."""

from __future__ import annotations

import dataclasses
import os
import random
import re
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import quote, unquote

from katra_trace.errors import ConfigError, KatraError, OutputExistsError
from katra_trace.history.rows import COLUMN_NAMES, COLUMNS, HistoryRow
from katra_trace.io.claim import check_output, describe, move_into_place
from katra_trace.io.inputs import file_kind
from katra_trace.optional import MissingDependencyError, require
from katra_trace.text import shown

DEFAULT_DB = Path(".katra") / "history.duckdb"
DEFAULT_LOCK_TIMEOUT_S = 60.0
STORE_VERSION = 1
PARTITION_COLUMNS = ("host_id", "label")
TABLE = "history"


HistoryUnavailable = MissingDependencyError


class HistoryLockedError(KatraError):
    """Another process held the store's lock past the lock timeout."""


def duckdb_module() -> ModuleType:
    return require("duckdb", extra="history", purpose="katra3d history", what="DuckDB")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return re.sub(r"\s*See also https?://\S+", "", text)


_LOCK_ERROR = re.compile(r"^IO Error: Could not set lock on file ")


def _is_lock_error(duckdb: ModuleType, exc: BaseException) -> bool:
    """DuckDB's lock conflict, not any message containing "lock" (``block.duckdb``)."""
    return isinstance(exc, duckdb.IOException) and _LOCK_ERROR.match(str(exc)) is not None


def store_path(
    path: str | os.PathLike[str],
    read_only: bool,
    create: bool = True,
    inputs: Sequence[str | os.PathLike[str]] = (),
) -> Path:
    """The store file ``path`` names, checked; called with ``--db`` as typed (a trailing '/' is
    seen only there)."""
    if read_only:
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            raise ConfigError(
                f"no history store at {shown(path)}; add runs with 'katra3d history add TRACE "
                f"--label LABEL' (or point --db at a store)"
            ) from None
        except OSError as exc:
            raise ConfigError(
                f"history store {shown(path)} cannot be opened: {describe(exc)}"
            ) from None
        if not stat.S_ISREG(mode):
            raise ConfigError(
                f"history store {shown(path)} is not a regular file (it is "
                f"{file_kind(mode) or 'not a file'})"
            )
    else:
        if Path(path) == DEFAULT_DB and not os.path.isdir(DEFAULT_DB.parent):
            if not create:
                return DEFAULT_DB  # its directory is made when the store is opened
            try:
                DEFAULT_DB.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError(
                    f"cannot create the directory of {shown(path)}: {describe(exc)}"
                ) from None
        check_output(path, append=True, inputs=inputs, option="--db", example="history.duckdb")
    return Path(os.path.realpath(path))


@contextmanager
def open_store(
    path: Path, read_only: bool, lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S
) -> Iterator[Any]:
    """A DuckDB connection, closed on exit; retries the lock, any other failure is a ConfigError."""
    duckdb = duckdb_module()
    path = store_path(path, read_only)
    deadline = time.monotonic() + lock_timeout_s
    delay = 0.02
    while True:
        try:
            con = duckdb.connect(str(path), read_only=read_only)
            break
        except duckdb.Error as exc:
            message = _one_line(exc)
            if not _is_lock_error(duckdb, exc):
                raise ConfigError(
                    f"cannot open history store {shown(path)} (damaged, or not a DuckDB file?): "
                    f"{message}"
                ) from None
            if time.monotonic() >= deadline:
                holder = re.search(r"\(PID (\d+)\)", message)
                who = f" (process {holder[1]})" if holder else ""
                raise HistoryLockedError(
                    f"history store {shown(path)} is locked by another process{who} and stayed "
                    "locked for "
                    f"{lock_timeout_s:g} s; try again, or raise --lock-timeout"
                ) from None
            time.sleep(min(delay * (0.5 + random.random()), max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 1.0)
    try:
        _check_schema(con, path, read_only)
        yield con
    finally:
        con.close()


def _check_schema(con: Any, path: Path, read_only: bool) -> None:
    duckdb = duckdb_module()
    try:
        tables = {
            r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
        }
        if "katra3d_history" in tables:
            ((version,),) = con.execute("SELECT version FROM katra3d_history").fetchall()
            if int(version) > STORE_VERSION:
                raise ConfigError(
                    f"history store {str(path)!r} has format {version}, newer than this katra3d "
                    f"reads ({STORE_VERSION}); upgrade katra3d"
                )
            return
        if tables or read_only:
            raise ConfigError(f"{str(path)!r} is a DuckDB file but not a katra3d history store")
        con.execute("BEGIN TRANSACTION")
        con.execute("CREATE TABLE katra3d_history (version INTEGER)")
        con.execute("INSERT INTO katra3d_history VALUES (?)", [STORE_VERSION])
        cols = ", ".join(f'"{name}" {kind}' for name, kind in COLUMNS)
        con.execute(f"CREATE TABLE {TABLE} ({cols})")
        con.execute("COMMIT")
    except duckdb.Error as exc:
        raise ConfigError(f"history store {str(path)!r} is unreadable: {_one_line(exc)}") from None
    except ValueError:
        raise ConfigError(f"history store {str(path)!r} has a damaged version table") from None


@dataclasses.dataclass(frozen=True)
class PreparedRun:
    path: Path
    sha256: str
    label: str
    host_id: str
    rows: list[HistoryRow]


@dataclasses.dataclass
class AddResult:
    added: list[PreparedRun] = dataclasses.field(default_factory=list)
    duplicates: list[tuple[PreparedRun, str]] = dataclasses.field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(len(r.rows) for r in self.added)


def _columns(rows: Sequence[HistoryRow]) -> list[list[Any]]:
    return [[getattr(row, name) for row in rows] for name in COLUMN_NAMES]


def _insert_sql(table: str) -> str:
    casts = ", ".join(f'unnest(?::{kind}[]) AS "{name}"' for name, kind in COLUMNS)
    return f"INSERT INTO {table} SELECT {casts}"


def add_to_store(
    path: Path, runs: Sequence[PreparedRun], lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S
) -> AddResult:
    """One transaction; skips traces already stored."""
    duckdb = duckdb_module()
    result = AddResult()
    with open_store(path, read_only=False, lock_timeout_s=lock_timeout_s) as con:
        try:
            con.execute("BEGIN TRANSACTION")
            shas = [r.sha256 for r in runs]
            known = (
                dict(
                    con.execute(
                        f"SELECT trace_sha256, min(label) FROM {TABLE} WHERE trace_sha256 IN "
                        "(SELECT unnest(?::VARCHAR[])) "
                        "GROUP BY 1",
                        [shas],
                    ).fetchall()
                )
                if shas
                else {}
            )
            rows: list[HistoryRow] = []
            for run in runs:
                if run.sha256 in known:
                    result.duplicates.append((run, str(known[run.sha256])))
                else:
                    result.added.append(run)
                    rows.extend(run.rows)
            if rows:
                con.execute(_insert_sql(TABLE), _columns(rows))
            con.execute("COMMIT")
        except duckdb.Error as exc:
            raise ConfigError(
                f"cannot write history store {str(path)!r}: {_one_line(exc)}"
            ) from None
    return result


def partition_dir(root: Path, host_id: str, label: str) -> Path:
    """``root/host_id=<host>/label=<label>``, percent-encoded as DuckDB's hive writer."""
    return root / f"host_id={quote(host_id, safe='')}" / f"label={quote(label, safe='')}"


def write_parquet_run(root: Path, run: PreparedRun, con: Any) -> bool:
    """Write one run's rows as ``<partition>/<sha256>.parquet``; False when it already exists."""
    target_dir = partition_dir(root, run.host_id, run.label)
    target = target_dir / f"{run.sha256}.parquet"
    if target.exists():
        return False
    target_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{run.sha256[:16]}.", suffix=".tmp", dir=target_dir)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        kept = [c for c in COLUMN_NAMES if c not in PARTITION_COLUMNS]
        con.execute("CREATE OR REPLACE TEMP TABLE one AS SELECT * FROM history_rows LIMIT 0")
        con.execute(_insert_sql("one"), _columns(run.rows))
        cols = ", ".join(f'"{c}"' for c in kept)
        con.execute(f"COPY (SELECT {cols} FROM one) TO '{_sql_str(str(tmp))}' (FORMAT PARQUET)")
        try:
            # a runner that got there first wins, nothing is replaced
            move_into_place(tmp, target, replace=False)
        except OutputExistsError:
            return False
        return True
    finally:
        tmp.unlink(missing_ok=True)


def _sql_str(text: str) -> str:
    return text.replace("'", "''")


def add_to_parquet(root: Path, runs: Sequence[PreparedRun]) -> AddResult:
    duckdb = duckdb_module()
    result = AddResult()
    con = duckdb.connect()
    try:
        cols = ", ".join(f'"{name}" {kind}' for name, kind in COLUMNS)
        con.execute(f"CREATE TEMP TABLE history_rows ({cols})")
        existing = _parquet_labels(root, [r.sha256 for r in runs])
        for run in runs:
            if run.sha256 in existing:
                result.duplicates.append((run, existing[run.sha256]))
            elif write_parquet_run(root, run, con):
                result.added.append(run)
            else:
                result.duplicates.append((run, run.label))
    except OSError as exc:
        raise ConfigError(
            f"cannot write Parquet history under {str(root)!r}: {exc.strerror or exc}"
        ) from None
    except duckdb.Error as exc:
        raise ConfigError(
            f"cannot write Parquet history under {str(root)!r}: {_one_line(exc)}"
        ) from None
    finally:
        con.close()
    return result


def _parquet_labels(root: Path, shas: Sequence[str]) -> dict[str, str]:
    wanted = set(shas)
    out: dict[str, str] = {}
    if not root.is_dir():
        return out
    for f in root.glob("host_id=*/label=*/*.parquet"):
        if f.stem in wanted:
            out.setdefault(f.stem, unquote(f.parent.name.split("=", 1)[1]))
    return out


def export_parquet(
    db: Path,
    root: Path,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[int, int]:
    """Export ``db`` to Parquet under ``root``; returns (files written, runs already there)."""
    duckdb = duckdb_module()
    with open_store(db, read_only=True, lock_timeout_s=lock_timeout_s) as con:
        try:
            shas = [
                r[0]
                for r in con.execute(
                    f"SELECT DISTINCT trace_sha256 FROM {TABLE} ORDER BY 1"
                ).fetchall()
            ]
            if not shas:
                raise ConfigError(f"history store {str(db)!r} is empty: nothing to export")
            written = skipped = 0
            mem = duckdb.connect()
            try:
                cols = ", ".join(f'"{name}" {kind}' for name, kind in COLUMNS)
                mem.execute(f"CREATE TEMP TABLE history_rows ({cols})")
                names = ", ".join(f'"{c}"' for c in COLUMN_NAMES)
                for i, sha in enumerate(shas):
                    cur = con.execute(f"SELECT {names} FROM {TABLE} WHERE trace_sha256 = ?", [sha])
                    rows = [HistoryRow(*r) for r in cur.fetchall()]
                    # a trace lives under one label in a store
                    first = rows[0]
                    run = PreparedRun(
                        Path(first.trace_path or ""), sha, first.label, first.host_id, rows
                    )
                    if write_parquet_run(root, run, mem):
                        written += 1
                    else:
                        skipped += 1
                    if progress is not None:
                        progress(i + 1, len(shas))
            finally:
                mem.close()
        except OSError as exc:
            raise ConfigError(
                f"cannot write Parquet history under {str(root)!r}: {exc.strerror or exc}"
            ) from None
        except duckdb.Error as exc:
            raise ConfigError(
                f"cannot export history store {str(db)!r}: {_one_line(exc)}"
            ) from None
    return written, skipped


@dataclasses.dataclass(frozen=True)
class Source:
    """A DuckDB store file, or a Parquet glob (``DIR/**/*.parquet``)."""

    db: Path | None = None
    parquet_glob: str | None = None

    @property
    def name(self) -> str:
        return self.parquet_glob if self.parquet_glob is not None else str(self.db)


def read_rows(
    source: Source, columns: Sequence[str], lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S
) -> list[tuple[Any, ...]]:
    """The ``columns`` of each row of ``source`` (each trace once), as DuckDB returns them;
    ConfigError if missing, unreadable or empty."""
    duckdb = duckdb_module()
    unknown = [c for c in columns if c not in COLUMN_NAMES]
    if unknown:
        raise ValueError(f"unknown history columns {unknown}")
    names = ", ".join(f'"{c}"' for c in columns)
    if source.parquet_glob is not None:
        con = duckdb.connect()
        try:
            types = ", ".join(f"'{c}': 'VARCHAR'" for c in PARTITION_COLUMNS)
            relation = (
                f"read_parquet('{_sql_str(source.parquet_glob)}', hive_partitioning = true, "
                f"union_by_name = true, hive_types = {{{types}}})"
            )
            rows = _select(con, relation, names)
        except duckdb.Error as exc:
            raise ConfigError(
                f"cannot read history from {source.parquet_glob!r}: {_one_line(exc)}"
            ) from None
        finally:
            con.close()
    else:
        assert source.db is not None
        with open_store(source.db, read_only=True, lock_timeout_s=lock_timeout_s) as con:
            try:
                rows = _select(con, TABLE, names)
            except duckdb.Error as exc:
                raise ConfigError(
                    f"cannot read history store {str(source.db)!r}: {_one_line(exc)}"
                ) from None
    if not rows:
        raise ConfigError(
            f"history {source.name!r} is empty; add runs with 'katra3d history add TRACE --label "
            "LABEL'"
        )
    return rows


def _select(con: Any, relation: str, names: str) -> list[tuple[Any, ...]]:
    # a trace stored under two labels counts once, under its first
    sql = (
        f"WITH src AS (SELECT * FROM {relation}), "
        "firsts AS (SELECT trace_sha256, arg_min(label, added_ns) AS first_label FROM src GROUP BY "
        "1) "
        f"SELECT {names} FROM src JOIN firsts USING (trace_sha256) WHERE src.label = "
        "firsts.first_label"
    )
    out: list[tuple[Any, ...]] = con.execute(sql).fetchall()
    return out


__all__ = [
    "DEFAULT_DB",
    "DEFAULT_LOCK_TIMEOUT_S",
    "HistoryLockedError",
    "HistoryUnavailable",
    "PARTITION_COLUMNS",
    "AddResult",
    "PreparedRun",
    "STORE_VERSION",
    "Source",
    "add_to_parquet",
    "add_to_store",
    "duckdb_module",
    "export_parquet",
    "open_store",
    "partition_dir",
    "read_rows",
    "store_path",
    "write_parquet_run",
]
