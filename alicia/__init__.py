"""alicia-reasoning: keep LLM reasoning in LiveKit voice agents and show it, safely.

One import name for everything the project installs (the repository's top-level folders
are its subpackages): :mod:`alicia.protocol` (the Alicia data-channel protocol v1),
:mod:`alicia.agent` (the worker, the turn engine, storage, the AgentSession adapter),
:mod:`alicia.client` and :mod:`alicia.web` (debug clients). For an AgentSession app::

    from alicia import AliciaLLM, attach_reasoning, bound_streams

(loaded on first use, so ``import alicia.protocol`` does not import livekit).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from alicia.agent.gate.room import bound_streams
    from alicia.agent.session import AliciaLLM, ReasoningBridge, attach_reasoning

__all__ = ["AliciaLLM", "ReasoningBridge", "attach_reasoning", "bound_streams"]


def __getattr__(name: str) -> Any:
    if name == "bound_streams":
        from alicia.agent.gate import room

        return room.bound_streams
    if name in __all__:
        from alicia.agent import session

        return getattr(session, name)
    raise AttributeError(f"module 'alicia' has no attribute {name!r}")
