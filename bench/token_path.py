"""A text room's cost per streamed token, from the socket to the steps, against a bare reader.

Run: ``.venv/bin/python bench/token_path.py`` (about a minute). The recorded LLM runs in
a process of its own (``--serve``) and streams its ``token_turn`` (one SSE chunk per
token, vLLM-shaped, four reasoning paragraphs and a three-sentence answer, 288 chunks) at
``--rate`` tokens/s to each of ``--rooms`` rooms at once, over real HTTP on 127.0.0.1.
This process measures, in alternating trials:

* ``engine``: each room a :class:`~alicia.agent.engine.conversation.Conversation` on the
  worker's model client (``agent.wiring.open_llm``: the ``openai`` client on its aiohttp
  transport) and an in-memory transport; a client asks, waits for the final
  AssistantSentence, asks again. Everything a text room does per token (the read, the
  SSE and JSON decode, the extractor, the segmenter, the sentence splitter, the read
  timeout) and per turn (the request through the SDK, the steps and sentences encoded);
  not the room's FFI publishes (``bench/rooms.py`` has those, with their noise);
* ``floor``: per room, the same requests with a bare aiohttp session, each event's JSON
  decoded with msgspec: the least any reader of the same stream does.

Rooms start spread over one turn, so reads do not come in step. A trial waits
``--warmup`` seconds, then takes this process's CPU time (every thread) over ``--seconds``
and divides by the tokens the rooms' finished turns streamed in that window's turns
(a count per turn, 288). The best trial of each kind is kept (the least disturbed by the
rest of the machine). ``bench/rooms.py`` measured this path as where its worker spent most
of its Python time.

Last line: ``RESULT us_per_token=<x> floor_us_per_token=<x> ratio=<x>``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from alicia.agent.engine.conversation import Conversation
from alicia.agent.engine.tools import default_tools
from alicia.agent.wiring import open_llm
from alicia.harness.recorded_llm import TOKEN_TURN, Play, RecordedLLM
from alicia.protocol import AssistantSentence, Configuration, decode, new_id
from tests.engine.room import CONV, MODEL, SHOW, settings_for, user_message
from tests.support.fakes import FakeClient, MemoryTransport, RecordingSink, Sent

TOKENS_PER_TURN = 288
"""Chunks with a token in one ``token_turn`` of four paragraphs."""


async def serve(rate: float) -> None:
    """``--serve``: the recorded LLM answering :data:`MODEL` with ``token_turn`` at
    ``rate`` tokens/s; prints its base URL, serves until killed."""
    async with RecordedLLM() as llm:
        llm.route_model(MODEL, Play(TOKEN_TURN, chunk_delay=1.0 / rate, paragraphs=4))
        print(json.dumps({"url": llm.base_url}), flush=True)
        await asyncio.Event().wait()


class Trial:
    """Rooms streaming turns until :attr:`stop`; :attr:`tokens` counts finished turns'."""

    def __init__(self, url: str) -> None:
        """Rooms on the LLM at ``url``."""
        self.url = url
        self.tokens = 0
        self.stop = False

    async def engine_room(self, index: int, spread: float) -> None:
        """One Conversation whose client asks again as each answer ends."""
        answered = asyncio.Event()

        def on_sent(item: Sent) -> None:
            body = decode(item.data).body
            if isinstance(body, AssistantSentence) and body.is_final:
                answered.set()

        settings = settings_for(_Url(self.url), step_max_delay_s=5.0)
        transport = MemoryTransport(on_sent)
        llm = open_llm(settings)
        conversation = Conversation(
            conversation_id=CONV,
            options=settings.engine_options(),
            transport=transport,
            sink=RecordingSink(),
            llm=llm,
            tools=default_tools(),
        )
        task = asyncio.create_task(conversation.run())
        client = FakeClient(transport, f"user{index}", CONV)
        try:
            client.send(Configuration(features=SHOW))
            await asyncio.sleep(spread)
            while not self.stop:
                answered.clear()
                client.send(user_message(f"room{index} {new_id('t')}"))
                await asyncio.wait_for(answered.wait(), 60)
                transport.sent.clear()
                self.tokens += TOKENS_PER_TURN
        finally:
            await transport.aclose()
            await asyncio.wait_for(task, 10)
            await llm.close()

    async def floor_room(self, index: int, spread: float) -> None:
        """The same turns read by a bare aiohttp session and msgspec."""
        decoder = msgspec.json.Decoder()
        body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "x"}]}
        await asyncio.sleep(spread)
        async with aiohttp.ClientSession() as session:
            while not self.stop:
                url = f"{self.url}/chat/completions"
                async with session.post(url, json=body) as response:
                    rest = b""
                    async for chunk in response.content.iter_any():
                        *events, rest = (rest + chunk).split(b"\n\n")
                        for event in events:
                            if event.startswith(b"data: {"):
                                decoder.decode(event[6:])
                self.tokens += TOKENS_PER_TURN


class _Url:
    """What :func:`settings_for` reads of a recorded LLM: its base URL."""

    def __init__(self, url: str) -> None:
        self.base_url = url


async def trial(url: str, kind: str, args: argparse.Namespace) -> float:
    """CPU microseconds per token of one ``kind`` trial."""
    run = Trial(url)
    room = run.engine_room if kind == "engine" else run.floor_room
    turn_s = TOKENS_PER_TURN / args.rate
    tasks = [asyncio.create_task(room(i, i * turn_s / args.rooms)) for i in range(args.rooms)]
    try:
        await asyncio.sleep(args.warmup)
        tokens, cpu = run.tokens, time.process_time()
        await asyncio.sleep(args.seconds)
        used, counted = time.process_time() - cpu, run.tokens - tokens
    finally:
        run.stop = True
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    if counted == 0:
        raise SystemExit(f"{kind}: no turn finished in the window (--seconds too short?)")
    return used / counted * 1e6


async def amain(args: argparse.Namespace) -> None:
    """Alternate engine and floor trials; print the RESULT line."""
    print(
        f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; "
        f"{args.rooms} rooms at {args.rate:g} tokens/s, {args.trials} trials each way",
        file=sys.stderr,
    )
    server = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--serve", "--rate", str(args.rate), stdout=subprocess.PIPE
    )
    try:
        assert server.stdout is not None
        url = json.loads(await server.stdout.readline())["url"]
        best: dict[str, float] = {}
        for n in range(args.trials):
            for kind in ("engine", "floor"):
                us = await trial(url, kind, args)
                best[kind] = min(us, best.get(kind, us))
                print(f"trial {n + 1} {kind:6s} {us:6.2f} us/token", file=sys.stderr)
    finally:
        server.kill()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.wait(), 5)
    engine, floor = best["engine"], best["floor"]
    print(
        f"RESULT us_per_token={engine:.2f} floor_us_per_token={floor:.2f} "
        f"ratio={engine / floor:.2f}"
    )


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments and run (or serve, with ``--serve``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rooms", type=int, default=60, help="rooms streaming at once")
    parser.add_argument("--rate", type=float, default=50.0, help="tokens/s per room")
    parser.add_argument("--trials", type=int, default=3, help="trials of each kind")
    parser.add_argument("--warmup", type=float, default=7.0, help="seconds before the window")
    parser.add_argument("--seconds", type=float, default=10.0, help="measurement window")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.rate) if args.serve else amain(args))


if __name__ == "__main__":
    main()
