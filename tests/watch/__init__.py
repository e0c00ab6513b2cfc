"""Tests of the failover watcher (alicia.agent.watch)."""
