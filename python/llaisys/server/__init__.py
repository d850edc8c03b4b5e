"""The OpenAI-compatible HTTP server (Flask) over AsyncEngine, and the web page at /.

    llaisys serve [MODEL ...] [--host 127.0.0.1 --port 8000 ...]

app.create_app(ServerState) builds the WSGI app; serve.run_serve runs it. Importing this
package does not load a model or touch the native library.
"""

from .app import ServerState, create_app
from .protocol.errors import APIError

__all__ = ["APIError", "ServerState", "create_app"]
