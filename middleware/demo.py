"""The reference scenario from the seed (section 4): a shattered phone screen.

The cast of section 4.2, each with its contract and SLO:

* L1 ``greeting_agent`` reads the user's sentence ("我上周买的手机屏幕碎了，要换新"),
  extracts the intent and the context (``user_id``, ``device_model``, ``fault_type``,
  ``purchase_date``) and anchors ``GOAL_WARRANTY_001`` itself (its contract may
  ``anchor_goal``; see ``middleware.intake``). The client sends only what the user said.
* L2 the orchestrator: the pipeline plays it (routing, state, failure handling,
  verification); it is not an agent of its own. It runs the goal's own plan
  (``WARRANTY_PLAN``: order, warranty, shipping, reply, each step's input mapped from the
  request, the context and earlier outputs) once the greeting agent anchored the goal.
* L3 ``order_agent`` (can_do get_order_detail, cancel_order; cannot_do issue_refund),
  ``logistics_agent``, ``warranty_agent``.
* L4 ``refund_executor``, ``replacement_shipper``, ``express_shipper`` (SLA < 2 s).

``GOAL_WARRANTY_001`` carries the seed's own three sentences: the first two are checked
as soon as the warranty agent answers (a stage, the seed's "progressive verification",
section 5.2 tip 3), the third on the reply. The happy path: the replacement shipper
times out, is retried, still times out; the backup express shipper succeeds; the reply
(in the user's language) gives the model, delivery estimate and fee; the goal passes.
A claim for accidental damage, or for a phone bought 14 months ago, fails the goal at
the eligibility stage and goes to a human with the failure explained and a suggested
reply in the user's language. A request no contract allows ("predict next quarter's
stock price") is refused before any agent runs.

All agents are deterministic scripted Python agents; no LLM is needed.
"""

from __future__ import annotations

import calendar
import re
import time
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

from .agency_config import AgencyConfig
from .agents import AgentReply, AgentRequest
from .contracts import CapabilityContract
from .goals import GoalAssertion, GoalStage, IntentionScope
from .goals.dates import add_period
from .intake import detect_language
from .pipeline import Agency
from .plans import Plan, PlanStep
from .reliability import ReliabilityConfig
from .smf import Provenance, utcnow
from .tasks import TaskRequest, TaskStep
from .testing import Hang, ScriptedAgent

__all__ = [
    "CONTRACTS",
    "DEMO_RELIABILITY",
    "SEED_VERIFICATION_STEPS",
    "WARRANTY_GOAL",
    "WARRANTY_PLAN",
    "WARRANTY_STEPS",
    "build_demo_agency",
    "clock_on",
    "demo_agent",
    "demo_agents",
    "demo_config",
    "drifting_request",
    "failing_claim_request",
    "months_before",
    "refused_request",
    "tracking_request",
    "warranty_request",
]

#: The seed's own verification sentences (section 4.3), as written.
SEED_VERIFICATION_STEPS = [
    "检查用户是否在保修期内（购机≤12个月）",
    "确认故障类型为屏幕碎裂且非人为损坏",
    "输出更换机型、预计送达时间、是否收取费用",
]

_USER = ["context.user_id", "request.user_id", "task.user_id"]
_MODEL = ["context.device_model", "request.device_model", "steps.order.device_model"]
_LANGUAGE = {"refs": ["context.language", "task.language"], "optional": True}

