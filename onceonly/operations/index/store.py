"""The index's RocksDB (rocksdict, raw bytes): one writer (``onceonly index``), any readers.

The writer holds RocksDB's lock; a reader (a command answering from the index) opens the
same directory read-only, which sees everything the writer has written so far (its
write-ahead log included) and nothing it writes afterwards: one consistent answer.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rocksdict import AccessType, Options, Rdict, WriteBatch

from onceonly.foundation.errors import OnceOnlyError
from onceonly.operations.index.layout import SEP, offset_key

#: what the entries mean (layout.py); an index built to another layout is built again
#: 2: the open dead letters; 3: each inbox's recorded message times (catch-up's start);
#: 4: the model usage per day, inbox and model (the operator page's)
LAYOUT_KEY, LAYOUT = b"layout", b"4"


#: the table files a reader keeps open at most (each with its index blocks in memory)
READER_OPEN_FILES = 10


class IndexMissing(OnceOnlyError):
    """No index has been built in the directory (run ``onceonly index``)."""


@dataclass(slots=True)
class Writes:
    """One batch's changes, written at once with the offset it reaches."""

    puts: dict[bytes, bytes] = field(default_factory=dict)
    deletes: set[bytes] = field(default_factory=set)

    def put(self, key: bytes, value: bytes) -> None:
        self.deletes.discard(key)
        self.puts[key] = value

    def delete(self, key: bytes) -> None:
        self.puts.pop(key, None)
        self.deletes.add(key)

    def get(self, key: bytes) -> bytes | None:
        """The batch's own value of ``key`` (None: deleted or not written here)."""
        return self.puts.get(key)

    def current(self, key: bytes, latest: Callable[[bytes], bytes | None]) -> bytes | None:
        """``key``'s value as of this point of the batch: the batch's own (None: deleted
        here), else the index's (``latest``)."""
        if key in self.puts:
            return self.puts[key]
        return None if key in self.deletes else latest(key)


def _older(path: Path) -> str:
    return (
        f"the index at {path} was built by another version of onceonly (its layout is "
        f"not {LAYOUT.decode()}): stop `onceonly index`, delete {path} and run "
        "`onceonly index --follow` to build it again from the topics"
    )


def _options() -> Options:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    return options


def _create(path: Path) -> None:
    """A new index, moved to ``path`` with its layout already written: a reader checking
    for ``CURRENT`` (answers.no_index_reason) never opens one that has no layout yet."""
    staging = path.with_name(f"{path.name}.creating")
    shutil.rmtree(staging, ignore_errors=True)  # left by a writer killed while creating
    path.parent.mkdir(parents=True, exist_ok=True)
    db = Rdict(str(staging), _options())
    db[LAYOUT_KEY] = LAYOUT
    db.close()
    try:
        staging.rename(path)  # replaces an empty directory; refused over files
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise OnceOnlyError(
            f"could not create the index at {path}: {exc}; give ONCEONLY_INDEX_DIR an "
            "empty or new directory"
        ) from exc


class IndexStore:
    def __init__(self, db: Rdict, path: Path) -> None:
        self._db = db
        self.path = path

    @classmethod
    def writer(cls, path: Path) -> IndexStore:
        if not (path / "CURRENT").exists():
            _create(path)
        try:
            store = cls(Rdict(str(path), _options()), path)
        except Exception as exc:  # rocksdict raises plain Exceptions (a held lock, ...)
            raise OnceOnlyError(
                f"could not open the index at {path} for writing: {exc}; is another "
                "`onceonly index` running on it?"
            ) from exc
        if store.get(LAYOUT_KEY) not in (None, LAYOUT) or (
            store.get(LAYOUT_KEY) is None and next(store.scan(b"offset" + SEP), None)
        ):
            store.close()
            raise OnceOnlyError(_older(path))
        if store.get(LAYOUT_KEY) is None:  # an empty index an older writer had just made
            store._db[LAYOUT_KEY] = LAYOUT
        return store

    @classmethod
    def reader(cls, path: Path) -> IndexStore:
        if not (path / "CURRENT").exists():
            raise IndexMissing(f"no index at {path} yet: run `onceonly index` to build it")
        options = Options(raw_mode=True)
        # a table file open holds its index blocks in memory: with every file open (RocksDB's
        # default) a command's memory grew with the index (226 MB at 10 million ledger
        # records); an answer reads a few files, so a few stay open
        # (RocksDB keeps 10 of max_open_files for other files, and splits its table cache
        # into 64 shards by default, each holding a file whatever its share: one shard)
        options.set_max_open_files(READER_OPEN_FILES + 10)
        options.set_table_cache_num_shard_bits(0)
        try:
            store = cls(Rdict(str(path), options, access_type=AccessType.read_only()), path)
        except Exception as exc:
            raise OnceOnlyError(f"could not read the index at {path}: {exc}") from exc
        if store.get(LAYOUT_KEY) != LAYOUT:
            store.close()
            raise OnceOnlyError(_older(path))
        return store

    def close(self) -> None:
        self._db.close()

    def flush(self) -> None:
        """Write the memtable to a table file: a reader opened read-only replays the
        write-ahead log into its own memory, so the writer keeps that log short."""
        self._db.flush()

    def get(self, key: bytes) -> bytes | None:
        value = self._db.get(key)
        return None if value is None else bytes(value)

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The entries whose key starts with ``prefix``, in key order."""
        for key, value in self._db.items(from_key=prefix):
            assert isinstance(key, bytes)  # raw mode: keys are bytes
            if not key.startswith(prefix):
                return
            yield key, bytes(value)

    def offsets(self, topic_name: str) -> dict[int, int]:
        """Partition -> the next offset to read, of the partitions read so far."""
        prefix = offset_key(topic_name, 0).rsplit(SEP, 1)[0] + SEP
        return {int(k.rsplit(SEP, 1)[1]): int(v) for k, v in self.scan(prefix)}

    def write(self, writes: Writes, topic_name: str, partition: int, next_offset: int) -> None:
        """The batch and the offset it reaches, atomically: a restart resumes from there."""
        batch = WriteBatch(raw_mode=True)
        for key in writes.deletes:
            batch.delete(key)
        for key, value in writes.puts.items():
            batch.put(key, value)
        batch.put(offset_key(topic_name, partition), str(next_offset).encode())
        self._db.write(batch)

    def backwards(self, prefix: bytes, start: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """The entries whose key starts with ``prefix``, last key first: from the last key
        at or before ``start`` if given (a key within the prefix), else the prefix's last."""
        first = prefix + b"\xff" if start is None else start
        for key, value in self._db.items(backwards=True, from_key=first):
            assert isinstance(key, bytes)
            if not key.startswith(prefix):
                return
            yield key, bytes(value)
