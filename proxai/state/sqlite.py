"""Embedded state: one SQLite file (WAL) under $PROXAI_HOME, shared by the processes of
`--workers N`. stdlib sqlite3 runs on one dedicated thread so the event loop never waits
on disk. A commit survives kill -9 of the process (WAL, synchronous=NORMAL); only a power
loss may take the last commits with it."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from proxai.state.base import ChainTooDeep, ResponseRecord, StateError, StateStore

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    parent_id TEXT,
    created_at REAL NOT NULL,
    expires_at REAL,
    data BLOB NOT NULL,
    PRIMARY KEY (tenant, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS responses_expiry ON responses (expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS kv (
    key TEXT PRIMARY KEY,
    value BLOB NOT NULL,
    expires_at REAL
) WITHOUT ROWID;
"""

# The record and its ancestors, newest first: (parent_id, data) rows.
_CHAIN = """
WITH RECURSIVE chain (parent_id, data, depth) AS (
    SELECT parent_id, data, 1 FROM responses WHERE tenant = ?1 AND id = ?2
    UNION ALL
    SELECT r.parent_id, r.data, chain.depth + 1
    FROM responses AS r JOIN chain ON r.tenant = ?1 AND r.id = chain.parent_id
    WHERE chain.depth <= ?3
)
SELECT parent_id, data FROM chain ORDER BY depth
"""


def default_path() -> Path:
    from proxai.observability.capture import home

    return home() / "state.db"


def path_from_url(url: str | None) -> Path:
    """`sqlite:///abs/path.db`, `sqlite://relative.db`, a plain path, or None (the default file)."""
    if not url:
        return default_path()
    if url.startswith("sqlite://"):
        url = url[len("sqlite://"):]
    return Path(url).expanduser()


class SqliteStore(StateStore):
    name = "sqlite"

    def __init__(self, path: str | os.PathLike[str] | None = None, **limits):
        super().__init__(**limits)
        self.path = Path(path) if path is not None else default_path()
        self._executor: ThreadPoolExecutor | None = None
        self._db: sqlite3.Connection | None = None

    async def open(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="proxai-state")
        try:
            await self._run(self._connect)
        except (OSError, sqlite3.Error) as exc:
            self._executor.shutdown(wait=False)
            self._executor = None
            raise StateError(f"cannot open the sqlite state file {self.path}: {exc}") from None

    @property
    def location(self) -> str:
        return str(self.path)

    async def close(self) -> None:
        if self._executor is None:
            return
        await self._run(self._disconnect)
        self._executor.shutdown(wait=True)
        self._executor = None

    def _connect(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Owner-only from the first byte: create the file 0600 before SQLite opens it
        # (its -wal and -shm files copy the database file's permissions).
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        os.close(fd)
        os.chmod(self.path, 0o600)
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA busy_timeout=30000")
        db.executescript(_SCHEMA)
        self._db = db

    def _disconnect(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    async def _run(self, fn, *args):
        if self._executor is None:
            raise RuntimeError("the sqlite state store is not open")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _write(self, fn):
        """Run fn(db) in one IMMEDIATE transaction: a read-modify-write that another
        worker process cannot interleave."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            result = fn(db)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return result

    # --- records ---

    async def _put(self, record: ResponseRecord, data: bytes, only_if_absent: bool) -> bool:
        verb = "INSERT OR IGNORE" if only_if_absent else "INSERT OR REPLACE"

        def put():
            return self._db.execute(
                f"{verb} INTO responses (tenant, id, parent_id, created_at, expires_at, data) VALUES (?, ?, ?, ?, ?, ?)",
                (record.tenant, record.id, record.parent_id, record.created_at, record.expires_at, data),
            ).rowcount > 0

        return await self._run(put)

    def _select(self, tenant: str, response_id: str) -> ResponseRecord | None:
        row = self._db.execute("SELECT data FROM responses WHERE tenant = ? AND id = ?", (tenant, response_id)).fetchone()
        return ResponseRecord.loads(row[0]) if row else None

    async def _get(self, tenant: str, response_id: str) -> ResponseRecord | None:
        return await self._run(self._select, tenant, response_id)

    async def _chain(self, tenant: str, response_id: str, max_depth: int) -> list[ResponseRecord] | None:
        def walk():  # one recursive query, bounded one past the limit (so a cycle ends too)
            rows = self._db.execute(_CHAIN, (tenant, response_id, max_depth)).fetchall()
            if not rows:
                return None
            if len(rows) > max_depth:
                raise ChainTooDeep(max_depth)
            if rows[-1][0] is not None:
                return None  # the oldest record's parent is gone: a broken link
            return [ResponseRecord.loads(data) for _, data in rows]

        return await self._run(walk)

    async def _delete(self, tenant: str, response_id: str) -> bool:
        def delete():
            return self._db.execute("DELETE FROM responses WHERE tenant = ? AND id = ?", (tenant, response_id)).rowcount > 0

        return await self._run(delete)

    async def _sweep(self) -> int:
        def sweep():
            now = time.time()
            n = self._db.execute("DELETE FROM responses WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,)).rowcount
            n += self._db.execute("DELETE FROM kv WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,)).rowcount
            return n

        return await self._run(sweep)

    # --- key-value ---

    @staticmethod
    def _live(db: sqlite3.Connection, key: str) -> bytes | None:
        row = db.execute("SELECT value, expires_at FROM kv WHERE key = ?", (key,)).fetchone()
        if row is None or (row[1] is not None and row[1] <= time.time()):
            return None
        return bytes(row[0])

    async def _kv_get(self, key: str) -> bytes | None:
        return await self._run(lambda: self._live(self._db, key))

    async def _kv_set(self, key, value, ttl_secs, only_if_absent) -> bool:
        expires = self._expiry(ttl_secs)

        def kv_set(db):
            if only_if_absent and self._live(db, key) is not None:
                return False
            db.execute("INSERT OR REPLACE INTO kv (key, value, expires_at) VALUES (?, ?, ?)", (key, bytes(value), expires))
            return True

        return await self._run(self._write, kv_set)

    async def _kv_incr(self, key, amount, ttl_secs) -> int:
        expires = self._expiry(ttl_secs)

        def incr(db):
            current = self._live(db, key)
            if current is None:
                db.execute("INSERT OR REPLACE INTO kv (key, value, expires_at) VALUES (?, ?, ?)", (key, str(amount).encode(), expires))
                return amount
            value = int(current) + amount
            db.execute("UPDATE kv SET value = ? WHERE key = ?", (str(value).encode(), key))
            return value

        return await self._run(self._write, incr)

    async def _kv_cas(self, key, expected, value, ttl_secs) -> bool:
        expires = self._expiry(ttl_secs)

        def cas(db):
            if self._live(db, key) != expected:
                return False
            db.execute("INSERT OR REPLACE INTO kv (key, value, expires_at) VALUES (?, ?, ?)", (key, bytes(value), expires))
            return True

        return await self._run(self._write, cas)

    async def _kv_delete(self, key: str) -> bool:
        def delete(db):
            live = self._live(db, key) is not None
            db.execute("DELETE FROM kv WHERE key = ?", (key,))
            return live

        return await self._run(self._write, delete)
