"""On-disk overflow of the storage writer: immutable segment files of queued envelopes.

Layout under the spill root (one root per database)::

    <root>/<created_ns>-<pid>-<token>/   one directory per writer process
        lock                             flock'd while the writer lives
        <first_seq>-<last_seq>.seg       msgpack: the writer's fence and its records, fsync'd,
                                         renamed into place
    <root>/dead-letter/                  records the database refused (kept, never replayed)

A segment is written to a temporary name, fsync'd, renamed, and the directory fsync'd,
so a crash never leaves a torn segment. A writer holds ``flock`` on its directory's
``lock`` file; at start it adopts every directory whose lock it can take (its owner is
gone) and replays those segments before its own, oldest directory first. Segments are
ordered by the sequence number of their first record, so a segment written later from
records older than an existing one still sorts first.

A segment carries the fence its writer held when it wrote it (the room's lease epoch and
holder, see :class:`~alicia.agent.storage.leases.Fence`): a writer that adopts it writes
its records under that fence, so records of an agent whose room was taken over are
dropped, not stored in the new holder's conversation. (Segments of earlier versions, a
bare array of records, carry none.)
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NamedTuple

import msgspec

from alicia.protocol import BODY_TYPES, Envelope, MessageType

from .fence import Fence

__all__ = [
    "Item",
    "Segment",
    "SpillDir",
    "Spilled",
    "decode_items",
    "decode_segment",
    "encode_items",
]

logger = logging.getLogger("alicia.storage")

DEAD_LETTER: Final = "dead-letter"
_STAGING: Final = "."  # a directory being created, not yet locked: never adopted
_SUFFIX: Final = ".seg"


class Item(NamedTuple):
    """One queued envelope: submit order, submit time (epoch s), envelope, turn hint."""

    seq: int
    at: float
    env: Envelope[Any]
    turn: str | None = None
    """For a ToolUseRequest without ``previousId``: the turn's user message id at submit."""


class Spilled(NamedTuple):
    """A segment's content: its records and the fence they were queued under."""

    items: list[Item]
    fence: Fence | None


_Record = tuple[int, float, int, str, int, Any, bytes, Any]


class _Document(msgspec.Struct):
    records: list[_Record]
    fence: tuple[str, int | None, str | None] | None = None


_encoder = msgspec.msgpack.Encoder()
_records = msgspec.msgpack.Decoder(list[_Record])
_document = msgspec.msgpack.Decoder(_Document)
_MAPS: Final = frozenset((*range(0x80, 0x90), 0xDE, 0xDF))  # msgpack map markers


def _clean(value: Any) -> Any:
    # Lone surrogates cannot be UTF-8 encoded: mark them instead of losing the record.
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode()
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def _record(it: Item) -> tuple[Any, ...]:
    env = it.env
    return (
        it.seq,
        it.at,
        env.stanza_id,
        env.conversation_id,
        env.type,
        env.meta,
        _encoder.encode(env.body),
        it.turn,
    )


def _clean_record(it: Item) -> tuple[Any, ...]:
    env = it.env
    body = _clean(msgspec.to_builtins(env.body, builtin_types=(bytes, bytearray)))
    return (
        it.seq,
        it.at,
        env.stanza_id,
        _clean(env.conversation_id),
        env.type,
        _clean(msgspec.to_builtins(env.meta, builtin_types=(bytes, bytearray))),
        _encoder.encode(body),
        None if it.turn is None else _clean(it.turn),
    )


def encode_items(items: Iterable[Item], fence: Fence | None = None) -> bytes:
    """Serialise items (bodies as their wire maps) and the ``fence`` they were queued under
    into one msgpack document.

    A record whose strings cannot be encoded (lone surrogates) is kept with them
    replaced by ``?``.
    """
    out = []
    for it in items:
        try:
            out.append(msgspec.Raw(_encoder.encode(_record(it))))
        except (UnicodeEncodeError, msgspec.EncodeError, TypeError):
            out.append(msgspec.Raw(_encoder.encode(_clean_record(it))))
    held = None if fence is None else (fence.room, fence.epoch, fence.identity)
    return _encoder.encode({"records": out, "fence": held})


def decode_segment(data: bytes) -> Spilled:
    """Inverse of :func:`encode_items`; ``msgspec.DecodeError`` on a damaged document."""
    if data[:1] and data[0] in _MAPS:
        doc = _document.decode(data)
        records, fence = doc.records, None if doc.fence is None else Fence(*doc.fence)
    else:  # a segment of an earlier version: its records only
        records, fence = _records.decode(data), None
    items: list[Item] = []
    for seq, at, stanza, conv, code, meta, raw, turn in records:
        body = msgspec.msgpack.decode(raw, type=BODY_TYPES[MessageType(code)])
        env = Envelope(stanza_id=stanza, conversation_id=conv, type=code, body=body, meta=meta)
        items.append(Item(seq, at, env, turn))
    return Spilled(items, fence)


def decode_items(data: bytes) -> list[Item]:
    """The records of a segment document (see :func:`decode_segment`)."""
    return decode_segment(data).items


