"""Worker settings, read from the environment once.

Every knob of the worker lives in :class:`Settings`, a frozen dataclass with a docstring
per field naming its environment variable and default. :func:`load` reads
``os.environ`` once per process; no other module of the worker touches the environment.
Secrets (API keys, the database URL, which may hold a password) stay out of ``repr``.

Exception tree::

    ValueError
    └── SettingsError   a required variable is missing or a value does not parse
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from alicia.agent.engine.options import EngineOptions, ParticipantLimits, TurnOptions
from alicia.agent.env import EnvReader, SettingsError
from alicia.agent.llm.providers import PROFILES, resolve

__all__ = ["DEFAULT_SYSTEM_PROMPT", "Settings", "SettingsError", "WatchSettings", "load"]

_FALSE_INTERRUPTION: Final = "ALICIA_FALSE_INTERRUPTION_TIMEOUT"
DEFAULT_SYSTEM_PROMPT = (
    "You are Alicia, a helpful voice assistant. Think step by step, use the tools when "
    "they help, and answer in a few short sentences."
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Everything the worker can be told from outside (see :func:`load`)."""

    livekit_url: str
    """``LIVEKIT_URL`` (required): websocket URL of the LiveKit server, e.g. ``ws://127.0.0.1:7880``."""
    livekit_api_key: str = field(repr=False)
    """``LIVEKIT_API_KEY`` (required): API key the worker registers with."""
    livekit_api_secret: str = field(repr=False)
    """``LIVEKIT_API_SECRET`` (required): secret paired with the API key."""
    llm_base_url: str
    """``LLM_BASE_URL`` (required): base URL of an OpenAI-compatible API, e.g. ``http://127.0.0.1:8000/v1``."""
    llm_model: str
    """``LLM_MODEL`` (required): model name sent with each chat-completion request."""
    llm_api_key: str = field(default="none", repr=False)
    """``LLM_API_KEY`` (default ``none``): bearer key for the LLM endpoint."""
    llm_thinking_open: bool = False
    """``ALICIA_LLM_THINKING_OPEN`` (default false): the model's output starts inside reasoning
    and only a closing ``</think>`` appears (Qwen3 ``*-Thinking-2507``)."""
    llm_provider: str | None = None
    """``LLM_PROVIDER`` (default: detected from ``LLM_BASE_URL`` where unambiguous, else
    ``generic``): the provider profile (:data:`alicia.agent.llm.providers.PROFILES`) that decides
    whether reasoning goes back to the model and how effort is asked for."""
    llm_api: Literal["chat", "responses"] = "chat"
    """``LLM_API`` (default ``chat``): ``chat`` for chat completions, ``responses`` for the
    Responses API (``store: false``, encrypted reasoning items carried between requests)."""
    reasoning_effort: Literal["none", "low", "medium", "high"] | None = None
    """``ALICIA_REASONING_EFFORT`` (default unset: the provider's default): how hard the
    model thinks, sent in the provider's own form; ``low`` or ``none`` keep voice answers
    fast."""
    llm_timeout_s: float = 120.0
    """``ALICIA_LLM_TIMEOUT`` (default 120): seconds the endpoint may stay silent (no response,
    or no byte mid-stream) before the request is abandoned; also the connect/write timeout."""
    max_tool_rounds: int = 4
    """``ALICIA_MAX_TOOL_ROUNDS`` (default 4): LLM calls per turn that may end in tool calls."""
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    """``ALICIA_SYSTEM_PROMPT``: the system message of every request."""
    history_turns: int = 20
    """``ALICIA_HISTORY_TURNS`` (default 20): past user/answer pairs sent to the LLM
    (answers only; reasoning is never sent back)."""
    database_url: str | None = field(default=None, repr=False)
    """``DATABASE_URL`` (default unset = persistence off): SQLAlchemy async URL for storage."""
    storage_close_timeout_s: float = 10.0
    """``ALICIA_STORAGE_CLOSE_TIMEOUT`` (default 10): seconds a closing room tries to write
    its queue to an unreachable database; then the rest is spilled (replayed by the next)."""
    db_pool_size: int = 5
    """``ALICIA_DB_POOL_SIZE`` (default 5): PostgreSQL connections at most, shared by the
    rooms of one event loop (a thread-executor worker's text rooms)."""
    reasoning_visibility: Literal["full", "summary", "encrypted", "none"] = "none"
    """``ALICIA_REASONING_VISIBILITY`` (default ``none``): the reasoning of a participant
    whose token grants none (``alicia.reasoning``). ``full``: plaintext steps; ``summary``:
    a summary, the step only encrypted; ``encrypted``: the encrypted value; ``none``: none."""
    reasoning_keys: tuple[tuple[str, bytes], ...] = field(default=(), repr=False)
    """``ALICIA_REASONING_KEYS`` (default none): ``kid=base64(32 bytes)``, comma-separated.
    The first key encrypts reasoning values (JWE ``dir`` + ``A256GCM``), every key
    decrypts (rotation). Without keys, ``summary`` participants get summaries only and
    ``encrypted`` participants get no steps."""
    summary_model: str | None = None
    """``ALICIA_SUMMARY_MODEL`` (default unset = extractive summaries): a model on the same
    endpoint (chat completions, whatever ``LLM_API``) summarising each step for ``summary``
    participants when the provider sends none. A summary late for the answer is dropped."""
    summary_timeout_s: float = 3.0
    """``ALICIA_SUMMARY_TIMEOUT`` (default 3): seconds one summary may take; then the
    extractive one (if the answer has not started)."""
    summary_concurrency: int = 2
    """``ALICIA_SUMMARY_CONCURRENCY`` (default 2): summaries being made at once per
    conversation; a step beyond that gets the extractive summary at once."""
    zdr: bool = False
    """``ALICIA_ZDR`` (default false): zero data retention. No plaintext reasoning at rest:
    stored steps hold only the step encrypted with the conversation's data key (needs
    ``ALICIA_REASONING_KEYS``; without keys no step is stored at all), so spill files
    hold ciphertext too, and ``alicia-admin erase`` makes them unreadable."""
    show_reasoning_default: bool = True
    """``ALICIA_SHOW_REASONING_DEFAULT`` (default true): whether a client whose Configuration
    lists no ``features`` at all receives ReasoningSteps (spec default: send)."""
    step_max_delay_s: float = 1.0
    """``ALICIA_STEP_MAX_DELAY`` (default 1.0): seconds an open reasoning step may wait for
    its paragraph to end before it is cut and sent (at the last sentence/word boundary)."""
    tools_enabled: bool = True
    """``ALICIA_TOOLS`` (default true): offer the server-executed function tools to the LLM."""
    lk_conventions: bool = True
    """``ALICIA_LK_CONVENTIONS`` (default true): text rooms also speak LiveKit's agent
    conventions (answers as ``lk.transcription`` streams, ``lk.chat`` input, the
    ``lk.agent.state`` attribute; ``agent/rooms/conventions.py``)."""
    queue_size: int = 8
    """``ALICIA_QUEUE_SIZE`` (default 8): pending turns/variations per participant; more
    is answered with ErrorMessage 504."""
    rate_per_s: float = 20.0
    """``ALICIA_RATE`` (default 20): sustained packets per second accepted per participant."""
    rate_burst: int = 40
    """``ALICIA_RATE_BURST`` (default 40): packets a participant may send in one burst."""
    error_rate_per_s: float = 2.0
    """``ALICIA_ERROR_RATE`` (default 2): ErrorMessages per second sent to one participant
    (bad input past this is dropped silently)."""
    error_burst: int = 5
    """``ALICIA_ERROR_BURST`` (default 5): ErrorMessages one participant may get in a burst."""
    edit_timeout_s: float = 5.0
    """``ALICIA_EDIT_TIMEOUT`` (default 5): seconds to wait for the new UserMessage after a
    ControlVariation ``edit`` before answering with an ErrorMessage."""
    voice_mode: Literal["offline"] | None = None
    """``ALICIA_VOICE`` (default unset = text only): ``offline`` serves voice rooms with
    offline speech: Silero VAD, pocketsphinx STT and Debian's espeak-ng TTS, run by a
    livekit-agents AgentSession (``ALICIA_STT``/``ALICIA_TTS`` replace either part)."""
    spoken_progress: Literal["off", "cue", "summary"] = "cue"
    """``ALICIA_SPOKEN_PROGRESS`` (default ``cue``): what a voice agent says while the model
    reasons: ``off`` nothing, ``cue`` neutral or tool-aware cues ("Let me work that out."),
    ``summary`` a short remark made from the latest step's summary when every listener in
    the room is granted ``summary`` or ``full`` (else cues)."""
    progress_delay_s: float = 1.2
    """``ALICIA_PROGRESS_DELAY`` (default 1.2): seconds after the user's end of speech
    before the first remark, if no answer audio has started and the model still reasons."""
    progress_gap_s: float = 2.5
    """``ALICIA_PROGRESS_GAP`` (default 2.5): seconds of quiet after a remark before the
    next one, for as long as the model reasons."""
    turn_detection: str = "model"
    """``ALICIA_TURN_DETECTION`` (default ``model``): how a voice room decides that the user
    has finished: ``model`` LiveKit's end-of-turn audio model, run offline in the worker
    (``turn-detector-v1-mini``, shipped in ``livekit-local-inference``); ``vad`` the VAD's
    silence and the endpointing delay alone; or ``module:callable`` returning another
    livekit-agents turn detector."""
    endpointing_min_delay_s: float = 0.8
    """``ALICIA_ENDPOINTING_MIN_DELAY`` (default 0.8): seconds of silence after speech
    before a voice turn ends when the end-of-turn model judges it finished (or with
    ``ALICIA_TURN_DETECTION=vad``). It must cover the recognizer's delay (offline: 0.5 to
    0.7 s): a transcript that comes after the turn ended makes a turn of its own."""
    endpointing_max_delay_s: float = 1.5
    """``ALICIA_ENDPOINTING_MAX_DELAY`` (default 1.5): seconds of silence the agent waits
    when the model judges the turn unfinished (a pause inside a question), before it
    answers anyway."""
    false_interruption_timeout_s: float | None = 2.0
    """``ALICIA_FALSE_INTERRUPTION_TIMEOUT`` (default 2.0, livekit-agents'): seconds speech
    over the agent pauses it before it resumes with no transcript; ``0``: it interrupts."""
    stt: str | None = None
    """``ALICIA_STT`` (default unset = text only): ``module:callable`` returning a streaming
    ``livekit.agents.stt.STT``, e.g. ``livekit.plugins.deepgram:STT``."""
    tts: str | None = None
    """``ALICIA_TTS`` (default unset = no speech): ``module:callable`` returning a
    ``livekit.agents.tts.TTS``, e.g. ``livekit.plugins.cartesia:TTS``."""
    job_executor: Literal["process", "thread"] = "process"
    """``ALICIA_JOB_EXECUTOR`` (default ``process``): livekit-agents runs each room in its own
    process; ``thread`` runs all rooms of this worker in one process, a thread each."""
    job_start_timeout_s: float = 10.0
    """``ALICIA_JOB_START_TIMEOUT`` (default 10, livekit-agents' own): seconds a job process
    (or thread) may take to start before livekit-agents kills it and starts another; raise it
    on a machine whose CPU is shared (a starved start is killed, and so is the next)."""
    idle_processes: int | None = None
    """``ALICIA_IDLE_PROCESSES`` (default unset = livekit-agents' own: the CPUs, at most 4,
    with ``start``; none with ``dev``): job processes (or threads) kept warm for the next
    rooms, each with a room's models loaded (a voice room's VAD and recognizer)."""
    load_threshold: float | None = None
    """``ALICIA_LOAD_THRESHOLD`` (default unset = livekit-agents' own: 0.7 with ``start``,
    unlimited with ``dev``): CPU load above which the worker takes no new rooms
    (``inf`` = never full)."""
    native_logs: Literal["stderr", "capture"] = "stderr"
    """``ALICIA_NATIVE_LOGS`` (default ``stderr``): where the livekit native library's own log
    records go. ``stderr``: filtered natively by ``RUST_LOG`` (default ``warn``) and written
    to stderr. ``capture``: the SDK's default, every record (libwebrtc writes a debug hex dump
    of each SCTP packet) crosses into Python to be filtered there; costs CPU per packet."""
    max_rooms: int | None = None
    """``ALICIA_MAX_ROOMS`` (default unset = load is the machine's CPU use, livekit-agents'
    own measure): the worker's capacity in rooms. Set, the worker reports its load to
    livekit-server as 0.7 x rooms served / ``max_rooms`` (0.7: the server's default
    ``agents.target_load``, below which it sends rooms) and is full at ``max_rooms``
    (unless ``ALICIA_LOAD_THRESHOLD`` says otherwise). Useful when the worker
    shares a machine whose CPU use says little about the worker's own. livekit-agents
    counts rooms accepted at once on an empty worker as threshold / idle job runners each,
    so a burst can find it full early; ``ALICIA_LOAD_THRESHOLD=inf`` avoids that."""
    agent_name: str = ""
    """``ALICIA_AGENT_NAME`` (default empty = automatic dispatch to every new room)."""
    failover: bool = False
    """``ALICIA_FAILOVER`` (default false): rooms can be taken over by another worker when
    this one dies (needs ``DATABASE_URL`` and ``ALICIA_AGENT_NAME``; run
    ``python -m alicia.agent.watch`` next to the workers). Every envelope is stored (and
    logged as sent) before it leaves, each room's agent holds a lease its worker renews,
    and an agent joining a room restores the conversation from storage."""
    heartbeat_interval_s: float = 0.25
    """``ALICIA_HEARTBEAT_INTERVAL`` (default 0.25): seconds between lease renewals (one
    UPDATE per worker process for all its rooms)."""
    heartbeat_timeout_s: float = 1.5
    """``ALICIA_HEARTBEAT_TIMEOUT`` (default 1.5): a lease not renewed for this long is
    dead; its room is given to another agent (and the old one, if it was only slow,
    leaves the room when it sees its lease gone)."""
    drain_turn_timeout_s: float = 30.0
    """``ALICIA_DRAIN_TURN_TIMEOUT`` (default 30): seconds turns get to end on SIGTERM."""
    http_host: str = "127.0.0.1"
    """``ALICIA_HTTP_HOST`` (default 127.0.0.1): where the worker's health-check port and
    Prometheus ``/metrics`` listen (livekit-agents' default is every interface); ``0.0.0.0``
    for a container's health check from outside."""
    http_port: int = 0
    """``ALICIA_HTTP_PORT`` (default 0 = any free port): the worker's health-check HTTP port."""
    metrics_port: int | None = None
    """``ALICIA_METRICS_PORT`` (default unset: no metrics): the port of the worker's
    Prometheus ``/metrics`` (livekit-agents' ``prometheus_port``), with every job
    process's numbers in it. Traces are configured the OpenTelemetry way (``OTEL_*``)."""
    trace_content: Literal["none", "summary", "full"] = "none"
    """``ALICIA_TRACE_CONTENT`` (default ``none``): reasoning text in traces, as a
    ``ReasoningPart`` of ``gen_ai.output.messages``: ``summary`` (each step's first
    sentence) or ``full``. Refused with ``ALICIA_ZDR``."""
    replay_keep: int = 200
    """``ALICIA_REPLAY_KEEP`` (default 200): server envelopes each conversation keeps in memory
    to re-send to a resuming client (PROTOCOL.md §4.9); a larger gap gets ErrorMessage 202."""
    replay_max_bytes: int = 65536
    """``ALICIA_REPLAY_MAX_BYTES`` (default 65536): bytes one resume may replay; a larger
    gap gets ErrorMessage 202 (so a resume never amplifies a small request into megabytes)."""
    resume_burst: int = 3
    """``ALICIA_RESUME_BURST`` (default 3): resume Configurations one participant may send
    in a burst; more are answered with ErrorMessage 504."""
    resume_rate_per_s: float = 0.1
    """``ALICIA_RESUME_RATE`` (default 0.1): one participant's resumes per second past its burst."""
    agui_host: str = "127.0.0.1"
    """``ALICIA_AGUI_HOST`` (default ``127.0.0.1``): the AG-UI endpoint's address."""
    agui_port: int = 8090
    """``ALICIA_AGUI_PORT`` (default 8090): the AG-UI endpoint's port (0 = any free one)."""
    agui_max_runs: int = 64
    """``ALICIA_AGUI_MAX_RUNS`` (default 64): AG-UI runs and room streams served at once by
    one process; more are answered with HTTP 503."""
    agui_max_per_caller: int = 4
    """``ALICIA_AGUI_MAX_PER_CALLER`` (default 4): AG-UI runs and room streams one caller
    (token identity) may hold at once, together; more are answered with HTTP 429."""
    agui_max_per_address: int = 16
    """``ALICIA_AGUI_MAX_PER_ADDRESS`` (default 16): AG-UI runs and room streams one client
    address may hold at once, whatever identities its tokens name (a token route that
    mints one per session); more are answered with HTTP 429."""
    agui_trusted_proxies: tuple[str, ...] = ()
    """``ALICIA_AGUI_TRUSTED_PROXIES`` (default none): comma-separated addresses of reverse
    proxies in front of the endpoint; from them, the client address is the last
    ``X-Forwarded-For`` entry that is not a trusted proxy (else the connection's peer)."""
    agui_max_uploads: int = 8
    """``ALICIA_AGUI_MAX_UPLOADS`` (default 8): run inputs being received at once by one
    process; more are answered with HTTP 503. One caller (token identity) or client address
    receives at most a quarter of them (at least one) at once; more: HTTP 429."""
    agui_body_timeout_s: float = 10.0
    """``ALICIA_AGUI_BODY_TIMEOUT`` (default 10): seconds a run input may take to arrive
    whole; then the request is answered with HTTP 408."""
    agui_run_timeout_s: float = 300.0
    """``ALICIA_AGUI_RUN_TIMEOUT`` (default 300): seconds an AG-UI run may take; then its
    turn is stopped and the run ends with ``RUN_ERROR`` (code ``run_timeout``)."""
    agui_write_timeout_s: float = 10.0
    """``ALICIA_AGUI_WRITE_TIMEOUT`` (default 10): seconds an AG-UI stream waits for a
    caller that stopped reading (its buffers full); then the stream is cut."""
    timing_meta: bool = False
    """``ALICIA_TIMING_META`` (default false): add ``meta.closedAtNs`` (``time.time_ns()``
    when the segmenter closed the step) to each ReasoningStep, for ``bench/latency.py``."""

    @property
    def voice(self) -> bool:
        """True if rooms are served with speech (``ALICIA_VOICE``, an STT or TTS plugin)."""
        return self.voice_mode is not None or self.stt is not None or self.tts is not None

    def turn_options(self) -> TurnOptions:
        """How this worker's turns talk to the model."""
        profile, _ = resolve(self.llm_provider, self.llm_base_url, self.llm_model)
        return TurnOptions(
            model=self.llm_model,
            system_prompt=self.system_prompt,
            history_turns=self.history_turns,
            max_tool_rounds=self.max_tool_rounds,
            thinking_open=self.llm_thinking_open,
            step_max_delay_s=self.step_max_delay_s,
            provider=profile,
            api=self.llm_api,
            effort=self.reasoning_effort,
        )

    def engine_options(self) -> EngineOptions:
        """What the engine is told of this deployment (it never reads the settings)."""
        return EngineOptions(
            turn=self.turn_options(),
            participants=ParticipantLimits(
                show_reasoning_default=self.show_reasoning_default,
                reasoning_visibility=self.reasoning_visibility,
                queue_size=self.queue_size,
                rate_per_s=self.rate_per_s,
                rate_burst=self.rate_burst,
                error_rate_per_s=self.error_rate_per_s,
                error_burst=self.error_burst,
                resume_rate_per_s=self.resume_rate_per_s,
                resume_burst=self.resume_burst,
            ),
            replay_keep=self.replay_keep,
            replay_max_bytes=self.replay_max_bytes,
            failover=self.failover,
            zdr=self.zdr,
            reasoning_keys=self.reasoning_keys,
            summary_model=self.summary_model,
            summary_timeout_s=self.summary_timeout_s,
            summary_concurrency=self.summary_concurrency,
            timing_meta=self.timing_meta,
            tools_enabled=self.tools_enabled,
            edit_timeout_s=self.edit_timeout_s,
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """Build settings from ``env`` (a mapping like ``os.environ``); see each field."""
        r = EnvReader(env)
        executor = r.text("ALICIA_JOB_EXECUTOR", "process")
        if executor not in ("process", "thread"):
            raise SettingsError(f"ALICIA_JOB_EXECUTOR must be process or thread, not {executor!r}")
        native_logs = r.text("ALICIA_NATIVE_LOGS", "stderr")
        if native_logs not in ("stderr", "capture"):
            raise SettingsError(
                f"ALICIA_NATIVE_LOGS must be stderr or capture, not {native_logs!r}"
            )
        settings = cls(
            livekit_url=r.required("LIVEKIT_URL"),
            livekit_api_key=r.required("LIVEKIT_API_KEY"),
            livekit_api_secret=r.required("LIVEKIT_API_SECRET"),
            llm_base_url=r.required("LLM_BASE_URL"),
            llm_model=r.required("LLM_MODEL"),
            llm_api_key=r.text("LLM_API_KEY", "none"),
            llm_thinking_open=r.flag("ALICIA_LLM_THINKING_OPEN", False),
            llm_timeout_s=r.number("ALICIA_LLM_TIMEOUT", 120.0, low=0.1),
            llm_provider=_provider(r.optional("LLM_PROVIDER")),
            llm_api=_api(r.optional("LLM_API")),
            reasoning_effort=_effort(r.optional("ALICIA_REASONING_EFFORT")),
            max_tool_rounds=r.integer("ALICIA_MAX_TOOL_ROUNDS", 4, low=0),
            system_prompt=r.text("ALICIA_SYSTEM_PROMPT", DEFAULT_SYSTEM_PROMPT),
            history_turns=r.integer("ALICIA_HISTORY_TURNS", 20, low=0),
            database_url=r.optional("DATABASE_URL"),
            storage_close_timeout_s=r.number("ALICIA_STORAGE_CLOSE_TIMEOUT", 10.0, low=0.0),
            db_pool_size=r.integer("ALICIA_DB_POOL_SIZE", 5, low=1),
            reasoning_visibility=_visibility(r.optional("ALICIA_REASONING_VISIBILITY")),
            reasoning_keys=_keys(r.optional("ALICIA_REASONING_KEYS")),
            zdr=r.flag("ALICIA_ZDR", False),
            summary_model=r.optional("ALICIA_SUMMARY_MODEL"),
            summary_timeout_s=r.number("ALICIA_SUMMARY_TIMEOUT", 3.0, low=0.05),
            summary_concurrency=r.integer("ALICIA_SUMMARY_CONCURRENCY", 2, low=1),
            show_reasoning_default=r.flag("ALICIA_SHOW_REASONING_DEFAULT", True),
            step_max_delay_s=r.number("ALICIA_STEP_MAX_DELAY", 1.0, low=0.01),
            tools_enabled=r.flag("ALICIA_TOOLS", True),
            lk_conventions=r.flag("ALICIA_LK_CONVENTIONS", True),
            queue_size=r.integer("ALICIA_QUEUE_SIZE", 8, low=1),
            rate_per_s=r.number("ALICIA_RATE", 20.0, low=0.1),
            rate_burst=r.integer("ALICIA_RATE_BURST", 40, low=1),
            error_rate_per_s=r.number("ALICIA_ERROR_RATE", 2.0, low=0.01),
            error_burst=r.integer("ALICIA_ERROR_BURST", 5, low=1),
            edit_timeout_s=r.number("ALICIA_EDIT_TIMEOUT", 5.0, low=0.1),
            voice_mode=_voice(r.optional("ALICIA_VOICE")),
            spoken_progress=_progress(r.optional("ALICIA_SPOKEN_PROGRESS")),
            progress_delay_s=r.number("ALICIA_PROGRESS_DELAY", 1.2, low=0.0),
            progress_gap_s=r.number("ALICIA_PROGRESS_GAP", 2.5, low=0.2),
            turn_detection=_turn_detection(r.optional("ALICIA_TURN_DETECTION")),
            endpointing_min_delay_s=r.number("ALICIA_ENDPOINTING_MIN_DELAY", 0.8, low=0.0),
            endpointing_max_delay_s=r.number("ALICIA_ENDPOINTING_MAX_DELAY", 1.5, low=0.0),
            false_interruption_timeout_s=r.number(_FALSE_INTERRUPTION, 2.0, low=0.0) or None,
            stt=r.optional("ALICIA_STT"),
            tts=r.optional("ALICIA_TTS"),
            job_executor="thread" if executor == "thread" else "process",
            job_start_timeout_s=r.number("ALICIA_JOB_START_TIMEOUT", 10.0, low=1.0),
            idle_processes=r.optional_integer("ALICIA_IDLE_PROCESSES", low=0),
            load_threshold=r.optional_number("ALICIA_LOAD_THRESHOLD"),
            native_logs="capture" if native_logs == "capture" else "stderr",
            max_rooms=r.optional_integer("ALICIA_MAX_ROOMS", low=1),
            agent_name=r.text("ALICIA_AGENT_NAME", ""),
            failover=r.flag("ALICIA_FAILOVER", False),
            heartbeat_interval_s=r.number("ALICIA_HEARTBEAT_INTERVAL", 0.25, low=0.05),
            heartbeat_timeout_s=r.number("ALICIA_HEARTBEAT_TIMEOUT", 1.5, low=0.1),
            drain_turn_timeout_s=r.number("ALICIA_DRAIN_TURN_TIMEOUT", 30.0, low=0.0),
            http_host=r.text("ALICIA_HTTP_HOST", "127.0.0.1"),
            http_port=r.integer("ALICIA_HTTP_PORT", 0, low=0),
            metrics_port=r.optional_integer("ALICIA_METRICS_PORT", low=1),
            trace_content=_trace_content(
                r.optional("ALICIA_TRACE_CONTENT"),
                zdr=r.flag("ALICIA_ZDR", False),
                allow_pii=r.flag("LIVEKIT_TELEMETRY_ALLOW_PII", False),
            ),
            replay_keep=r.integer("ALICIA_REPLAY_KEEP", 200, low=1),
            replay_max_bytes=r.integer("ALICIA_REPLAY_MAX_BYTES", 65536, low=1),
            resume_burst=r.integer("ALICIA_RESUME_BURST", 3, low=1),
            resume_rate_per_s=r.number("ALICIA_RESUME_RATE", 0.1, low=0.001),
            timing_meta=r.flag("ALICIA_TIMING_META", False),
            agui_host=r.text("ALICIA_AGUI_HOST", "127.0.0.1"),
            agui_port=r.integer("ALICIA_AGUI_PORT", 8090, low=0),
            agui_max_runs=r.integer("ALICIA_AGUI_MAX_RUNS", 64, low=1),
            agui_max_per_caller=r.integer("ALICIA_AGUI_MAX_PER_CALLER", 4, low=1),
            agui_max_per_address=r.integer("ALICIA_AGUI_MAX_PER_ADDRESS", 16, low=1),
            agui_trusted_proxies=tuple(
                a.strip() for a in r.text("ALICIA_AGUI_TRUSTED_PROXIES", "").split(",") if a.strip()
            ),
            agui_max_uploads=r.integer("ALICIA_AGUI_MAX_UPLOADS", 8, low=1),
            agui_body_timeout_s=r.number("ALICIA_AGUI_BODY_TIMEOUT", 10.0, low=0.1),
            agui_run_timeout_s=r.number("ALICIA_AGUI_RUN_TIMEOUT", 300.0, low=0.1),
            agui_write_timeout_s=r.number("ALICIA_AGUI_WRITE_TIMEOUT", 10.0, low=0.1),
        )
        if settings.failover and not (settings.database_url and settings.agent_name):
            raise SettingsError("ALICIA_FAILOVER needs DATABASE_URL and ALICIA_AGENT_NAME")
        if settings.endpointing_max_delay_s < settings.endpointing_min_delay_s:
            raise SettingsError(
                "ALICIA_ENDPOINTING_MAX_DELAY must be at least ALICIA_ENDPOINTING_MIN_DELAY"
            )
        return settings


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchSettings:
    """What the failover watcher (``python -m alicia.agent.watch``) is told from outside."""

    livekit_url: str
    """``LIVEKIT_URL`` (required): the LiveKit server whose rooms it watches."""
    livekit_api_key: str = field(repr=False)
    """``LIVEKIT_API_KEY`` (required): also checks the webhooks' signatures."""
    livekit_api_secret: str = field(repr=False)
    """``LIVEKIT_API_SECRET`` (required)."""
    database_url: str = field(repr=False)
    """``DATABASE_URL`` (required): the workers' storage, where their leases are."""
    agent_name: str
    """``ALICIA_AGENT_NAME`` (required): the agent name the workers register under."""
    host: str = "127.0.0.1"
    """``ALICIA_WATCH_HOST`` (default ``127.0.0.1``): where webhooks are received."""
    port: int = 8091
    """``ALICIA_WATCH_PORT`` (default 8091): the webhook port (livekit-server's
    ``webhook.urls``: ``http://HOST:PORT/webhook``)."""
    poll_s: float = 5.0
    """``ALICIA_WATCH_POLL`` (default 5): seconds between two looks at every room
    (RoomService), the fallback when a webhook is lost."""
    heartbeat_timeout_s: float = 1.5
    """``ALICIA_HEARTBEAT_TIMEOUT`` (default 1.5): a lease not renewed for this long is
    dead (the workers' setting)."""
    dispatch_grace_s: float = 10.0
    """``ALICIA_DISPATCH_GRACE`` (default 10): seconds a dispatched agent gets to join and
    claim its room before the room is dispatched again."""
    redispatch_s: float = 0.5
    """``ALICIA_REDISPATCH_AFTER`` (default 0.5): when no worker took the job this long
    after a dispatch, a stalled worker has the job (livekit-server waits 10 s on it):
    the room is dispatched again at once."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WatchSettings:
        """Build the watcher's settings from ``env``."""
        r = EnvReader(env)
        return cls(
            livekit_url=r.required("LIVEKIT_URL"),
            livekit_api_key=r.required("LIVEKIT_API_KEY"),
            livekit_api_secret=r.required("LIVEKIT_API_SECRET"),
            database_url=r.required("DATABASE_URL"),
            agent_name=r.required("ALICIA_AGENT_NAME"),
            host=r.text("ALICIA_WATCH_HOST", "127.0.0.1"),
            port=r.integer("ALICIA_WATCH_PORT", 8091, low=0),
            poll_s=r.number("ALICIA_WATCH_POLL", 5.0, low=0.1),
            heartbeat_timeout_s=r.number("ALICIA_HEARTBEAT_TIMEOUT", 1.5, low=0.1),
            dispatch_grace_s=r.number("ALICIA_DISPATCH_GRACE", 10.0, low=0.5),
            redispatch_s=r.number("ALICIA_REDISPATCH_AFTER", 0.5, low=0.1),
        )

    @classmethod
    def load(cls) -> WatchSettings:
        """The watcher's settings from ``os.environ``."""
        return cls.from_env(os.environ)


def _provider(value: str | None) -> str | None:
    if value is None:
        return None
    name = value.strip().lower()
    if name not in PROFILES:
        raise SettingsError(f"LLM_PROVIDER must be one of {', '.join(PROFILES)}, not {value!r}")
    return name


_APIS: Final[dict[str, Literal["chat", "responses"]]] = {"chat": "chat", "responses": "responses"}
_EFFORTS: Final[dict[str, Literal["none", "low", "medium", "high"]]] = {
    "none": "none",
    "low": "low",
    "medium": "medium",
    "high": "high",
}


def _api(value: str | None) -> Literal["chat", "responses"]:
    api = _APIS.get((value or "chat").strip().lower())
    if api is None:
        raise SettingsError(f"LLM_API must be chat or responses, not {value!r}")
    return api


def _effort(value: str | None) -> Literal["none", "low", "medium", "high"] | None:
    if value is None or not value.strip():
        return None
    effort = _EFFORTS.get(value.strip().lower())
    if effort is None:
        raise SettingsError(
            f"ALICIA_REASONING_EFFORT must be none, low, medium or high, not {value!r}"
        )
    return effort


def _voice(value: str | None) -> Literal["offline"] | None:
    mode = (value or "off").strip().lower()
    if mode == "offline":
        return "offline"
    if mode in ("off", "none", "false", "0"):
        return None
    raise SettingsError(f"ALICIA_VOICE must be offline or off, not {value!r}")


def _turn_detection(value: str | None) -> str:
    choice = (value or "model").strip()
    if choice.lower() in ("model", "vad"):
        return choice.lower()
    if ":" in choice:
        return choice
    raise SettingsError(
        f"ALICIA_TURN_DETECTION must be model, vad or module:callable, not {value!r}"
    )


def _progress(value: str | None) -> Literal["off", "cue", "summary"]:
    policy = (value or "cue").strip().lower()
    if policy == "off":
        return "off"
    if policy == "cue":
        return "cue"
    if policy == "summary":
        return "summary"
    raise SettingsError(f"ALICIA_SPOKEN_PROGRESS must be off, cue or summary, not {value!r}")


def _visibility(value: str | None) -> Literal["full", "summary", "encrypted", "none"]:
    level = (value or "none").lower()
    if level == "full":
        return "full"
    if level == "summary":
        return "summary"
    if level == "encrypted":
        return "encrypted"
    if level == "none":
        return "none"
    raise SettingsError(
        f"ALICIA_REASONING_VISIBILITY must be full, summary, encrypted or none, not {value!r}"
    )


def _trace_content(
    value: str | None, *, zdr: bool, allow_pii: bool = False
) -> Literal["none", "summary", "full"]:
    if allow_pii and zdr:
        raise SettingsError(
            "LIVEKIT_TELEMETRY_ALLOW_PII puts what people said, the answers and tool arguments "
            "into livekit-agents' spans, which ALICIA_ZDR forbids: unset one of them"
        )
    content = (value or "none").strip().lower()
    if content not in ("none", "summary", "full"):
        raise SettingsError(f"ALICIA_TRACE_CONTENT must be none, summary or full, not {value!r}")
    if content != "none" and zdr:
        raise SettingsError(
            f"ALICIA_TRACE_CONTENT={content} puts reasoning into traces, which ALICIA_ZDR "
            "forbids (no plaintext reasoning leaves the worker): unset one of them"
        )
    return "full" if content == "full" else "summary" if content == "summary" else "none"


def _keys(value: str | None) -> tuple[tuple[str, bytes], ...]:
    from alicia.agent.engine.sealing import KeyConfigError, parse_keys

    try:
        return tuple(parse_keys(value or ""))
    except KeyConfigError as exc:
        raise SettingsError(f"ALICIA_REASONING_KEYS: {exc}") from None


@functools.cache
def load() -> Settings:
    """The settings of this process, read from ``os.environ`` on first call."""
    return Settings.from_env(os.environ)
