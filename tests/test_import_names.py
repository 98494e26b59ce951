"""The product claims one top-level import name, ``middleware``: an application's own ``handlers``
package (common in web apps) neither breaks ``Agency()`` nor is shadowed by the product.

The runs are subprocesses with a temporary directory holding the user's ``handlers/`` package
first on ``sys.path``, as an application's working directory would be.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

USER_HANDLERS = '"""The application\'s own handlers (HTTP views, say)."""\nUSER = True\n'

RUN_AGENCY = """
import asyncio, sys
import handlers
assert handlers.USER is True, handlers.__file__
from middleware import Agency
from middleware.failures import FailureEvent, FailureProcessor, FailureType
agency = Agency()
resolution = FailureProcessor().process(
    FailureEvent(type=FailureType.TOOL_TIMEOUT, task_id="t", trace_id="t", agent="a")
)
assert resolution.kind == "retry", resolution
assert sys.modules["handlers"] is handlers, "the product replaced the application's handlers"
print(sys.modules["middleware.handlers"].__file__)
"""


def user_app(tmp_path: Path) -> Path:
    app = tmp_path / "app"
    (app / "handlers").mkdir(parents=True)
    (app / "handlers" / "__init__.py").write_text(USER_HANDLERS)
    return app


def run(code: str, *, cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )


def test_an_application_handlers_package_first_on_the_path_does_not_break_agency(tmp_path: Path) -> None:
    app = user_app(tmp_path)
    done = run(RUN_AGENCY, cwd=app, pythonpath=app)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).parent == ROOT / "handlers"


def test_from_a_bare_source_checkout_the_handlers_folder_loads_as_middleware_handlers(
    tmp_path: Path,
) -> None:
    # At the repository root without the install's import hook (as a plain checkout on
    # PYTHONPATH would be), `middleware` comes from the folder and so must its handlers.
    app = user_app(tmp_path)
    no_hook = (
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in getattr(f, '__module__', '')]\n"
        f"sys.path[:0] = [{str(app)!r}, {str(ROOT)!r}]\n"
    )
    done = run(no_hook + RUN_AGENCY, cwd=ROOT, pythonpath=app)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).parent == ROOT / "handlers"


def test_the_product_installs_only_middleware_and_lists_every_package() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = set(config["packages"])
    assert {p.split(".")[0] for p in packages} == {"middleware"}
    assert config["package-dir"] == {"middleware.handlers": "handlers"}
    on_disk = {
        ".".join(d.relative_to(ROOT).parts)
        for d in (ROOT / "middleware").rglob("*")
        if d.is_dir() and d.name != "__pycache__" and _holds_files(d)
    } | {"middleware", "middleware.handlers"}
    assert packages == on_disk


def test_the_server_side_modules_live_only_in_server() -> None:
    # The tree shows the layers: no server-side module (or alias of one) at the top of the package.
    import importlib

    for old in (
        "config",
        "definition",
        "bootstrap",
        "backends",
        "metrics",
        "worker",
        "grpc_api",
        "console",
        "protocols",
        "remote_agent",
        "tracing",
        "log_format",
        "event_loop",
        "protocol_settings",
        "messaging_client",
    ):
        if (ROOT / "middleware" / old).is_dir() and not _holds_files(ROOT / "middleware" / old):
            continue  # only the bytecode of an earlier checkout: git left the empty folder
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"middleware.{old}")


def _holds_files(folder: Path) -> bool:
    """True if ``folder`` holds a file outside ``__pycache__`` (a checkout's stale folders do not)."""
    return any(f.is_file() and "__pycache__" not in f.parts for f in folder.rglob("*"))


def test_the_settings_do_not_import_the_definition() -> None:
    # settings (the environment reader) <- definition, not both ways: definition_from and
    # load_definition live in definition and stay importable from settings/config on first use.
    code = (
        "import sys, middleware.server.settings as s\n"
        "assert 'middleware.server.definition' not in sys.modules\n"
        "import middleware.server.definition as d\n"
        "assert s.definition_from is d.definition_from and s.load_definition is d.load_definition\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_in_the_core_and_the_server_only_the_settings_read_the_environment() -> None:
    # The one-reader rule (docs/architecture.md): a module that reads os.environ or getenv
    # beside server/settings.py takes configuration the definition file cannot see.
    package = Path(__file__).resolve().parents[1] / "middleware"
    edges = {"cli", "client", "_proto"}  # the command and the client read their own defaults
    passes_it_on = {"audit/segment_pool.py"}  # hands the environment to its worker processes
    # AGENCY_PURE_PYTHON picks which code runs (compiled or pure Python), not how it is
    # configured: read at import, in every process, before any settings exist.
    passes_it_on.add("audit/native.py")
    readers = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if path.relative_to(package).parts[0] not in edges
        and str(path.relative_to(package)) not in passes_it_on
        and re.search(r"os\.environ|getenv\(", path.read_text(encoding="utf-8"))
    )
    assert readers == ["server/settings.py"]
