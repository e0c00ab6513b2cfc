"""The turn engine: the Alicia protocol for one conversation, with no transport in it.

* ``turn.py``: :class:`~alicia.agent.engine.turn.Turn` runs ONE turn (context, LLM rounds, tool
  calls) and yields typed :mod:`~alicia.agent.engine.events` (step ready, answer started, answer
  text and sentences, tool requested and finished, turn ended).
* ``conversation.py``: :class:`~alicia.agent.engine.conversation.Conversation` is one
  conversation: participants, handshake, routing, stop and variation, replay. It turns
  turn events into envelopes.
* ``participants.py``: per-participant state (features, stanza order, rate limits, queue)
  and the errors the engine reports to clients.
* ``tools.py``: the server-executed function tools.
* ``keeper.py``: reasoning kept for a provider's pass-back rule, sealed while it waits.
* ``retention.py``: what a conversation keeps per turn (history, step chains, ids), capped.
* ``sealing.py``: JWE sealing of reasoning (``encryptedValue``) and the data-key port.
* ``variation.py``: ControlVariation (edit, regenerate, retry, continue).
* Ports, owned here and implemented by the layers around it: ``transport.py``
  (:class:`~alicia.agent.engine.transport.Transport`, implemented by front ends; typed input
  comes in on it too), ``sink.py`` (:class:`~alicia.agent.engine.sink.StepSink`, implemented
  by ``agent/storage``) and ``observer.py`` (:class:`~alicia.agent.engine.observer.AnswerObserver`:
  each turn's answer without its reasoning, for a front end's own conventions).

Imports nothing from ``livekit``, no front end and no storage implementation (pinned by
``tests/project/test_layers.py``).
"""
