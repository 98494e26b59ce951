"""The deployable server: settings (the only reader of files and ``AGENCY_*`` variables),
the definition file, the backends chosen in one place (:mod:`.backends`, :mod:`.bootstrap`),
metrics and the remote worker runtime.

Beside them, the transports and services of the server: the gRPC servicers, channels and TLS
(:mod:`.grpc_api`), the gRPC client of remote workers (:mod:`.remote_agent`), tracing, log
format, the event loop, the operator console (:mod:`.console`) and the A2A/MCP bindings
(:mod:`.protocols`, :mod:`.protocol_settings`). The command line is :mod:`middleware.cli`.
"""
