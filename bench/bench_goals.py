"""Benchmark: contract JSON Schema checks and goal verification (``python -m bench.bench_goals``).

Prints, in one run, the compiled contract check against the plain ``jsonschema``
baseline (the same validator instance reused, and the old per-call path that
serialised the schema to find its cached validator), and goals verified per second
for a typical 5-step goal against a ~2 KB output. Targets: >= 100,000 schema
validations/s and >= 20,000 goals/s on one core.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import time
from collections.abc import Callable
from typing import Any

import jsonschema

from middleware.contracts import CapabilityContract
from middleware.errors import ContractViolation
from middleware.goals import GoalAssertion, Verifier

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["order_id", "status", "amount", "currency", "items", "customer"],
    "properties": {
        "order_id": {"type": "string", "pattern": "^ORD-[0-9]{6}$"},
        "status": {"enum": ["new", "paid", "shipped", "delivered", "refunded"]},
        "amount": {"type": "number", "minimum": 0},
        "currency": {"type": "string", "minLength": 3, "maxLength": 3},
        "items": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["sku", "qty", "price"],
                "properties": {
                    "sku": {"type": "string"},
                    "qty": {"type": "integer", "minimum": 1},
                    "price": {"type": "number", "minimum": 0},
                },
            },
        },
        "customer": {
            "type": "object",
            "required": ["id"],
            "properties": {"id": {"type": "string"}, "tier": {"type": "string"}},
        },
        "note": {"type": "string", "maxLength": 2000},
    },
    "additionalProperties": True,
}

OUTPUT: dict[str, Any] = {
    "order_id": "ORD-123456",
    "status": "shipped",
    "amount": 129.5,
    "currency": "EUR",
    "items": [{"sku": f"SKU-{i}", "qty": 1 + i % 3, "price": 9.5 + i} for i in range(3)],
    "customer": {"id": "u_789", "tier": "gold"},
}


def big_output() -> dict[str, Any]:
    """A ~2 KB output: a reply text plus structured fields."""
    reply = (
        "Hello, your screen replacement is approved. Your new PhoneX (model PhoneX) ships by express "
        "courier with tracking number EXP123456; expected delivery 2026-12-02. The replacement fee: "
        "free of charge. Thank you for your patience! "
    )
    out = {
        **OUTPUT,
        "items": [
            {"sku": f"SKU-{i}", "qty": 1, "price": 10.0 + i, "name": f"Part number {i}"} for i in range(19)
        ],
        "reply": reply * 3,
        "tracking_number": "EXP123456",
        "warranty": {"in_warranty": True, "fault_type": "screen_shattered", "fee": 0},
    }
    return out


GOAL = GoalAssertion.parse(
    {
        "id": "GOAL_WARRANTY_001",
        "description": "screen replacement under warranty",
        "verification_steps": [
            "output contains the tracking number",
            "output does not contain password",
            {"kind": "regex", "pattern": r"tracking number [A-Z]{3}\d{6}"},
            {"kind": "json_path", "path": "$.warranty.in_warranty", "equals": True},
            {"kind": "json_path", "path": "$.amount", "between": [0, 10_000]},
        ],
    }
)


def rate(fn: Callable[[], Any], seconds: float) -> float:
    """Calls per CPU second of ``fn`` over about ``seconds`` (after a warm-up).

    CPU time of this process (``time.process_time``), so a busy machine does not
    distort the per-core figure.
    """
    for _ in range(200):
        fn()
    n, batch = 0, 500
    start = time.process_time()
    while True:
        for _ in range(batch):
            fn()
        n += batch
        elapsed = time.process_time() - start
        if elapsed >= seconds:
            return n / elapsed


def old_check(schema: dict[str, Any], data: Any) -> None:
    """The previous dispatch path: serialise the schema to find the cached validator, iter_errors."""
    key = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    validator = _old_cache.get(key)
    if validator is None:
        cls = jsonschema.validators.validator_for(schema)
        validator = _old_cache[key] = cls(schema, format_checker=cls.FORMAT_CHECKER)
    errors = list(validator.iter_errors(data))
    if errors:
        raise ValueError(errors)


_old_cache: dict[str, Any] = {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    args = parser.parse_args(argv)
    s = args.seconds
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {os.cpu_count()} CPUs, load average {load:.1f} (figures are per CPU second)\n")

    from middleware.demo import CONTRACTS

    warranty = next(c for c in CONTRACTS if c.name == "warranty_agent")
    warranty_output = {"in_warranty": True, "fault_type": "screen_shattered", "fee": 0, "months": 0}
    orders = CapabilityContract(name="orders", can_do=["order_lookup"], output_schema=OUTPUT_SCHEMA)
    cases = [
        ("typical contract (demo warranty_agent: 3 typed fields)", warranty, warranty_output),
        ("rich contract (order: 7 fields, nested items array)", orders, OUTPUT),
    ]
    ok = True
    for title, contract, data in cases:
        cls = jsonschema.validators.validator_for(contract.output_schema)
        plain = cls(contract.output_schema, format_checker=cls.FORMAT_CHECKER)
        print(f"Contract JSON Schema check, {title}, valid output, one core")
        base = rate(lambda plain=plain, data=data: plain.validate(data), s)
        old = rate(lambda contract=contract, data=data: old_check(contract.output_schema, data), s)
        new = rate(lambda contract=contract, data=data: contract.check_output(data), s)
        print(f"  baseline jsonschema validate (reused validator) {base:>12,.0f} /s")
        print(f"  previous check_against_schema (dumps + iter)    {old:>12,.0f} /s")
        print(f"  compiled CapabilityContract.check_output        {new:>12,.0f} /s  ({new / base:.0f}x)")
        ok = ok and new >= 100_000
    bad = {**OUTPUT, "amount": -1}

    def failing() -> None:
        with contextlib.suppress(ContractViolation):
            orders.check_output(bad)

    print(f"  rich contract, invalid output (explained)       {rate(failing, s / 2):>12,.0f} /s")
    print(f"  target >= 100,000 /s: {'OK' if ok else 'MISSED'}")

    output = big_output()
    size = len(json.dumps(output, ensure_ascii=False, separators=(",", ":")))  # as the steps see it
    verifier = Verifier()
    assert verifier.verify_sync(GOAL, output).passed
    print(f"\nGoal verification (5 steps, {size:,} byte output, one core)")
    sync_rate = rate(lambda: verifier.verify_sync(GOAL, output), s)
    loop = asyncio.new_event_loop()

    async def many(n: int) -> None:
        for _ in range(n):
            await verifier.verify(GOAL, output)

    start = time.process_time()
    loop.run_until_complete(many(20_000))
    async_rate = 20_000 / (time.process_time() - start)
    loop.close()
    print(f"  Verifier.verify_sync                            {sync_rate:>12,.0f} goals/s")
    print(f"  await Verifier.verify (pipeline path)           {async_rate:>12,.0f} goals/s")
    print(f"  target >= 20,000 goals/s: {'OK' if min(sync_rate, async_rate) >= 20_000 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
