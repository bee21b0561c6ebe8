"""ProxAI's benchmark suite: proxy vs direct for every protocol pair, and the engine alone.

Run it with `python -m bench` (see bench/README.md).
"""
