"""Helpers shared by the codec tests."""


def strip_paths(value):
    """IR without the engine's `_path` annotations (the client's wire path of each item)."""
    if isinstance(value, dict):
        return {k: strip_paths(v) for k, v in value.items() if k != "_path"}
    if isinstance(value, list):
        return [strip_paths(v) for v in value]
    return value
