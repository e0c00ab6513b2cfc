"""A TCP proxy on 127.0.0.1 that a test can cut, as a network partition does.

:class:`TcpProxy` forwards every connection to a target. :meth:`TcpProxy.cut` makes it a
black hole: bytes in either direction are dropped and new connections are accepted and
never answered (the peer sees no reset, only silence, as when a link between two hosts
goes down). :meth:`TcpProxy.heal` closes the dead connections and forwards again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from alicia.harness.ports import free_port

__all__ = ["TcpProxy", "tcp_proxy"]


class TcpProxy:
    """See the module docstring."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.cut_off = False
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        """Listen."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    def cut(self) -> None:
        """Drop everything from now on, silently."""
        self.cut_off = True

    def heal(self) -> None:
        """Close the connections that went dead, and forward new ones again."""
        self.cut_off = False
        for writer in list(self._writers):
            writer.close()

    async def aclose(self) -> None:
        """Stop listening and close every connection."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        upstream: asyncio.StreamWriter | None = None
        try:
            if self.cut_off:
                await reader.read()  # a black hole: never answered
                return
            up_reader, upstream = await asyncio.open_connection("127.0.0.1", self.target_port)
            self._writers.add(upstream)
            await asyncio.gather(self._pipe(reader, upstream), self._pipe(up_reader, writer))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for w in (writer, upstream):
                if w is not None:
                    self._writers.discard(w)
                    w.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            if self.cut_off:
                continue  # dropped on the floor
            writer.write(data)
            await writer.drain()
        while self.cut_off:  # a close does not cross a partition either
            await asyncio.sleep(0.1)
        writer.close()


@contextlib.asynccontextmanager
async def tcp_proxy(target_port: int) -> AsyncIterator[TcpProxy]:
    """A started :class:`TcpProxy` to ``target_port``, closed on the way out."""
    proxy = TcpProxy(target_port)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.aclose()
