"""The public surface of ``protocol``: sorted, complete, and free of LiveKit/SQLAlchemy."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import types

import pytest

from alicia import protocol

pytestmark = pytest.mark.filterwarnings("error")

SUBMODULES = ("codec", "envelope", "errors", "ids", "messages", "stanza", "steps")

# Public names of submodules deliberately not re-exported at the top level.
SUBMODULE_ONLY = {
    "ids": {
        "COMMENTARY",
        "CONVERSATION",
        "ERROR",
        "MEMORY",
        "MEMORY_TRACE",
        "MESSAGE",
        "REASONING_STEP",
        "SENTENCE",
        "TOOL_USE",
        "TOOL_USE_RESULT",
    },
    "messages": {"Int32", "UInt16", "UInt32", "UInt64"},
}


def test_all_is_sorted_and_unique() -> None:
    assert protocol.__all__ == sorted(protocol.__all__, key=lambda n: (not n.isupper(), n))
    assert len(set(protocol.__all__)) == len(protocol.__all__)


def test_all_is_complete() -> None:
    public = {
        name
        for name, value in vars(protocol).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert set(protocol.__all__) == public
    for name in protocol.__all__:
        assert getattr(protocol, name) is not None


@pytest.mark.parametrize("name", SUBMODULES)
def test_submodule_all_is_re_exported(name: str) -> None:
    module = importlib.import_module(f"protocol.{name}")  # protocol.envelope is the function
    names = set(module.__all__)
    for n in names:
        assert hasattr(module, n), f"{name}.__all__ names missing {n}"
    assert names - set(protocol.__all__) == SUBMODULE_ONLY.get(name, set())


def test_public_api_names_are_stable() -> None:
    # Other parts of the project code against these; removing one is a breaking change.
    for name in [
        "DATA_TOPIC",
        "MAX_PACKET_BYTES",
        "TEXT_BUDGET_BYTES",
        "Envelope",
        "envelope",
        "encode",
        "decode",
        "error_body",
        "split_text",
        "new_id",
        "StanzaCounter",
        "StanzaOrder",
        "StepTracker",
        "StepLimitError",
        "ProtocolError",
        "DecodeError",
        "ValidationError",
        "EncodeError",
        "PacketTooLargeError",
        "OrderingError",
        "UnknownBody",
        "BODY_TYPES",
        "MessageType",
    ]:
        assert name in protocol.__all__
    assert protocol.DATA_TOPIC == "alicia"
    assert protocol.MAX_PACKET_BYTES == 15 * 1024


def test_public_functions_have_docstrings() -> None:
    for name in protocol.__all__:
        value = getattr(protocol, name)
        if callable(value) and not isinstance(value, type | types.GenericAlias):
            assert value.__doc__, name


def test_import_in_a_fresh_process_loads_no_livekit_or_sqlalchemy() -> None:
    code = (
        "import json, sys; import protocol; "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(json.loads(out.stdout))
    assert "protocol" in loaded and "msgspec" in loaded
    assert not loaded & {"livekit", "sqlalchemy", "asyncpg", "aiosqlite", "openai", "agent"}
