"""The watcher: brings an agent back to every room that still has clients (failover).

``python -m alicia.agent.watch`` receives livekit-server webhooks and polls RoomService
and the workers' leases; see :mod:`.watcher` for the rule and :mod:`.app` for the
webhook endpoint.
"""
