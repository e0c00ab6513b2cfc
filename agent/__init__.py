"""The Alicia agent: keep an LLM's reasoning and show it, safely, to the right people.

Front ends on top, the engine in the middle, the parts it uses below; a package imports
only downward::

    agent/rooms/      LiveKit front end: AgentServer wiring, RoomTransport, FFI routing,
                      the shared room loop, voice I/O        (the only place with livekit)
    agent/engine/     transport-free: one turn (turn.py) and one conversation's protocol
                      (conversation.py); the ports it needs (transport.py, sink.py)
    agent/llm/        talking to models and shaping their text: stream decoding, the
                      reasoning extractor, the step segmenter, the sentence splitter
    agent/storage/    optional persistence: tables, the batched writer, alicia-stats
    agent/settings.py every knob, read from the environment once

``python -m alicia.agent start|dev`` runs the LiveKit worker (``agent/__main__.py``).
"""
