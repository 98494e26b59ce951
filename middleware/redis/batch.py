"""Batches: Redis commands and scripts sent in one round trip (a non-transactional pipeline).

redis-py runs a script queued in a pipeline after a ``SCRIPT EXISTS`` round trip on every
execute (``Pipeline.load_scripts``), which doubles the round trips of a pipeline of scripts. A
:class:`Batch` queues scripts by ``EVALSHA`` instead; only when Redis answers ``NOSCRIPT`` (a
restarted or flushed server, a new cluster node) does it load the script and send again the
commands that failed so (never those that ran: no command runs twice).

A batch may mix keys of several hash slots (a cluster client splits it by node); each script in
it keeps to one slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoScriptError

__all__ = ["Batch"]


class Batch:
    """Commands queued for one round trip; :meth:`run` answers their replies in order."""

    def __init__(self) -> None:
        self._queued: list[tuple[Any, str, tuple[Any, ...], dict[str, Any]]] = []

    def script(self, script: Any, keys: Sequence[str], args: Sequence[Any]) -> int:
        """Queue a registered script (``client.register_script``); returns its reply's index."""
        self._queued.append((script, "evalsha", (len(keys), *keys, *args), {}))
        return len(self._queued) - 1

    def command(self, name: str, *args: Any, **kwargs: Any) -> int:
        """Queue ``name`` (a redis-py command method, e.g. ``"zadd"``); returns its reply's index."""
        self._queued.append((None, name, args, kwargs))
        return len(self._queued) - 1

    async def run(self, client: Any) -> list[Any]:
        """Send every queued command in one round trip (two when a script had to be loaded).

        Raises:
            RedisError: the first error reply, or the connection's (after every command was sent).
        """
        results = await self._send(client, range(len(self._queued)))
        missing = [i for i, r in enumerate(results) if isinstance(r, NoScriptError)]
        if missing:
            for script in {id(self._queued[i][0]): self._queued[i][0] for i in missing}.values():
                script.sha = await client.script_load(script.script)
            for i, reply in zip(missing, await self._send(client, missing), strict=True):
                results[i] = reply
        for reply in results:
            if isinstance(reply, Exception):
                raise reply
        return results

    async def _send(self, client: Any, indexes: Sequence[int]) -> list[Any]:
        pipe = client.pipeline(transaction=False)
        for i in indexes:
            script, name, args, kwargs = self._queued[i]
            if script is not None:  # as a command: a cluster pipeline refuses the evalsha() method
                pipe.execute_command("EVALSHA", script.sha, *args)
            else:
                getattr(pipe, name)(*args, **kwargs)
        return list(await pipe.execute(raise_on_error=False))
