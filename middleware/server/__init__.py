"""The deployable server: settings (the only reader of files and ``AGENCY_*`` variables),
the definition file, the backends chosen in one place (:mod:`.backends`, :mod:`.bootstrap`),
metrics and the remote worker runtime.

The gRPC servicers and channels are in :mod:`middleware.grpc_api`, the command line in
:mod:`middleware.cli`. The former module paths (``middleware.config``, ``middleware.definition``,
``middleware.bootstrap``, ``middleware.backends``, ``middleware.metrics``, ``middleware.worker``)
still import: each is the same module object as its new home here.
"""
