"""Several gateways behind one channel: a call no gateway answers at one address goes to the next.

:class:`FailoverChannel` is what the generated stubs are built on when a client or a worker is
given several gateway addresses (``a:50051,b:50051``, or ``--gateway`` repeated). It opens one
gRPC channel per address, lazily, and sends each call on the current one; when that gateway
cannot be reached (``UNAVAILABLE``: nothing listens, the connection broke, the gateway refuses
calls while NOT_SERVING) the call is sent again to the next address, and the first address that
answers becomes the current one. Any other status is the gateway's answer and is returned as is.

A call whose connection broke may have been carried out by the gateway that went away: calls
sent again must be safe to repeat. They are here: reads are, a task's Submit carries its task id
(the gateway refuses a second task with the same id, ``ALREADY_EXISTS``: see
:meth:`middleware.client.AgencyClient.submit`), Resume and Cancel check the task's state under its
lock, catalog registrations replace. Server streams fail over only before their first message.

One address that is a DNS name resolving to several is one gRPC channel: gRPC's own
``pick_first`` policy moves to the next resolved address when the connected one goes away.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import grpc

from ...errors import InvalidInput
from ..settings import ClientTlsConfig
from .channel import open_channel

__all__ = ["FailoverChannel", "gateway_channel", "resends", "split_addresses"]

log = logging.getLogger("agency.failover")

#: The addresses a call was sent to again, for the caller that asked (see :func:`resends`).
_resent: ContextVar[list[str] | None] = ContextVar("agency_resent", default=None)


@contextmanager
def resends() -> Iterator[list[str]]:
    """Within the block, the addresses calls of this task were sent to again (after the first)."""
    tried: list[str] = []
    token = _resent.set(tried)
    try:
        yield tried
    finally:
        _resent.reset(token)


def split_addresses(addresses: str | Sequence[str], *, field: str = "address") -> list[str]:
    """``"a:1,b:2"`` or ``["a:1", "b:2,c:3"]`` -> ``["a:1", "b:2", "c:3"]``, each ``host:port``.

    Raises:
        InvalidInput: none given, or one that is not ``host:port`` (naming ``field``).
    """
    parts = [addresses] if isinstance(addresses, str) else list(addresses)
    out: list[str] = []
    for part in parts:
        for address in part.split(","):
            address = address.strip()
            if not address:
                continue
            host, sep, port = address.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535 or " " in host:
                raise InvalidInput.single(
                    field, f"{address!r} is not host:port (e.g. 127.0.0.1:50051)", what="gateway addresses"
                )
            if address not in out:
                out.append(address)
    if not out:
        raise InvalidInput.single(field, "no gateway address given", what="gateway addresses")
    return out


def gateway_channel(
    addresses: str | Sequence[str],
    *,
    tls: ClientTlsConfig | None = None,
    token: str | None = None,
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.aio.Channel:
    """A channel to the gateway at ``addresses``: a plain gRPC channel for one address, a
    :class:`FailoverChannel` (typed as a channel: the stubs use it as one) for several."""
    listed = split_addresses(addresses)
    if len(listed) == 1:
        return open_channel(listed[0], tls=tls, token=token, options=options)
    failover: Any = FailoverChannel(listed, tls=tls, token=token, options=options)
    channel: grpc.aio.Channel = failover
    return channel


def _unreachable(exc: grpc.aio.AioRpcError) -> bool:
    """No gateway took the call there (or it went away during it): another may."""
    return exc.code() is grpc.StatusCode.UNAVAILABLE


class FailoverChannel:
    """A channel-like object over several gateway addresses (see the module docstring).

    Args:
        addresses: ``host:port`` of each gateway, tried in this order first.
        tls, token, options: As for :func:`~.channel.open_channel`, for every address.
    """

    def __init__(
        self,
        addresses: Sequence[str],
        *,
        tls: ClientTlsConfig | None = None,
        token: str | None = None,
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        if not addresses:
            raise ValueError("a failover channel needs at least one address")
        self.addresses = list(addresses)
        self.index = 0
        self.failovers = 0
        self._open: Callable[[str], grpc.aio.Channel] = lambda address: open_channel(
            address, tls=tls, token=token, options=options
        )
        self._channels: dict[int, grpc.aio.Channel] = {}

    @property
    def address(self) -> str:
        """The gateway calls go to now."""
        return self.addresses[self.index]

    def channel(self, index: int | None = None) -> grpc.aio.Channel:
        """The gRPC channel to address ``index`` (default: the current one), opened on first use."""
        index = self.index if index is None else index
        channel = self._channels.get(index)
        if channel is None:
            channel = self._channels[index] = self._open(self.addresses[index])
        return channel

    def _order(self) -> list[int]:
        n = len(self.addresses)
        return [(self.index + i) % n for i in range(n)]

    def _answered(self, index: int) -> None:
        if index != self.index:
            log.warning("gateway %s unreachable: calls go to %s", self.address, self.addresses[index])
            self.index = index
            self.failovers += 1

    def _resent(self, index: int) -> None:
        tried = _resent.get()
        if tried is not None:
            tried.append(self.addresses[index])

    # ----------------------------------------------------------- what stubs call
    def unary_unary(
        self,
        method: str,
        request_serializer: Any = None,
        response_deserializer: Any = None,
        _registered_method: bool | None = False,
    ) -> _UnaryUnary:
        return _UnaryUnary(self, method, request_serializer, response_deserializer)

    def unary_stream(
        self,
        method: str,
        request_serializer: Any = None,
        response_deserializer: Any = None,
        _registered_method: bool | None = False,
    ) -> _UnaryStream:
        return _UnaryStream(self, method, request_serializer, response_deserializer)

    def stream_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Client streams are not failed over: they go to the current gateway."""
        return self.channel().stream_unary(method, *args, **kwargs)

    def stream_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Bidirectional streams are not failed over: they go to the current gateway."""
        return self.channel().stream_stream(method, *args, **kwargs)

    # ----------------------------------------------------------- channel duties
    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        return self.channel().get_state(try_to_connect)

    async def wait_for_state_change(self, last_observed_state: grpc.ChannelConnectivity) -> None:
        await self.channel().wait_for_state_change(last_observed_state)

    async def channel_ready(self) -> None:
        await self.channel().channel_ready()

    async def close(self, grace: float | None = None) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close(grace)

    async def __aenter__(self) -> FailoverChannel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _Method:
    def __init__(self, owner: FailoverChannel, method: str, serializer: Any, deserializer: Any) -> None:
        self._owner = owner
        self._method = method
        self._serializer = serializer
        self._deserializer = deserializer
        self._calls: dict[int, Any] = {}

    def _call(self, index: int, kind: str) -> Any:
        call = self._calls.get(index)
        if call is None:
            make = getattr(self._owner.channel(index), kind)
            call = self._calls[index] = make(
                self._method,
                request_serializer=self._serializer,
                response_deserializer=self._deserializer,
            )
        return call


class _UnaryUnary(_Method):
    async def __call__(self, request: Any, **kwargs: Any) -> Any:
        owner = self._owner
        order = owner._order()
        for attempt, index in enumerate(order):
            if attempt:
                owner._resent(index)
            try:
                response = await self._call(index, "unary_unary")(request, **kwargs)
            except grpc.aio.AioRpcError as exc:
                if not _unreachable(exc) or attempt == len(order) - 1:
                    raise
                continue
            owner._answered(index)
            return response
        raise AssertionError("unreachable")  # pragma: no cover


class _UnaryStream(_Method):
    def __call__(self, request: Any, **kwargs: Any) -> _Stream:
        return _Stream(self, request, kwargs)


class _Stream:
    """A server stream that moves to the next gateway if the first message never comes."""

    def __init__(self, method: _UnaryStream, request: Any, kwargs: dict[str, Any]) -> None:
        self._method = method
        self._request = request
        self._kwargs = kwargs
        self._current: Any = None

    def cancel(self) -> bool:
        return bool(self._current.cancel()) if self._current is not None else False

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._items()

    async def _items(self) -> AsyncIterator[Any]:
        owner = self._method._owner
        order = owner._order()
        for attempt, index in enumerate(order):
            if attempt:
                owner._resent(index)
            self._current = self._method._call(index, "unary_stream")(self._request, **self._kwargs)
            started = False
            try:
                async for item in self._current:
                    if not started:
                        started = True
                        owner._answered(index)
                    yield item
                return
            except grpc.aio.AioRpcError as exc:
                if started or not _unreachable(exc) or attempt == len(order) - 1:
                    raise
