"""Run the ProxAI server: python server.py [--config FILE] [--host H] [--port P] [--log-level L]."""

import sys

from proxai.tools.cli import serve_main

if __name__ == "__main__":
    sys.exit(serve_main(sys.argv[1:]))
