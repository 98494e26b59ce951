"""The gRPC transport: thin servicers over the async core.

``status.py`` is the one place that maps :mod:`middleware.errors` to gRPC status
codes; ``convert.py`` turns protobuf messages into core models and back, so no
protobuf type reaches the core; ``server.py`` builds the server (reflection and
health included).
"""

from .server import GrpcServer, build_server

__all__ = ["GrpcServer", "build_server"]
