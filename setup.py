"""The compiled part of the audit log (``middleware.audit._native``); everything else is in pyproject.toml.

The extension is optional: without a C compiler or OpenSSL's headers (``libssl-dev``) the
build skips it with a warning and the package installs and runs as pure Python (the same
bytes, slower; ``middleware/audit/native.py`` picks the implementation, and
``AGENCY_PURE_PYTHON=1`` forces pure Python). See docs/audit-log.md, "The compiled part".
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "middleware.audit._native",
            ["middleware/audit/_native.c"],
            libraries=["crypto"],  # SHA-256 from OpenSSL's libcrypto (as Python's hashlib)
            # OpenSSL 3 marks the SHA256_Init/Update/Final calls deprecated; they are its fastest path.
            extra_compile_args=["-Wno-deprecated-declarations"],
            optional=True,
        )
    ]
)
