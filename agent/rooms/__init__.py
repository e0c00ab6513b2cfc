"""The LiveKit front end: the engine's conversations served in LiveKit rooms.

* ``worker.py``: the ``AgentServer`` (``cli.run_app``) and the per-room entrypoint that
  wires settings, storage, the LLM client, a ``RoomTransport`` and a ``Conversation``.
* ``transport.py``: :class:`~alicia.agent.rooms.transport.RoomTransport`, the engine's transport
  port on a connected ``livekit.rtc.Room``.
* ``ffi_routing.py``: per-room routing of the livekit FFI's events (O(1) per event).
* ``room_loop.py``: one shared event loop for every text room of a thread-executor worker.
* ``voice.py``: optional STT/TTS plugins (final transcripts in, answer sentences out).
"""
