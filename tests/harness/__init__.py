"""Tests of the test harness (alicia.harness): the recorded LLM server, ports, setup."""
