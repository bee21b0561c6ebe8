"""Routing and resilience: the config, routes, pools, balancing, the breaker, retries, client keys and limits."""