#: The goal's plan (the seed's section 4.3 flow): the order system first (it knows what the user
#: bought and when), then the warranty check (the eligibility stage), the replacement, the reply.
#: Each step gets only the fields its contract needs, from the context the greeting agent
#: extracted, the request and the earlier outputs.
WARRANTY_PLAN = Plan(
    steps=[
        PlanStep(
            name="order",
            action="get_order_detail",
            input={
                "user_id": _USER,
                "device_model": {"refs": ["context.device_model", "request.device_model"], "optional": True},
                # what the customer said: the order system falls back on it when it has no order
                "purchase_date": {"refs": ["context.purchase_date"], "optional": True},
            },
        ),
        PlanStep(
            name="warranty",
            action="warranty_check",
            input={
                "user_id": _USER,
                "device_model": _MODEL,
                "fault_type": "context.fault_type",
                "accidental": "context.accidental",
                "purchase_date": {"refs": ["context.purchase_date"], "optional": True},
                "order": "steps.order",
            },
            # a task that named the goal itself (no intake ran): the greeting agent reads the
            # user's words for what is missing before anyone asks the user
            supplied_by="extract_intent",
        ),
        PlanStep(
            name="shipping",
            action="ship_replacement",
            input={"warranty": "steps.warranty", "order": "steps.order", "language": _LANGUAGE},
        ),
        PlanStep(
            name="reply",
            action="compose_reply",
            input={
                "shipping": "steps.shipping",
                "warranty": "steps.warranty",
                "device_model": _MODEL,
                "language": _LANGUAGE,
            },
        ),
    ]
)

WARRANTY_GOAL = GoalAssertion(
    id="GOAL_WARRANTY_001",
    description="为用户提供符合保修条款的屏幕更换服务",
    stages=[
        GoalStage(
            name="eligibility",
            step="warranty",
            description="the claim is covered: bought within 12 months, a shattered screen, not accidental",
            verification_steps=SEED_VERIFICATION_STEPS[:2],
        )
    ],
    verification_steps=SEED_VERIFICATION_STEPS[2:],
    timeout_seconds=180,
    criticality="high",
    intention_scope=IntentionScope(
        actions=[
            "extract_intent",
            "get_order_detail",
            "warranty_check",
            "ship_replacement",
            "track_shipment",
            "compose_reply",
        ],
        forbidden_fields=["freight_quote", "freight_fee"],
    ),
    plan=WARRANTY_PLAN,
)

#: The authority of the scenario's sources (the definition file's ``agency.reliability``).
DEMO_RELIABILITY = ReliabilityConfig(
    authority={
        "warranty_db": 0.95,
        "orders_db": 0.95,
        "express_api": 0.85,
        "greeting_agent": 0.8,
        "freight_tariffs": 0.7,
        "blog:*": 0.4,
    },
    default_authority=0.5,
)


def demo_config() -> AgencyConfig:
    """The scenario's core configuration (its authority table)."""
    return AgencyConfig(reliability=DEMO_RELIABILITY)


#: The steps of a warranty request as a client would send them (before goals owned their plans;
#: the gateway now runs ``WARRANTY_PLAN`` when the client sends none).
WARRANTY_STEPS = [
    TaskStep(name="intake", action="extract_intent"),
    TaskStep(name="order", action="get_order_detail"),
    TaskStep(name="warranty", action="warranty_check"),
    TaskStep(name="shipping", action="ship_replacement"),
    TaskStep(name="reply", action="compose_reply"),
]

_SHIPMENT = {
    "type": "object",
    "required": ["tracking_number", "carrier", "estimated_delivery"],
    "properties": {
        "tracking_number": {"type": "string", "pattern": "^[A-Z]{3}[0-9]{6}$"},
        "carrier": {"type": "string"},
        "estimated_delivery": {"type": "string"},
    },
}
_CUSTOMER = {
    "type": "object",
    "required": ["user_id", "device_model"],
    "properties": {"user_id": {"type": "string"}, "device_model": {"type": "string"}},
}
#: The order system finds the user's order by user id (the device model narrows it when known).
_ORDER_QUERY = {
    "type": "object",
    "required": ["user_id"],
    "properties": {"user_id": {"type": "string"}, "device_model": {"type": "string"}},
}

