"""Talking to models and shaping their text; knows nothing of transports or the protocol.

* ``stream.py``: streamed chat completions through the ``openai`` client, SSE decoded
  with msgspec into delta dicts.
* ``reasoning.py``: :class:`~agent.llm.reasoning.ReasoningExtractor` splits deltas into
  reasoning and answer text (fields, content blocks, inline tags cut across chunks).
* ``segmenter.py``: :class:`~agent.llm.segmenter.StepSegmenter` cuts reasoning text into
  ReasoningStep-sized steps (paragraphs, packet size, a time limit).
* ``sentences.py``: :class:`~agent.llm.sentences.SentenceStream` cuts answer text into
  sentences for AssistantSentence and speech.
"""
