"""The LiveKit agent worker: wiring only (settings -> storage -> transport -> turns).

:func:`build_server` makes a ``livekit.agents.AgentServer`` from :class:`Settings`;
automatic dispatch sends it to every new room (unless ``ALICIA_AGENT_NAME`` is set).
For each room, :func:`entrypoint` connects, opens the storage sink, and serves the room's
conversation (conversation id = room name) until the room closes; text rooms also speak
LiveKit's agent conventions (:mod:`.conventions`, ``ALICIA_LK_CONVENTIONS``). Run it with
``python -m alicia.agent start`` (production) or ``python -m alicia.agent dev``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import threading
from collections.abc import AsyncIterator
from typing import Any, Final

from livekit import api, rtc
from livekit.agents import (
    AgentServer,
    AutoSubscribe,
    JobContext,
    JobExecutorType,
    JobProcess,
    JobRequest,
)

from alicia.agent.engine.conversation import Conversation
from alicia.agent.engine.tools import default_tools
from alicia.agent.env import EnvReader
from alicia.agent.gate.ffi_routing import stop_capturing_native_logs
from alicia.agent.gate.grants import grants_of
from alicia.agent.gate.room import bound_streams, with_stream_bound
from alicia.agent.gate.transport import RoomTransport, announce
from alicia.agent.llm.providers import resolve
from alicia.agent.settings import Settings, load
from alicia.agent.storage.leases import lease_required
from alicia.agent.telemetry.instruments import ROOMS, lease_span
from alicia.agent.wiring import flush_metrics, open_keys, open_llm, open_sink, open_telemetry

from .conventions import CHAT_TOPIC, RoomConventions
from .failover import (
    DrainingServer,
    keep_out,
    leave,
    wait_draining,
    warm_storage,
    watch_drain,
)
from .forkserver import MODULE as FORKSERVER_PRELOAD
from .lease_keeper import Hold, keeper_for
from .room_loop import shared_room_loop

__all__ = ["build_server", "entrypoint", "forkserver_preloads"]

logger = logging.getLogger("alicia.worker")

_CONNECT_LOCK = threading.Lock()
"""One room connect at a time per process. With the thread job executor every room of the
worker lives in this process, and livekit (rtc 1.1.21) FFI connects started at the same
time from several threads can stall until the FFI gives up ("timed out waiting for
ReadyForRoomEventRequest after ConnectCallback"). Serialised, each takes ~0.1 s."""


@contextlib.asynccontextmanager
async def _connect_slot() -> AsyncIterator[None]:
    """Hold :data:`_CONNECT_LOCK` without blocking the loop; cancel-safe while waiting."""
    # A threading lock shared by the loops of all job threads: no asyncio.Event can serve.
    while not _CONNECT_LOCK.acquire(blocking=False):  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    try:
        yield
    finally:
        _CONNECT_LOCK.release()


def _not_connected_notice(record: logging.LogRecord) -> bool:
    """Drop livekit-agents' "room connection was not established" warning.

    On the shared room loop the job's room is joined by the worker's own ``rtc.Room``
    (see :func:`_serve_own_room`), not by ``ctx.connect()``, which that warning watches.
    """
    return not record.getMessage().startswith("The room connection was not established")


def _serve_metrics(port: int, host: str) -> None:
    from alicia.agent.telemetry import serve_metrics

    serve_metrics(port, host)


TARGET_LOAD: Final = 0.7
"""livekit-server's default ``agents.target_load``: it sends a room's job only while some
worker's load is below it (a node claims a job with the sum of ``target_load - load`` over
its available workers, and a claim of 0 is never taken), so a worker reporting rooms /
``ALICIA_MAX_ROOMS`` got no room once every worker was past 70 % of its rooms (``bench/
overload.py``: a room below the limit left without an agent). Also livekit-agents'
default ``load_threshold`` and LiveKit Cloud's."""


def _room_load(server: AgentServer, *, max_rooms: int) -> float:
    """The worker's load: :data:`TARGET_LOAD` x rooms served / ``max_rooms``
    (``ALICIA_MAX_ROOMS``), so it reaches the server's target load at ``max_rooms``."""
    return TARGET_LOAD * len(server.active_jobs) / max_rooms


def _prewarm_offline_speech(proc: JobProcess) -> None:
    """A job process's prewarm, before a room is assigned: the VAD and the recognizer, and
    the modules its first voice turn would import on the room's loop (the voice room, the
    ``openai`` SDK's stream types: 0.2 s and more on a loaded machine, late enough there
    for a progress remark to start before an answer that was ready in time)."""
    import importlib

    from alicia.agent.speech import prewarm

    prewarm()
    for module in (f"{__package__}.voice_agent", "openai.lib.streaming.chat"):
        importlib.import_module(module)


def forkserver_preloads(settings: Settings) -> list[str]:
    """What the job processes' forkserver imports once for all the job processes it forks:
    :mod:`.forkserver`, this module (each room's entrypoint) and, for voice rooms, what
    :func:`_prewarm_offline_speech` would import in each (about 1 CPU-s per job process)."""
    modules = [FORKSERVER_PRELOAD, __name__]
    if settings.voice:
        modules += [f"{__package__}.voice_agent", "openai.lib.streaming.chat"]
    if settings.voice_mode == "offline":
        modules.append("alicia.agent.speech.offline")
    return modules


@functools.cache
def share_tracer_provider() -> None:
    """With traces on, livekit-agents' spans go to this process's tracer provider too, so
    a voice turn's spans and ours are one trace. Their conversational content (the
    ``lk.pii.*`` attributes: user and assistant text, tool arguments) is stripped
    (``alicia.agent.telemetry.content``) unless ``LIVEKIT_TELEMETRY_ALLOW_PII`` (its own
    switch) asks for it; livekit-agents' own stripping would also take our reasoning part
    (``ALICIA_TRACE_CONTENT``), so it is left to ours."""
    from alicia.agent.telemetry import tracer_provider, tracing_enabled

    if not tracing_enabled():
        return
    from livekit.agents import telemetry

    allow = EnvReader(os.environ).flag("LIVEKIT_TELEMETRY_ALLOW_PII", False)
    telemetry.set_tracer_provider(tracer_provider(foreign_content=allow), allow_pii=True)


def build_server(settings: Settings) -> AgentServer:
    """The AgentServer for ``settings``, with :func:`entrypoint` as its rtc session."""
    if settings.native_logs == "stderr":
        # Read by the native library when it starts (in this process or a job's).
        os.environ.setdefault("RUST_LOG", "warn")
    if _on_shared_loop(settings):
        logging.getLogger("livekit.agents").addFilter(_not_connected_notice)
    if not settings.voice:
        # livekit-agents' forkserver loads the end-of-turn model (244 MB resident) for every
        # job process unless told not to; a worker without voice rooms never uses it.
        os.environ.setdefault("LIVEKIT_AGENTS_PRELOAD_LOCAL_INFERENCE", "0")
    if settings.voice_mode == "offline":
        from alicia.agent.speech import register_plugins

        register_plugins()  # on this (main) thread, before any job thread starts
    options: dict[str, Any] = {}
    if settings.failover:
        options["turn_timeout_s"] = settings.drain_turn_timeout_s
    if settings.idle_processes is not None:
        options["num_idle_processes"] = settings.idle_processes
    server = (DrainingServer if settings.failover else AgentServer)(
        ws_url=settings.livekit_url,
        api_key=settings.livekit_api_key,
        api_secret=settings.livekit_api_secret,
        job_executor_type=JobExecutorType(settings.job_executor),
        initialize_process_timeout=settings.job_start_timeout_s,
        host=settings.http_host,
        port=settings.http_port,
        preload_modules=forkserver_preloads(settings),
        # /metrics is ours (serve_metrics below): it retires ended job processes' files.
        prometheus_multiproc_dir=(
            os.environ.get("PROMETHEUS_MULTIPROC_DIR") if settings.metrics_port else None
        ),
        **options,
    )
    if settings.voice_mode == "offline":
        server.setup_fnc = _prewarm_offline_speech
    if settings.max_rooms is not None:
        server.load_fnc = functools.partial(_room_load, max_rooms=settings.max_rooms)
    threshold = settings.load_threshold
    if threshold is None and settings.max_rooms is not None:
        # full at max_rooms: half a room below its load, not a float's rounding below
        threshold = TARGET_LOAD * (settings.max_rooms - 0.5) / settings.max_rooms
    if threshold is not None:
        server.update_options(load_threshold=threshold)
    if settings.failover:
        on_request = functools.partial(_on_request, settings=settings)
        server.rtc_session(entrypoint, agent_name=settings.agent_name, on_request=on_request)
    else:
        server.rtc_session(entrypoint, agent_name=settings.agent_name)
    profile, how = resolve(settings.llm_provider, settings.llm_base_url, settings.llm_model)
    chosen = {
        "provider": profile.name,
        "chosen_by": how,
        "api": settings.llm_api,
        "passback": settings.turn_options().passback[0],
        "effort": settings.reasoning_effort or "provider default",
    }
    # Logged once the command line has set logging up.
    server.on("worker_started", lambda: logger.info("llm provider profile", extra=chosen))
    if settings.metrics_port is not None:  # after livekit-agents has emptied the folder
        port, host = settings.metrics_port, settings.http_host
        server.on("worker_started", lambda: _serve_metrics(port, host))
    if settings.failover:
        server.on("worker_started", lambda: watch_drain(server))
        url = settings.database_url
        assert url is not None  # checked by the settings
        server.on("worker_started", lambda: warm_storage(url))
    return server


async def entrypoint(ctx: JobContext) -> None:
    """Serve one room: its conversation with every protocol client in it."""
    settings = load()
    if settings.native_logs == "stderr":  # before the room's join: about 2,000 records
        stop_capturing_native_logs()
    share_tracer_provider()
    ROOMS.add(1)
    try:
        await _entry(ctx, settings)
    finally:
        ROOMS.add(-1)
        if settings.job_executor == "process":  # the job's process ends with its room
            await asyncio.to_thread(flush_metrics)


async def _entry(ctx: JobContext, settings: Settings) -> None:
    if _on_shared_loop(settings):
        try:
            await shared_room_loop().run(_serve_own_room(ctx, settings))
        finally:
            ctx.shutdown("room closed")  # ends the job: ctx.room itself was never connected
        return
    subscribe = AutoSubscribe.AUDIO_ONLY if settings.voice else AutoSubscribe.SUBSCRIBE_NONE
    grants = grants_of(ctx.room)  # from the first moment: who could set its own attributes
    bound_streams(ctx.room)  # no incoming stream inflates past the table's largest
    async with _connect_slot():
        await ctx.connect(auto_subscribe=subscribe)
    grants.look_all()
    if settings.voice:
        from .voice_agent import serve_voice_room  # livekit-agents' voice stack

        await serve_voice_room(ctx, settings)
        return
    await _serve(ctx.room, settings, lease_required=lease_required(ctx.job.metadata))
    ctx.shutdown("room left")  # a room left early (lease lost, drained) is left for good


def _on_shared_loop(settings: Settings) -> bool:
    """Whether rooms run on the process's shared room loop (agent/rooms/room_loop.py).

    With the thread executor every room of the worker is in this process; text rooms then
    share one event loop. Voice rooms stay on their job's loop: livekit-agents' audio I/O
    is bound to the job context's own room.
    """
    return settings.job_executor == "thread" and not settings.voice


async def _serve_own_room(ctx: JobContext, settings: Settings) -> None:
    """On the shared room loop: join the job's room as the job's participant and serve it."""
    room = rtc.Room()
    grants = grants_of(room)  # from the first moment: who could set its own attributes
    async with _connect_slot():
        await room.connect(
            settings.livekit_url,
            _job_token(ctx, settings),
            with_stream_bound(rtc.RoomOptions(auto_subscribe=False)),
        )
    grants.look_all()
    try:
        await _serve(room, settings, lease_required=lease_required(ctx.job.metadata))
    finally:
        await leave(room, within=10.0)  # bounded: a job that cannot end holds its slot


def _job_token(ctx: JobContext, settings: Settings) -> str:
    """A token with the same claims as the job's own (identity, kind, grants, attributes)."""
    claims = ctx.token_claims()
    token = (
        api.AccessToken(settings.livekit_api_key, settings.livekit_api_secret)
        .with_identity(claims.identity)
        .with_name(claims.name or claims.identity)
        .with_kind("agent")
        .with_attributes(claims.attributes or {})
        .with_metadata(claims.metadata or "")
    )
    if claims.video is not None:
        token = token.with_grants(claims.video)
    return token.to_jwt()


async def _serve(room: rtc.Room, settings: Settings, *, lease_required: bool = False) -> None:
    """Serve a connected text ``room`` until it closes (storage, LLM client, transport,
    turns); ``lease_required``: its dispatch asks for the lease (failover)."""
    logger.info("room joined", extra={"room": room.name})
    _log_connection(room)
    identity = room.local_participant.identity
    telemetry = open_telemetry(settings)  # before the claim: its span goes to the provider
    hold: Hold | None = None
    if settings.failover:
        hold = await keeper_for(settings).hold(room.name, identity, required=lease_required)
        if hold is None:
            logger.warning("room not held: leaving", extra={"room": room.name})
            return
    conventions = RoomConventions(room) if settings.lk_conventions else None
    await announce(room, conventions.announced() if conventions is not None else {})
    sink = await open_sink(
        settings.database_url,
        close_timeout_s=settings.storage_close_timeout_s,
        linger_s=0.0 if settings.failover else None,
        fence=None if hold is None else hold.fence,
        pool_size=settings.db_pool_size,
    )
    keys = open_keys(settings)
    llm = open_llm(settings)
    chat = CHAT_TOPIC if conventions is not None else None
    try:
        async with RoomTransport(room, chat_topic=chat) as transport:
            conversation = Conversation(
                conversation_id=room.name,
                options=settings.engine_options(),
                transport=transport,
                sink=sink,
                llm=llm,
                tools=default_tools(),
                keys=keys,
            )
            conversation.session.telemetry = telemetry
            if conventions is not None:
                conversation.session.observers.append(conventions)
                conventions.start()
            if hold is None:
                await conversation.run()
            else:
                conversation.session.outbox.tenure = hold
                if conventions is not None:
                    conventions.tenure = hold
                await _run_until_drained(conversation, transport, settings, hold)
    finally:
        fenced = hold is not None and hold.taken
        kept_out: asyncio.Task[int] | None = None
        if fenced:  # another agent serves the room: kept out (from now on), and out
            server = (settings.livekit_url, settings.livekit_api_key, settings.livekit_api_secret)
            kept_out = asyncio.create_task(keep_out(server, room.name, identity))
        try:
            if fenced:
                await leave(room)
            if conventions is not None:
                await conventions.aclose()
            if keys is not None:
                await keys.aclose()
            await llm.close()
            await sink.aclose()  # before the lease goes: the last writes are still ours
            if hold is not None:
                await hold.keeper.release(hold)
            logger.info("room left", extra={"room": room.name})
        finally:
            if kept_out is not None:
                await kept_out  # cancelled with this task


_UNKNOWN: Final = rtc.DisconnectReason.UNKNOWN_REASON


def _log_connection(room: rtc.Room) -> None:
    """Log the SDK's reconnections and why the room was left: a room that moves while its
    worker lives is explained by them (livekit-server's full reconnect, a ping timeout)."""
    extra = {"room": room.name}

    def disconnected(reason: rtc.DisconnectReason.ValueType = _UNKNOWN) -> None:
        why = rtc.DisconnectReason.Name(reason)
        logger.info("room disconnected", extra={**extra, "reason": why})

    room.on("reconnecting", lambda: logger.warning("room link lost: reconnecting", extra=extra))
    room.on("reconnected", lambda: logger.info("room reconnected", extra=extra))
    room.on("disconnected", disconnected)


async def _on_request(request: JobRequest, *, settings: Settings) -> None:
    """Failover: take a job at once, noted on its room's lease (the watcher then waits for
    the agent instead of dispatching again), unless a live agent serves the room already
    (a late dispatch of a worker that was stopped, a redundant one): refused, so no agent
    joins the room only to leave it."""
    room = request.room.name
    if await keeper_for(settings).accept(room, required=lease_required(request.job.metadata)):
        await request.accept()
        return
    logger.info(
        "job refused: a live agent serves the room, or its lease cannot be checked",
        extra={"room": room},
    )
    await request.reject(terminate=True)


async def _run_until_drained(
    conversation: Conversation, transport: RoomTransport, settings: Settings, hold: Hold
) -> None:
    """Serve until the room closes, or until the worker drains: then let running turns
    finish (bounded) and leave, so the watcher gives the room to another worker. If the
    room's lease is lost (another agent took it over), leave at once."""
    run = asyncio.create_task(conversation.run(), name="alicia-conversation")
    drain = asyncio.create_task(wait_draining(), name="alicia-drain-wait")
    gone = asyncio.create_task(hold.lost.wait(), name="alicia-lease-lost")
    try:
        await asyncio.wait({run, drain, gone}, return_when=asyncio.FIRST_COMPLETED)
        if hold.taken and not run.done():  # known at once (lost is set a moment later)
            await transport.aclose()
            await run
        elif not run.done():
            with lease_span("alicia.drain", conversation.id) as span:
                settled = await conversation.runner.settle(settings.drain_turn_timeout_s)
                span.set_attribute("alicia.drain.settled", settled)
                logger.info(
                    "leaving a drained room", extra={"room": conversation.id, "settled": settled}
                )
                await transport.aclose()
                await run
    finally:
        for task in (run, drain, gone):
            task.cancel()
        await asyncio.gather(run, drain, gone, return_exceptions=True)