CONTRACTS = [
    CapabilityContract(
        name="greeting_agent",
        version="1.0.0",
        tags=["greeting", "customer_service"],
        slo_latency_ms=500,
        can_do=["extract_intent", "anchor_goal"],
        cannot_do=["issue_refund", "cancel_order"],
        description="L1: reads the user's sentence, anchors the goal, collects the context.",
        input_schema={
            "type": "object",
            "required": ["user_id"],
            "properties": {"user_id": {"type": "string"}},
        },
        output_schema={
            "type": "object",
            "required": ["intent", "context"],
            "properties": {"intent": {"type": "string"}, "context": {"type": "object"}},
        },
    ),
    CapabilityContract(
        name="order_agent",
        version="1.0.0",
        tags=["order"],
        slo_latency_ms=800,
        can_do=["get_order_detail", "cancel_order"],
        cannot_do=["issue_refund"],
        description="L3: order details (purchase date, model) and cancellations.",
        input_schema=_ORDER_QUERY,
        output_schema={
            "type": "object",
            "required": ["order_id", "purchase_date"],
            "properties": {"order_id": {"type": "string"}, "purchase_date": {"type": "string"}},
        },
    ),
    CapabilityContract(
        name="logistics_agent",
        version="1.0.0",
        tags=["logistics"],
        slo_latency_ms=800,
        can_do=["track_shipment", "quote_freight"],
        cannot_do=["issue_refund"],
        description="L3: shipment tracking and freight quotes.",
    ),
    CapabilityContract(
        name="warranty_agent",
        version="2.1.0",
        tags=["warranty", "phone_repair"],
        slo_latency_ms=1200,
        can_do=["warranty_check", "warranty_claim"],
        cannot_do=["issue_refund"],
        description="L3: checks warranty eligibility, the fault type and the damage cause.",
        input_schema=_CUSTOMER,
        output_schema={
            "type": "object",
            "required": ["in_warranty", "fault_type", "fee", "purchase_date", "accidental"],
            "properties": {
                "in_warranty": {"type": "boolean"},
                "fault_type": {"type": "string"},
                "fee": {"type": "number", "minimum": 0},
                "purchase_date": {"type": "string"},
                "accidental": {"type": "boolean"},
            },
        },
    ),
    CapabilityContract(
        name="refund_executor",
        version="1.0.0",
        tags=["payment", "finance"],
        slo_latency_ms=2000,
        can_do=["issue_refund"],
        description="L4: executes refunds (atomic; time-critical finance data).",
        output_schema={"type": "object", "required": ["refund_id"]},
    ),
    CapabilityContract(
        name="replacement_shipper",
        version="1.0.0",
        tags=["logistics", "shipping"],
        slo_latency_ms=150,
        can_do=["ship_replacement"],
        description="L4: ships replacement devices (standard).",
        input_schema={"type": "object", "required": ["warranty"]},
        output_schema=_SHIPMENT,
    ),
    CapabilityContract(
        name="express_shipper",
        version="1.0.0",
        tags=["logistics", "shipping", "express"],
        slo_latency_ms=400,
        can_do=["ship_replacement"],
        description="L4: backup express courier.",
        input_schema={"type": "object", "required": ["warranty"]},
        output_schema=_SHIPMENT,
    ),
    CapabilityContract(
        name="reply_agent",
        version="1.0.0",
        tags=["customer_service"],
        slo_latency_ms=500,
        can_do=["compose_reply"],
        description="Composes the reply to the user, in the user's language.",
        output_schema={"type": "object", "required": ["reply"], "properties": {"reply": {"type": "string"}}},
    ),
    CapabilityContract(
        name="financial_calculator",
        version="1.0.0",
        tags=["finance"],
        slo_latency_ms=300,
        can_do=["compound_interest", "amortization_schedule"],
        cannot_do=["stock_prediction", "tax_filing"],
        input_schema={
            "type": "object",
            "properties": {"principal": {"type": "number"}, "rate": {"type": "number"}},
        },
        output_schema={
            "type": "object",
            "properties": {"monthly_payment": {"type": "number"}, "total_interest": {"type": "number"}},
        },
    ),
]


#: The scenario's clock: the current time (the demo's ``--today`` and the tests inject one).
Clock = Callable[[], datetime]


def clock_on(day: date) -> Clock:
    """A clock that reads noon UTC on ``day`` when made and moves on with real time (the demo
    told as on another date: the agents' dates and the goal's date checks follow it)."""
    start, origin = datetime(day.year, day.month, day.day, 12, tzinfo=UTC), time.monotonic()
    return lambda: start + timedelta(seconds=time.monotonic() - origin)


