"""End to end failover: watcher, leases, workers killed, stopped and replaced."""
