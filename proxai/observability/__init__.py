"""Observability: the request log, metrics, tracing, capture and the inspector."""