def months_before(day: date, months: int) -> date:
    """``day`` moved back by whole calendar months, clamped to the month's last day
    (31 March minus one month is 28 or 29 February)."""
    year, month = divmod(day.month - 1 - months, 12)
    year, month = day.year + year, month + 1
    return date(year, month, min(day.day, calendar.monthrange(year, month)[1]))


def _months_between(earlier: date, later: date) -> int:
    return (later.year - earlier.year) * 12 + later.month - earlier.month - (later.day < earlier.day)


#: Device fingerprints the shop knows (the L1 contract's input: user id and device fingerprint).
_DEVICES = {"fp_7f3a": "PhoneX", "fp_19c2": "PhoneX"}
#: The order system: the purchase of each demo user, relative to today, and the model bought.
_ORDERS = {  # (order id, months ago, days ago, model)
    "u_789": ("ORD-20481", 0, 7, "PhoneX"),
    "u_456": ("ORD-17730", 14, 0, "PhoneX"),
}


def _greeting(request: AgentRequest, today: date) -> AgentReply:
    """L1: intent and context from the sentence (rules; an LLM would do this in production)."""
    text, data = request.text, request.input
    language = detect_language(text)
    purchase: date | None = None
    if m := re.search(r"(\d+)\s*(?:个月前|months?\s+ago)", text, re.I):
        purchase = months_before(today, int(m.group(1)))
    elif re.search(r"上周|上星期|last\s+week", text, re.I):
        purchase = today - timedelta(days=7)
    elif re.search(r"昨天|yesterday", text, re.I):
        purchase = today - timedelta(days=1)
    shattered = re.search(r"屏幕碎|碎屏|屏幕.{0,4}裂|shatter|cracked\s+screen", text, re.I)
    accidental = bool(re.search(r"摔|掉在|掉地|砸|进水|dropped|fell|water", text, re.I))
    replace = re.search(r"换新|更换|换机|换一台|replace", text, re.I)
    intent = "warranty_replacement" if replace and shattered else "general_inquiry"
    context: dict[str, Any] = {
        "fault_type": "screen_shattered" if shattered else "unknown",
        "accidental": accidental,
        "language": language,
    }
    if data.get("user_id"):
        context["user_id"] = data["user_id"]
    if str(data.get("device", "")) in _DEVICES:  # an unknown fingerprint says nothing of the model
        context["device_model"] = _DEVICES[str(data["device"])]
    if purchase is not None:
        context["purchase_date"] = purchase.isoformat()
    return AgentReply(
        output={
            "intent": intent,
            "goal_id": "GOAL_WARRANTY_001" if intent == "warranty_replacement" else "",
            "language": language,
            "context": context,
        },
        confidence_score=0.95,
        provenance=Provenance(source="greeting_agent", reliability_score=0.98),
    )


def _order(request: AgentRequest, today: date) -> AgentReply:
    user = str(request.input["user_id"])
    if user in _ORDERS:
        order_id, months, days, model = _ORDERS[user]
        bought = (months_before(today, months) - timedelta(days=days)).isoformat()
    else:  # no order on file: the purchase date the customer gave stands (no second opinion)
        order_id, model = "ORD-00000", ""
        bought = str(request.input.get("purchase_date") or today.isoformat())
    output = {"order_id": order_id, "user_id": user, "purchase_date": bought}
    if request.input.get("device_model") or model:  # what was bought (the model asked about first)
        output["device_model"] = request.input.get("device_model") or model
    return AgentReply(
        output=output,
        confidence_score=0.99,
        provenance=Provenance(source="orders_db", reliability_score=0.99),
    )


