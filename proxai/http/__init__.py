"""The HTTP front: the aiohttp app, request serving, streams, the upstream transport, error answers and the tools the proxy runs itself."""
