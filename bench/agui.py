"""Reasoning token latency through the AG-UI endpoint vs a bare SSE pass-through, same run.

Run: ``.venv/bin/python bench/agui.py`` (about a minute). Everything is real and on
127.0.0.1:

* an OpenAI-compatible streaming server in this process sends vLLM-shaped chunks, one per
  token (``delta.reasoning``) at ``--rate`` tokens/s; each token's text is the
  ``time.monotonic_ns()`` at which it was written to the socket;
* **agui**: the endpoint as its own process (``python -m alicia.agent.agui``, the real
  ``openai`` client, extractor, segmenter, turn engine, ``ag_ui`` encoder) serves a run;
  an HTTP client in this process reads its SSE stream and, for each
  ``REASONING_MESSAGE_CONTENT``, takes ``time.monotonic_ns()`` minus the stamp in the
  delta;
* **bare**: the same script as its own process (``--passthrough``) requests the same
  stream with aiohttp and forwards each SSE event to the client untouched; the client
  stamps the same way.

CLOCK_MONOTONIC is one clock for every process on a Linux host. Runs alternate between
the two paths; the first ``--warmup`` tokens of each run are dropped. ``added`` = agui
percentile minus bare percentile (p50 and p99 separately). Caveats: a shared 2-core
machine, where the streaming server, both processes and the client compete for CPU.

Last line: ``RESULT added_p50_ms=<x> added_p99_ms=<x>`` (target p50 <= 2, p99 <= 10).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import platform
import re
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from aiohttp import web
from livekit import api

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from alicia.harness.ports import free_port, port_open  # noqa: E402
from bench._exit import run_and_exit  # noqa: E402
from bench._stats import percentile  # noqa: E402

KEY, SECRET = "benchkey", "benchsecret-benchsecret-benchsecret"
_STAMP = re.compile(r"\d{6,}")


def chunk(delta: dict[str, str]) -> bytes:
    """One chat-completion chunk as an SSE event."""
    body = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "bench",
        "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def llm_app(tokens: int, rate: float) -> web.Application:
    """The stamped streaming server: ``tokens`` reasoning tokens, then a short answer."""

    async def completions(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(chunk({"role": "assistant", "content": ""}))
        start = time.monotonic()
        for i in range(tokens):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await response.write(chunk({"reasoning": f" {time.monotonic_ns()}"}))
        await response.write(chunk({"content": "Done."}))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    return app


async def passthrough(port: int, llm: str) -> None:
    """``--passthrough``: POST /agui forwards the LLM's SSE events untouched."""
    session = aiohttp.ClientSession()

    async def forward(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        body = {"model": "bench", "stream": True, "messages": [{"role": "user", "content": "go"}]}
        async with session.post(llm + "/chat/completions", json=body) as upstream:
            buffer = b""
            async for data in upstream.content.iter_any():
                buffer += data
                *events, buffer = buffer.split(b"\n\n")
                for event in events:
                    await response.write(event + b"\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/agui", forward)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print(f"pass-through on http://127.0.0.1:{port}/agui", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await session.close()
        await runner.cleanup()


@contextlib.asynccontextmanager
async def process(args: list[str], env: dict[str, str], ready: str) -> AsyncIterator[str]:
    """A subprocess; yields the URL it printed after ``ready``."""
    with tempfile.NamedTemporaryFile(prefix="alicia-bench-agui-", suffix=".log") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *args, env={**os.environ, **env}, cwd=str(ROOT),
            stdout=log, stderr=asyncio.subprocess.STDOUT, process_group=0,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while True:
                text = await asyncio.to_thread(Path(log.name).read_text, errors="replace")
                if ready in text:
                    url = text.split(ready, 1)[1].split()[0]
                    break
                if proc.returncode is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{args} did not start:\n{text}")
                await asyncio.sleep(0.05)
            await port_open(int(url.rsplit(":", 1)[1].split("/")[0]))
            yield url
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            await proc.wait()


async def one_run(http: aiohttp.ClientSession, url: str, token: str, n: int) -> list[float]:
    """One run's reasoning token latencies (ms), read as an SSE client reads them."""
    body = {
        "threadId": "bench",
        "runId": f"run-{n}",
        "messages": [{"id": f"u-{n}-{time.monotonic_ns()}", "role": "user", "content": "go"}],
    }
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    out: list[float] = []
    async with http.post(url, json=body, headers=headers) as response:
        response.raise_for_status()
        buffer = b""
        async for data in response.content.iter_any():
            now = time.monotonic_ns()
            buffer += data
            *events, buffer = buffer.split(b"\n\n")
            for event in events:
                if not event.startswith(b"data: {"):
                    continue  # comments, [DONE]
                payload = json.loads(event[6:])
                if "choices" in payload:  # bare: the LLM's own chunk
                    text = payload["choices"][0]["delta"].get("reasoning", "")
                elif payload.get("type") == "REASONING_MESSAGE_CONTENT":
                    text = payload["delta"]
                else:
                    continue
                out.extend((now - int(stamp)) / 1e6 for stamp in _STAMP.findall(text))
    return out


async def bench(args: argparse.Namespace) -> None:
    """Both paths, alternating runs; print the figures and the RESULT line."""
    app = web.AppRunner(llm_app(args.tokens, args.rate))
    await app.setup()
    llm_port = free_port()
    await web.TCPSite(app, "127.0.0.1", llm_port).start()
    llm = f"http://127.0.0.1:{llm_port}/v1"
    env = {
        "LIVEKIT_URL": "ws://127.0.0.1:1",
        "LIVEKIT_API_KEY": KEY,
        "LIVEKIT_API_SECRET": SECRET,
        "LLM_BASE_URL": llm,
        "LLM_MODEL": "bench",
        "ALICIA_TOOLS": "false",
        "ALICIA_REASONING_KEYS": f"k1={base64.b64encode(bytes(range(32))).decode()}",
        "ALICIA_AGUI_PORT": str(free_port()),
        "PYTHONPATH": str(ROOT),
    }
    env.pop("DATABASE_URL", None)
    grants = api.VideoGrants(room_join=True, room="bench")
    token = (
        api.AccessToken(KEY, SECRET)
        .with_identity("bench")
        .with_attributes({"alicia.reasoning": "full"})
        .with_grants(grants)
        .to_jwt()
    )
    samples: dict[str, list[float]] = {"agui": [], "bare": []}
    bare_args = [str(Path(__file__)), "--passthrough", "--port", str(free_port()), "--llm", llm]
    try:
        async with (
            process(["-m", "alicia.agent.agui"], env, "AG-UI endpoint on ") as agui_url,
            process(bare_args, env, "pass-through on ") as bare_url,
            aiohttp.ClientSession() as http,
        ):
            urls = {"agui": agui_url, "bare": bare_url}
            for n in range(args.runs):
                for path in ("agui", "bare") if n % 2 == 0 else ("bare", "agui"):
                    latencies = await one_run(http, urls[path], token, n)
                    if len(latencies) < args.tokens:
                        raise RuntimeError(f"{path}: {len(latencies)} of {args.tokens} tokens")
                    samples[path].extend(latencies[args.warmup :])
    finally:
        await app.cleanup()
    agui, bare = samples["agui"], samples["bare"]
    rows = []
    for name, values in (("agui", agui), ("bare", bare)):
        p50, p99 = percentile(values, 50), percentile(values, 99)
        rows.append((p50, p99))
        print(f"{name:5} tokens={len(values):5d} p50={p50:7.3f} ms p99={p99:7.3f} ms")
    added50, added99 = rows[0][0] - rows[1][0], rows[0][1] - rows[1][1]
    print(f"RESULT added_p50_ms={added50:.3f} added_p99_ms={added99:.3f}")


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark (or, with ``--passthrough``, the bare pass-through server)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per path (alternating)")
    parser.add_argument("--tokens", type=int, default=150, help="reasoning tokens per run")
    parser.add_argument("--rate", type=float, default=50.0, help="tokens per second")
    parser.add_argument("--warmup", type=int, default=5, help="tokens dropped per run")
    parser.add_argument("--passthrough", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--llm", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.passthrough:
        asyncio.run(passthrough(args.port, args.llm))
        return
    print(
        f"Python {sys.version.split()[0]} on {platform.machine()}, {os.cpu_count()} CPUs; "
        f"{args.runs} runs per path, {args.tokens} tokens at {args.rate:g}/s"
    )
    asyncio.run(bench(args))


if __name__ == "__main__":
    run_and_exit(main)