@dataclass(frozen=True, slots=True, order=True)
class Segment:
    """One segment file; sorts oldest first (directory age, then first record)."""

    dir_key: str
    first: int
    last: int
    path: Path = field(compare=False)
    count: int = field(compare=False, default=0)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _try_lock(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _segment_of(dir_key: str, path: Path) -> Segment | None:
    try:
        first, last = (int(p) for p in path.stem.split("-"))
    except ValueError:
        return None
    return Segment(dir_key, first, last, path)


class SpillDir:
    """The spill area of one writer: its own locked directory plus adopted orphans."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._own: Path | None = None
        self._locks: dict[Path, int] = {}
        self._segments: list[Segment] = []

    @property
    def own(self) -> Path:
        """This writer's directory."""
        if self._own is None:
            raise RuntimeError("SpillDir not opened")
        return self._own

    def open(self) -> list[Segment]:
        """Create our directory, adopt orphans; return the adopted segments, oldest first."""
        self.root.mkdir(parents=True, exist_ok=True)
        name = f"{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(4)}"
        # Locked before it is visible: another writer opening at the same moment adopts
        # every unlocked directory, so ours appears (an atomic rename) only once locked.
        staging = self.root / f"{_STAGING}{name}"
        staging.mkdir()
        fd = _try_lock(staging / "lock")
        if fd is None:  # pragma: no cover - a fresh hidden name is not adopted by others
            raise RuntimeError(f"cannot lock spill directory {staging}")
        own = self.root / name
        staging.rename(own)
        self._own = own
        self._locks[own] = fd
        adopted: list[Segment] = []
        for d in sorted(self.root.iterdir()):
            if d == own or d.name == DEAD_LETTER or d.name.startswith(_STAGING):
                continue
            if not d.is_dir():
                continue
            lock = _try_lock(d / "lock")
            if lock is None:
                continue  # a live writer owns it
            self._locks[d] = lock
            for tmp in d.glob("*.tmp"):
                tmp.unlink(missing_ok=True)
            for p in d.glob(f"*{_SUFFIX}"):
                seg = _segment_of(d.name, p)
                if seg is not None:
                    adopted.append(seg)
        adopted.sort()
        self._segments = list(adopted)
        return adopted

    @property
    def segments(self) -> Sequence[Segment]:
        """Segments not yet written to the database, oldest first."""
        return self._segments

    def oldest(self) -> Segment | None:
        """The next segment to replay, if any."""
        return self._segments[0] if self._segments else None

    def write(
        self, items: Sequence[Item], *, fence: Fence | None = None, fsync: bool = True
    ) -> Segment:
        """Persist ``items`` (ascending ``seq``), queued under ``fence``, as a new segment of
        our directory."""
        if not items:
            raise ValueError("no items to spill")
        seg = self._write_file(self.own, items, fsync=fsync, fence=fence)
        self._segments.append(seg)
        self._segments.sort()
        return seg

    def dead_letter(self, items: Sequence[Item]) -> Path:
        """Keep records the database refused in ``dead-letter/`` (never replayed)."""
        d = self.root / DEAD_LETTER
        d.mkdir(exist_ok=True)
        return self._write_file(d, items, fsync=True, prefix=f"{time.time_ns():020d}-").path

    def _write_file(
        self,
        d: Path,
        items: Sequence[Item],
        *,
        fsync: bool,
        prefix: str = "",
        fence: Fence | None = None,
    ) -> Segment:
        data = encode_items(items, fence)
        first, last = items[0].seq, items[-1].seq
        final = d / f"{prefix}{first:020d}-{last:020d}{_SUFFIX}"
        tmp = final.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, final)
        if fsync:
            _fsync_dir(d)
        return Segment(d.name, first, last, final, len(items))

    def read(self, seg: Segment) -> Spilled:
        """The records of ``seg`` and the fence they were queued under."""
        return decode_segment(seg.path.read_bytes())

    def remove(self, seg: Segment) -> None:
        """Forget a segment whose records are now stored."""
        seg.path.unlink(missing_ok=True)
        with contextlib.suppress(ValueError):
            self._segments.remove(seg)
        d = seg.path.parent
        if d != self._own and not any(s.path.parent == d for s in self._segments):
            self._release(d, remove=True)

    def quarantine(self, seg: Segment) -> None:
        """Move an unreadable segment to ``dead-letter/`` and forget it."""
        d = self.root / DEAD_LETTER
        d.mkdir(exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.replace(seg.path, d / f"{seg.dir_key}-{seg.path.name}")
        self.remove(seg)

    def _release(self, d: Path, *, remove: bool) -> None:
        fd = self._locks.pop(d, None)
        if remove:
            with contextlib.suppress(OSError):
                if not any(d.glob(f"*{_SUFFIX}")):
                    (d / "lock").unlink(missing_ok=True)
                    d.rmdir()
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        """Release every lock; drop our directory if nothing is left in it."""
        for d in list(self._locks):
            self._release(d, remove=True)
        self._segments = []
