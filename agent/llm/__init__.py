"""Talking to models and shaping their text; knows nothing of transports or the protocol.

* ``providers.py``: the provider profiles (``LLM_PROVIDER``): what goes back to the
  model (pass-back rules) and how reasoning effort is asked for.
* ``stream.py``: streamed chat completions and Responses API streams through the
  ``openai`` client, SSE decoded with msgspec into chat-shaped delta dicts.
* ``reasoning.py``: :class:`~alicia.agent.llm.reasoning.ReasoningExtractor` splits deltas into
  reasoning, provider summaries and answer text (fields, details, content blocks, inline
  markers cut across chunks).
* ``passback.py``: what a provider needs back from a round, and requests rendered in
  each API's shape.
* ``summary.py``: summaries of a step (a summarizer model, or extractive).
* ``segmenter.py``: :class:`~alicia.agent.llm.segmenter.StepSegmenter` cuts reasoning text into
  ReasoningStep-sized steps (paragraphs, packet size, a time limit).
* ``sentences.py``: :class:`~alicia.agent.llm.sentences.SentenceStream` cuts answer text into
  sentences for AssistantSentence and speech.
"""