def _warranty(request: AgentRequest, today: date) -> AgentReply:
    data = request.input
    # the order system's date when the order step ran, else what the user said
    order = data.get("order") if isinstance(data.get("order"), dict) else {}
    known = order.get("purchase_date") or data.get("purchase_date")
    purchase = date.fromisoformat(known) if known else today
    months = _months_between(purchase, today)
    coverage_end = add_period(purchase, 12, "months")  # the goal's calendar (middleware.goals.dates)
    in_warranty = today <= coverage_end
    accidental = bool(data.get("accidental", False))
    covered = in_warranty and not accidental and data.get("fault_type") == "screen_shattered"
    return AgentReply(
        output={
            "in_warranty": in_warranty,
            "eligible": covered,
            "months_since_purchase": months,
            "purchase_date": purchase.isoformat(),
            "fault_type": data.get("fault_type", "unknown"),
            "accidental": accidental,
            "fee": 0 if covered else 599,
            "coverage_end": coverage_end.isoformat(),
            "model": data["device_model"],
        },
        confidence_score=0.96,
        provenance=Provenance(source="warranty_db", reliability_score=0.98),
    )


def _express(request: AgentRequest, today: date) -> AgentReply:
    zh = request.input.get("language") == "zh"
    return AgentReply(
        output={
            "tracking_number": "EXP123456",
            "carrier": "顺丰" if zh else "SF Express",
            "estimated_delivery": (today + timedelta(days=2)).isoformat(),
        },
        freshness_ttl=3600,  # logistics is a time-critical domain: a TTL is required
        provenance=Provenance(source="express_api", reliability_score=0.9),
    )


def _logistics(request: AgentRequest) -> AgentReply:
    """Tracks the shipment the session already knows of; quotes freight when asked to (or
    when it knows of none: the answer that drifts from a replacement goal)."""
    shipping = request.input.get("shipping")
    asks_freight = re.search(r"运费|邮费|freight|postage", request.text, re.I)
    if isinstance(shipping, dict) and shipping.get("tracking_number") and not asks_freight:
        return AgentReply(
            output={
                "tracking_number": shipping["tracking_number"],
                "order_id": (request.input.get("order") or {}).get("order_id", ""),
                "status": "in_transit",
                "estimated_delivery": shipping.get("estimated_delivery", ""),
            },
            freshness_ttl=600,
            provenance=Provenance(source="express_api", reliability_score=0.9),
        )
    return AgentReply(
        output={"freight_quote": "standard parcel", "freight_fee": 12.0, "currency": "CNY"},
        freshness_ttl=600,
        provenance=Provenance(source="freight_tariffs", reliability_score=0.9),
    )


def _refund(request: AgentRequest) -> AgentReply:
    return AgentReply(output={"refund_id": "RF-0001", "amount": 0}, freshness_ttl=60)


def _reply(request: AgentRequest) -> dict[str, Any]:
    data = request.input
    ship, warranty = data["shipping"], data["warranty"]
    model, fee = data["device_model"], warranty["fee"]
    when = date.fromisoformat(ship["estimated_delivery"])
    if data.get("language") == "zh":
        fee_text = "本次更换免费" if fee == 0 else f"本次更换收费{fee}元"
        text = (
            f"您好，您的{model}屏幕更换申请已受理。新机将通过{ship['carrier']}寄出，运单号"
            f"{ship['tracking_number']}，预计{when.month}月{when.day}日送达。{fee_text}，感谢您的信任！"
        )
    else:
        fee_text = "free of charge" if fee == 0 else f"{fee} CNY"
        text = (
            f"Hello, your screen replacement is approved. Replacement model: {model}. It ships by "
            f"{ship['carrier']}, tracking number {ship['tracking_number']}, expected delivery "
            f"{when.isoformat()}. Fee: {fee_text}. Thank you for your patience!"
        )
    return {
        "reply": text,
        "language": data.get("language", "en"),
        "model": model,
        "tracking_number": ship["tracking_number"],
        "estimated_delivery": ship["estimated_delivery"],
        "fee": fee,
    }


def demo_agent(name: str, *, clock: Clock = utcnow) -> ScriptedAgent:
    """A fresh scripted agent of the scenario by contract name (a factory for definition files)."""
    for key, agent in demo_agents(clock=clock).items():
        if key.split("@", 1)[0] == name:
            scripted: ScriptedAgent = agent
            return scripted
    raise ValueError(f"the demo has no agent named {name!r}")


def _dated(agent: Callable[[AgentRequest, date], Any], clock: Clock) -> Callable[[AgentRequest], Any]:
    """``agent`` answering as of the clock's current date (read per request)."""
    return lambda request: agent(request, clock().date())


