"""Typed errors of the Alicia protocol and the wire codes they map to.

Exception tree::

    ProtocolError            base; carries the wire ``code`` and ``severity``
    ├── EncodeError          we refused to encode an envelope
    │   └── PacketTooLargeError   encoded envelope exceeds one reliable data packet
    ├── DecodeError          bytes are not a valid envelope (101)
    │   └── ValidationError  a field is missing, ill-typed or out of range (101)
    └── OrderingError        a stanzaId breaks its sender's monotonic order (202)

Every error can be turned into the body of an ErrorMessage (type 1) in one place,
:func:`alicia.protocol.codec.error_body`, so the agent never invents codes ad hoc.
"""

from __future__ import annotations

import enum

__all__ = [
    "DecodeError",
    "EncodeError",
    "ErrorCode",
    "OrderingError",
    "PacketTooLargeError",
    "ProtocolError",
    "Severity",
    "ValidationError",
]


class ErrorCode(enum.IntEnum):
    """ErrorMessage ``code`` values (PROTOCOL.md §4.10)."""

    MALFORMED_DATA = 101
    UNKNOWN_MESSAGE_TYPE = 102
    CONVERSATION_NOT_FOUND = 201
    INVALID_STATE = 202
    NOT_PERMITTED = 203
    DUPLICATE_ID = 204
    TOOL_NOT_FOUND = 301
    TOOL_TIMEOUT = 304
    INTERNAL_ERROR = 501
    SERVICE_UNAVAILABLE = 503
    OVERLOADED = 504


class Severity(enum.IntEnum):
    """ErrorMessage ``severity`` values."""

    INFO = 0
    WARNING = 1
    ERROR = 2
    CRITICAL = 3


class ProtocolError(Exception):
    """Base of every protocol error; ``code``/``severity``/``recoverable`` feed ErrorMessage."""

    code: ErrorCode = ErrorCode.INTERNAL_ERROR
    severity: Severity = Severity.ERROR
    recoverable: bool = True


class EncodeError(ProtocolError):
    """An envelope could not be encoded (bad body, wrong type code, out-of-range value)."""

    code = ErrorCode.INTERNAL_ERROR


class PacketTooLargeError(EncodeError):
    """The encoded envelope is larger than one reliable LiveKit data packet."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"encoded envelope is {size} bytes, over the {limit}-byte packet limit; "
            "split long text with protocol.split_text()"
        )
        self.size = size
        self.limit = limit


class DecodeError(ProtocolError):
    """The bytes are not a MessagePack envelope of the expected shape."""

    code = ErrorCode.MALFORMED_DATA
    severity = Severity.WARNING


class ValidationError(DecodeError):
    """A field is missing, has the wrong type, or is out of range; the message names it."""


class OrderingError(ProtocolError):
    """A received stanzaId does not rise above every earlier one from the same sender."""

    code = ErrorCode.INVALID_STATE
    severity = Severity.WARNING

    def __init__(self, stanza_id: int, last: int) -> None:
        super().__init__(f"stanzaId {stanza_id} is not after the last one seen ({last})")
        self.stanza_id = stanza_id
        self.last = last
