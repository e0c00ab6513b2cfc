"""alicia.harness.ports: loopback ports that outgoing connections cannot take first."""

from __future__ import annotations

import random
import socket

import pytest

from alicia.harness.ports import _ephemeral_low, free_port


def test_free_port_is_bindable_and_outside_the_ephemeral_range() -> None:
    low = _ephemeral_low()
    assert low > 11000  # Linux: 32768 by default
    ports = {free_port() for _ in range(20)}
    assert len(ports) > 1  # picked, not a constant
    for port in ports:
        assert 1024 < port < 65536
        assert port < low
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", port))


def test_free_port_skips_a_port_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _ephemeral_low() > 11000  # Linux: 32768 by default
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", free_port()))
        held.listen()
        taken = held.getsockname()[1]
        other = free_port()
        draws = iter([taken, taken, other])
        monkeypatch.setattr(random, "randrange", lambda *_: next(draws))
        assert free_port() == other
