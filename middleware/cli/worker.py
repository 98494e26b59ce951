"""``agency worker``: serve one agent over gRPC and register it at a gateway."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from ..errors import InvalidInput, Problem
from ..server.settings import WORKER_TOKEN_VARIABLE, WorkerConfig, read_token

#: The flag that sets each field of :class:`WorkerConfig`, for error messages.
_FLAGS = {
    "gateway_tls": "--gateway-cert/--gateway-key",
    "gateway_tls.ca": "--gateway-ca",
    "gateway_tls.cert": "--gateway-cert",
    "gateway_tls.key": "--gateway-key",
    "gateway_tls.server_name": "--gateway-server-name",
    "token_file": "--token-file",
    "token": WORKER_TOKEN_VARIABLE,
    "tls": "--tls-cert/--tls-key/--tls-client-ca",
    "tls.cert": "--tls-cert",
    "tls.key": "--tls-key",
    "tls.client_ca": "--tls-client-ca",
}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "worker",
        help="serve an agent (e.g. a wrapped LangChain runnable) to a gateway over gRPC",
        description="Serve the agent named by --agent as agency.v1.AgentWorker, register its contract "
        "(with this worker's address as endpoint) in the gateway's catalog, heartbeat, and deregister "
        "on SIGTERM/SIGINT. The attribute may be a wrapped agent carrying its contract (a LangChainAgent), "
        "a LangChain Runnable (wrapped for you; needs --contract), or any agent callable with --contract. "
        "Security, both ways: --gateway-ca (with --gateway-cert/--gateway-key for mutual TLS) to call a "
        "gateway that serves TLS; --token-file (or the AGENCY_WORKER_TOKEN variable) for a gateway that "
        "requires bearer tokens: this agent's own token, whose hash the gateway's token file lists under "
        "the agent's name (never give a token on the command line: it shows in ps); --tls-cert/--tls-key "
        "(with --tls-client-ca for mutual TLS) to serve the gateway's calls over TLS, the same semantics "
        "as 'agency serve'. The gateway then needs workers.tls in its definition (or AGENCY_WORKERS_TLS_*).",
    )
    p.add_argument("--agent", required=True, metavar="MODULE:ATTRIBUTE", help="e.g. myapp.agents:faq_agent")
    p.add_argument(
        "--gateway",
        required=True,
        action="append",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="the gateway's gRPC address; several gateways of one fleet (repeat it, or a comma list, "
        "or a DNS name resolving to several): the worker registers and heartbeats through any live "
        "one, so its agent stays routable when one dies",
    )
    p.add_argument(
        "--address",
        default="127.0.0.1:0",
        metavar="HOST:PORT",
        help="where to listen (default: any free port)",
    )
    p.add_argument(
        "--advertise", metavar="HOST:PORT", help="the address the gateway should call, if different"
    )
    p.add_argument(
        "--contract", type=Path, metavar="FILE", help="contract as JSON or YAML (overrides the agent's)"
    )
    p.add_argument("--heartbeat", type=float, default=5.0, metavar="SECONDS", help="heartbeat interval (5)")
    to_gateway = p.add_argument_group("calling the gateway")
    to_gateway.add_argument(
        "--gateway-ca",
        type=Path,
        metavar="FILE",
        help="PEM CA that signs the gateway's certificate: call it over TLS",
    )
    to_gateway.add_argument(
        "--gateway-cert",
        type=Path,
        metavar="FILE",
        help="PEM client certificate of this worker, for a gateway requiring mutual TLS",
    )
    to_gateway.add_argument(
        "--gateway-key", type=Path, metavar="FILE", help="PEM private key of --gateway-cert"
    )
    to_gateway.add_argument(
        "--gateway-server-name",
        metavar="NAME",
        help="the name in the gateway's certificate, if not --gateway's host",
    )
    to_gateway.add_argument(
        "--gateway-tls",
        action="store_true",
        help="call the gateway over TLS trusting the system CAs (implied by the --gateway-* options)",
    )
    to_gateway.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help=f"file holding this agent's bearer token for the gateway (default: ${WORKER_TOKEN_VARIABLE})",
    )
    serving = p.add_argument_group("serving the gateway's calls")
    serving.add_argument(
        "--tls-cert",
        type=Path,
        metavar="FILE",
        help="PEM server certificate chain: serve TLS (issued for the agent's name: the gateway "
        "checks it, workers.tls.verify_agent_identity)",
    )
    serving.add_argument(
        "--tls-key", type=Path, metavar="FILE", help="PEM server private key (with --tls-cert)"
    )
    serving.add_argument(
        "--tls-client-ca",
        type=Path,
        metavar="FILE",
        help="PEM CA of client certificates: only a gateway presenting one gets through (mutual TLS)",
    )
    serving.add_argument(
        "--gateway-token-file",
        type=Path,
        metavar="FILE",
        help="file holding the gateway's bearer token for its workers (its workers.token_file): "
        "calls without it are refused (UNAUTHENTICATED)",
    )
    p.add_argument(
        "--audit-dir",
        type=Path,
        help="write a wrapped LangChain agent's inner steps to an audit log here: the same signed "
        "write-ahead log as the gateway's, under DIR/worker-<contract name> ('agency audit export|verify' "
        "read it; export it with the gateway's log to join them on the trace id)",
    )
    p.add_argument(
        "--tracing",
        choices=["off", "console", "otlp"],
        default="off",
        help="export OpenTelemetry spans, each call a child of the gateway's task span "
        "(needs agency-middleware[otel]; default off: the trace context is still passed to the agent)",
    )
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    security = worker_config(args)
    agent, contract = load_agent(args.agent, args.contract)
    return asyncio.run(_serve(args, agent, contract, security))


def worker_config(args: argparse.Namespace, env: dict[str, str] | None = None) -> WorkerConfig:
    """The security flags as a :class:`WorkerConfig` (the token from the file or the environment).

    Raises:
        InvalidInput: naming the flag of each problem (a missing or unreadable file, a key
            that is not the certificate's, an empty token file ...).
    """
    gateway_tls: dict[str, Any] | None = None
    given = {"ca": args.gateway_ca, "cert": args.gateway_cert, "key": args.gateway_key}
    if args.gateway_tls or args.gateway_server_name or any(v is not None for v in given.values()):
        gateway_tls = {k: v for k, v in given.items() if v is not None}
        gateway_tls["server_name"] = args.gateway_server_name or ""
    tls: dict[str, Any] | None = None
    served = {"cert": args.tls_cert, "key": args.tls_key, "client_ca": args.tls_client_ca}
    if any(v is not None for v in served.values()):
        tls = {k: v for k, v in served.items() if v is not None}
        tls["require_client_cert"] = args.tls_client_ca is not None
    try:
        return WorkerConfig.from_env(env, token_file=args.token_file, gateway_tls=gateway_tls, tls=tls)
    except InvalidInput as exc:
        problems = [Problem(_FLAGS.get(p.field, p.field), p.reason) for p in exc.problems]
        raise InvalidInput(problems, what="agency worker options") from None


async def _serve(args: argparse.Namespace, agent: Any, contract: Any, security: WorkerConfig) -> int:
    from ..server.worker import Worker

    audit = None
    if args.audit_dir is not None and hasattr(agent, "audit") and agent.audit is None:
        audit = agent.audit = worker_audit_log(args.audit_dir, agent, contract)
    tracing = None
    if args.tracing != "off":
        from ..server.tracing import Tracing

        tracing = Tracing.with_exporter(args.tracing, service_name="agency-worker")
    gateway_token = None
    if args.gateway_token_file is not None:
        gateway_token = read_token(args.gateway_token_file, field="--gateway-token-file")
    worker = Worker(
        agent,
        contract,
        gateway=args.gateway,
        address=args.address,
        advertise=args.advertise,
        heartbeat_interval=args.heartbeat,
        tracing=tracing,
        gateway_tls=security.gateway_tls,
        token=security.bearer_token(),
        tls=security.tls,
        gateway_token=gateway_token,
    )
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(worker.run(stop, ready=ready))
    try:
        waiter = asyncio.create_task(ready.wait())
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if task.done():
            await task  # re-raises what stopped it (gateway unreachable, contract refused)
            return 1
        to_gateway = "plaintext" if security.gateway_tls is None else "TLS"
        if security.gateway_tls is not None and security.gateway_tls.cert is not None:
            to_gateway = "mTLS"
        if security.token is not None:
            to_gateway += ", token"
        print(
            f"agency: worker {worker.key} serving on {worker.endpoint} ({worker.scheme}), "
            f"registered at {worker.gateway} ({to_gateway})",
            flush=True,
        )
        await task
    finally:
        stop.set()
        if not task.done():
            await task
        if audit is not None:
            await audit.close()
        if tracing is not None:
            tracing.shutdown()  # flushes the spans still batched
    print(f"agency: worker {worker.key} deregistered and stopped", flush=True)
    return 0


def worker_audit_log(directory: Path, agent: Any, contract: Any) -> Any:
    """The worker's audit log: a :class:`~middleware.audit.WalAuditLog` (segments, signed
    checkpoints) of node ``worker-<contract name>`` under ``directory``.

    Raises:
        InvalidInput: no contract names the agent.
        AuditError: another process holds that log.
    """
    from ..audit import WalAuditLog

    named = contract if contract is not None else getattr(agent, "contract", None)
    if named is None:
        raise InvalidInput.single("--contract", "required with --audit-dir: it names the worker's log")
    return WalAuditLog(directory, f"worker-{named.name}")


def load_agent(spec: str, contract_file: Path | None = None) -> tuple[Any, Any]:
    """Import ``module:attribute`` and return ``(agent, contract or None)``.

    Raises:
        InvalidInput: the spec, the module, the attribute or the contract file is wrong.
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise InvalidInput.single(
            "--agent", f"{spec!r} is not MODULE:ATTRIBUTE (e.g. myapp.agents:faq_agent)"
        )
    if os.getcwd() not in sys.path:  # like uvicorn: modules next to where you run the command
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidInput.single("--agent", f"cannot import {module_name!r}: {exc}") from None
    agent: Any = module
    for part in attribute.split("."):
        try:
            agent = getattr(agent, part)
        except AttributeError:
            raise InvalidInput.single("--agent", f"{module_name!r} has no attribute {attribute!r}") from None
    contract = _read_contract(contract_file) if contract_file else getattr(agent, "contract", None)
    if _is_runnable(agent):
        if contract is None:
            raise InvalidInput.single("--contract", f"{spec} is a LangChain Runnable: give its contract file")
        from ..langchain import wrap_runnable

        agent = wrap_runnable(agent, contract)
        contract = agent.contract
    if contract is None:
        raise InvalidInput.single("--contract", f"{spec} carries no .contract: give a contract file")
    if not callable(agent):
        raise InvalidInput.single("--agent", f"{spec} is a {type(agent).__name__}, not an agent callable")
    return agent, contract


def _read_contract(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput.single("--contract", f"cannot read {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text) if path.suffix.lower() in (".yaml", ".yml") else json.loads(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise InvalidInput.single("--contract", f"{path} does not parse: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidInput.single("--contract", f"{path} must hold one contract object")
    return data


def _is_runnable(obj: Any) -> bool:
    if "langchain_core" not in sys.modules:
        return False  # a Runnable's module would have imported it
    from langchain_core.runnables import Runnable

    return isinstance(obj, Runnable)
