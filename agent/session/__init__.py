"""Reasoning inside anyone's livekit-agents AgentSession.

* :class:`AliciaLLM`: an ``llm.LLM`` for any OpenAI-compatible endpoint (or the
  Responses API) whose reasoning never reaches TTS or the transcript;
* :func:`attach_reasoning`: speaks the Alicia protocol to the protocol clients in the
  session's room (ReasoningSteps per each participant's grant, tool use, answers,
  transcriptions, stop), through the engine's protocol session.
"""

from .attach import attach_reasoning
from .bridge import ReasoningBridge
from .llm import AliciaLLM

__all__ = ["AliciaLLM", "ReasoningBridge", "attach_reasoning"]
