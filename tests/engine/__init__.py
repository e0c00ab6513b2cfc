"""Tests of the engine (alicia.agent.engine): turns, conversations, visibility, sealing, tools."""
