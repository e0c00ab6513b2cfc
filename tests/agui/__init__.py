"""Tests of the AG-UI endpoint (alicia.agent.agui) run as a process."""
