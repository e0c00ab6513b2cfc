"""Tests of the AgentSession adapter (alicia.agent.session) and speech (alicia.agent.speech)."""
