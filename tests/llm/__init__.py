"""Tests of the LLM layer (alicia.agent.llm): streams, reasoning, segmenting, providers."""
