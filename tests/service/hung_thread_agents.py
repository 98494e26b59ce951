"""An agent module that leaves a thread running forever (as a careless agent or library does).

Importing it starts a non-daemon thread that never ends: without a bound on the exit, a
gateway that loaded it would stop serving but never exit.
"""

from __future__ import annotations

import threading
from typing import Any

from middleware import AgentRequest

_never = threading.Event()
threading.Thread(target=_never.wait, name="left-running", daemon=False).start()


async def steady(request: AgentRequest) -> Any:
    """Always answers."""
    return {"done": True}
