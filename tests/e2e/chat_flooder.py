"""A participant, in a process of its own, that opens ``lk.chat`` streams and never ends them.

``python -m tests.e2e.chat_flooder URL TOKEN COUNT``: joins (and sends a Configuration
until answered: a protocol client gets ErrorMessages), opens COUNT text streams on
``lk.chat`` (a piece written to each, none closed), prints ``{"opened": COUNT}``, then
obeys stdin lines: ``report`` prints ``{"errors": [[code, message, at], ...]}`` (the
ErrorMessages the agent sent it so far, each with its ``time.monotonic()`` on arrival),
``say TEXT`` sends TEXT as one whole chat message; end of input leaves. Its own process,
so that its work (a thousand streams) does not slow the test's other clients.
:func:`mallory` starts it from a test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from livekit import rtc
from livekit.agents.types import TOPIC_CHAT

from alicia.agent.engine.participants import ParticipantLimits
from alicia.protocol import DATA_TOPIC, Configuration, ErrorMessage, decode, encode, envelope


async def main(url: str, token: str, count: int) -> None:
    room = rtc.Room()
    errors: list[list[Any]] = []
    configured = asyncio.Event()

    def on_data(packet: rtc.DataPacket) -> None:
        if packet.topic != DATA_TOPIC:
            return
        env = decode(packet.data)
        if isinstance(env.body, ErrorMessage):
            errors.append([env.body.code, env.body.message, time.monotonic()])
        elif isinstance(env.body, Configuration):
            configured.set()

    room.on("data_received", on_data)
    await room.connect(url, token)
    # A protocol client too (the agent answers errors to those), once the agent knows it.
    for stanza in range(1, 31):
        data = encode(envelope(Configuration(), stanza_id=stanza, conversation_id=room.name))
        await room.local_participant.publish_data(data, topic=DATA_TOPIC)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(configured.wait(), 1.0)
            break
    writers = []
    for _ in range(count):
        writer = await room.local_participant.stream_text(topic=TOPIC_CHAT)
        await writer.write("never finished ")
        writers.append(writer)
    print(json.dumps({"opened": len(writers)}), flush=True)
    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        command, _, rest = line.strip().partition(" ")
        if command == "report":
            print(json.dumps({"errors": errors}), flush=True)
        elif command == "say":
            await room.local_participant.send_text(rest, topic=TOPIC_CHAT)
            print(json.dumps({"said": rest}), flush=True)
    await room.disconnect()


@contextlib.asynccontextmanager
async def mallory(
    url: str, token: str, count: int
) -> AsyncIterator[Callable[[str], Awaitable[dict[str, Any]]]]:
    """This flooder in a process of its own; yields ``ask(command)``: the command's JSON
    answer (``""``: the next line it prints, ``{"opened": count}`` first)."""
    from tests.paths import ROOT

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.e2e.chat_flooder",
        url,
        token,
        str(count),
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    async def ask(command: str) -> dict[str, Any]:
        if command:
            stdin.write(command.encode() + b"\n")
            await stdin.drain()
        answer: dict[str, Any] = json.loads(await asyncio.wait_for(stdout.readline(), 120))
        return answer

    try:
        yield ask
    finally:
        stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def refusals_then_a_turn(
    ask: Callable[[str], Awaitable[dict[str, Any]]], opened_at: float, other: Any, llm: Any
) -> tuple[list[list[Any]], list[Any]]:
    """Once the flood is open (at ``opened_at``): the flooder's ErrorMessages so far, then,
    past the deadline (her streams dropped), a whole message of hers as a turn: ``other``
    (a protocol client in her room) sees its Transcription, then the answer's final
    sentence; its box then."""
    from alicia.agent.gate.doors import door
    from alicia.protocol import Transcription
    from tests.e2e.worker_client import final, of

    deadline_s = door("chat").bounds.deadline_s or 0.0

    await asyncio.sleep(1.0)  # the last refusals on their way
    errors: list[list[Any]] = (await ask("report"))["errors"]
    await asyncio.sleep(max(0.0, opened_at + deadline_s + 1.0 - time.monotonic()))
    llm.script("plain_no_reasoning")
    await ask("say a real question")
    await other.wait_until(
        lambda b: any(t.text == "a real question" for t in of(b, Transcription)), within=30.0
    )
    return errors, await other.wait_until(final, within=60.0)


def assert_refused_as_they_open(errors: list[list[Any]]) -> None:
    """The flooder's ErrorMessages (``[code, message, received at]``): Overloaded (504) as
    her streams opened, rate-limited: no more than the worker's error burst and rate allow
    over the time they came in (the flood lasts longer on a loaded machine, so the count
    alone is no promise)."""
    assert errors and all(code == 504 for code, _, _ in errors), errors
    assert any("open at once" in m or "slow down" in m for _, m, _ in errors), errors
    limits = ParticipantLimits()
    span = errors[-1][2] - errors[0][2]
    # sent paced, they may arrive bunched: 2 s of the rate more (without the limit, one
    # ErrorMessage per refused stream: hundreds)
    allowed = limits.error_burst + limits.error_rate_per_s * (span + 2.0)
    assert len(errors) <= allowed, (len(errors), span, allowed)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
