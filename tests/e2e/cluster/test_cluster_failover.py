"""Failover on a 2-node cluster: a worker that dies.

The module's cluster (two nodes, one Redis, haproxy in front, webhooks from both nodes to
the watcher), Postgres, the watcher and two failover workers, all reaching LiveKit through
the balancer, as a deployment would.

* ``kill -9`` of the worker holding four rooms mid-turn: as on one node
  (``tests/e2e/failover/test_failover.py``'s takeover), the watcher deciding on webhooks
  from both nodes: every room gets a new agent, every client resumes, nothing lost or
  shown twice, the cut turn closed with its 503, a new turn works.
* The same with two watchers (both nodes post to both), one of them killed (``kill -9``)
  half a second after the worker and started again a second later: the dispatch decided
  in the database, each room still gets exactly one new agent.

A node that dies (``kill -9`` of a livekit-server): ``test_node_death.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from alicia.harness import PostgresServer
from alicia.harness.cluster import LiveKitCluster
from alicia.harness.recorded_llm import RecordedLLM
from tests.e2e.failover.test_failover import takeover

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

LLM_STREAMS = "shared"  # llm (tests/conftest.py): the streams of tests/streams only
LLM_OPTIONS = {"chunk_delay": 0.02}
STREAM = "deepseek_reasoning_content"
ROOMS = 4


@pytest.mark.parametrize("watchers", ["one watcher", "two watchers, one killed and restarted"])
async def test_kill_9_of_a_worker_moves_its_rooms_across_nodes_with_nothing_lost(
    cluster: LiveKitCluster,
    postgres_server: PostgresServer,
    llm: RecordedLLM,
    watch_port: int,
    second_watch_port: int,
    tmp_path: Path,
    watchers: str,
) -> None:
    """One watcher on webhooks from both nodes; or two, the first killed and restarted
    while the rooms move."""
    two = watchers.startswith("two")
    await takeover(
        cluster,  # type: ignore[arg-type]
        postgres_server,
        llm,
        watch_port,
        tmp_path,
        restart_watcher=two,
        rooms_n=ROOMS,
        second_watch_port=second_watch_port if two else None,
    )
