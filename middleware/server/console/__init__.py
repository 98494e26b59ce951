"""The operator console: a web application for the people of the agency (see docs/console.md).

Server-rendered pages (Starlette + Jinja2, no front-end build) over the human desk:
sign-in, inbox, tasks, contracts, audit. :func:`build_app` makes the ASGI app;
:class:`ConsoleServer` serves it inside the gateway process on its own port.
"""

from .app import build_app
from .server import ConsoleServer

__all__ = ["ConsoleServer", "build_app"]
