"""alicia.harness.ports: loopback ports that outgoing connections cannot take first."""

from __future__ import annotations

import random
import socket

import pytest

from alicia.harness.ports import _ephemeral_low, _given, free_port


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
        [other] = _unpicked_ports(1)
        draws = iter([taken, taken, other])
        monkeypatch.setattr(random, "randrange", lambda *_: next(draws))
        assert free_port() == other


def test_free_port_never_hands_out_a_port_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module's livekit-server and its watcher were given one port (neither bound yet):
    the watcher could not bind, and the webhooks went to livekit-server."""
    first, second = _unpicked_ports(2)
    draws = iter([first, first, second])
    monkeypatch.setattr(random, "randrange", lambda *_: next(draws))
    assert free_port() == first
    assert free_port() == second  # not ``first`` again, though nothing listens there


def _unpicked_ports(count: int) -> list[int]:
    """``count`` ports that free_port has not handed out and nothing holds now."""
    found: list[int] = []
    for port in range(20000, 30000):
        if port in _given:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        found.append(port)
        if len(found) == count:
            return found
    raise AssertionError("no free ports")