def demo_agents(*, clock: Clock = utcnow) -> dict[str, Any]:
    """Fresh scripted agents, keyed by contract key; dates are relative to ``clock``."""
    return {
        "greeting_agent@1.0.0": ScriptedAgent(_dated(_greeting, clock), name="greeting_agent"),
        "order_agent@1.0.0": ScriptedAgent(_dated(_order, clock), name="order_agent"),
        "logistics_agent@1.0.0": ScriptedAgent(_logistics, name="logistics_agent"),
        "warranty_agent@2.1.0": ScriptedAgent(_dated(_warranty, clock), name="warranty_agent"),
        "refund_executor@1.0.0": ScriptedAgent(_refund, name="refund_executor"),
        "replacement_shipper@1.0.0": ScriptedAgent(Hang(), name="replacement_shipper"),
        "express_shipper@1.0.0": ScriptedAgent(_dated(_express, clock), name="express_shipper"),
        "reply_agent@1.0.0": ScriptedAgent(_reply, name="reply_agent"),
        # finance is a time-critical domain: its answers carry a TTL (docs/semantics.md)
        "financial_calculator@1.0.0": ScriptedAgent(
            AgentReply(output={"monthly_payment": 0.0}, freshness_ttl=300), name="financial_calculator"
        ),
    }


async def build_demo_agency(agency: Agency | None = None, *, clock: Clock | None = None) -> Agency:
    """Register the scenario's contracts, agents and goal on ``agency`` (or a new one).

    The agents' dates (purchases, deliveries) are relative to ``clock``, by default the
    agency's own clock, so that the goal's date checks and the agents agree on "today".
    """
    agency = agency or Agency(config=demo_config(), clock=clock or utcnow)
    agents = demo_agents(clock=clock or agency.clock)
    for contract in CONTRACTS:
        await agency.register(contract, agents[contract.key])
    agency.register_goal(WARRANTY_GOAL)
    return agency


def warranty_request(session_id: str = "s_demo") -> TaskRequest:
    """The seed's request: only what the user said and who they are (no goal, no context, no
    steps: the greeting agent anchors the goal and the gateway runs the goal's plan)."""
    return TaskRequest(
        text="我上周买的手机屏幕碎了，要换新",
        user_id="u_789",
        session_id=session_id,
        input={"user_id": "u_789", "device": "fp_7f3a"},
    )


def failing_claim_request(kind: str = "accidental", session_id: str = "") -> TaskRequest:
    """A claim the warranty does not cover: ``accidental`` (the phone was dropped) or
    ``expired`` (bought 14 months ago)."""
    if kind == "accidental":
        text, user, device = "我的手机摔了一下，屏幕碎了，要换新", "u_789", "fp_7f3a"
    elif kind == "expired":
        text, user, device = "我14个月前买的手机屏幕碎了，要换新", "u_456", "fp_19c2"
    else:
        raise ValueError(f"kind must be accidental or expired, not {kind!r}")
    return TaskRequest(
        text=text,
        user_id=user,
        session_id=session_id,
        input={"user_id": user, "device": device},
    )


def tracking_request(session_id: str = "s_demo") -> TaskRequest:
    """A later question of the same session: the order and the shipment are not asked again."""
    return TaskRequest(
        text="我的新手机到哪了？",
        user_id="u_789",
        session_id=session_id,
        input={"user_id": "u_789"},
        steps=[TaskStep(name="track", action="track_shipment")],
    )


def drifting_request() -> TaskRequest:
    """A plan with a step the warranty goal is not about: the logistics agent's freight quote
    is INTENT_DRIFT (the seed's section 4.4 example)."""
    return TaskRequest(
        text="我上周买的手机屏幕碎了，要换新，运费多少？",
        user_id="u_789",
        input={"user_id": "u_789", "device": "fp_7f3a"},
        steps=[*WARRANTY_STEPS[:3], TaskStep(name="freight", action="quote_freight")],
    )


def refused_request() -> TaskRequest:
    return TaskRequest(text="Predict next quarter's stock price for ACME.", user_id="u_789")
