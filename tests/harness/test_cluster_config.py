"""What the cluster harness writes into each node's config (nothing started)."""

from __future__ import annotations

from alicia.harness.cluster import RELAY_RETRY_TIMEOUT_S, LiveKitCluster


def test_each_node_gives_up_relaying_a_signal_after_the_cluster_s_timeout() -> None:
    cluster = LiveKitCluster(2, webhooks=["http://127.0.0.1:9/webhook"])
    for node in cluster.nodes:
        text = node.config_text()
        assert f"redis:\n  address: {cluster.redis.address}\n" in text
        assert f"signal_relay:\n  retry_timeout: {RELAY_RETRY_TIMEOUT_S * 1000:.0f}ms\n" in text
    assert RELAY_RETRY_TIMEOUT_S < 7.5  # livekit-server's own


def test_without_a_timeout_the_nodes_keep_livekit_server_s_own() -> None:
    cluster = LiveKitCluster(2, relay_retry_timeout_s=None)
    assert all("signal_relay" not in node.config_text() for node in cluster.nodes)
