"""Capability contracts: what an agent can and cannot do, and the shapes it speaks.

A contract is enforced at registration (valid JSON Schemas, ``can_do`` and
``cannot_do`` disjoint, a semantic version, a positive SLO), at routing (never
outside ``can_do``, never into ``cannot_do``), at dispatch (the input) and on
return (the output).
"""

from __future__ import annotations

import functools
import re
from typing import Any, Literal

import jsonschema
import orjson
from jsonschema.exceptions import SchemaError
from pydantic import Field, PrivateAttr, ValidationInfo, field_validator

from ._model import Model
from .errors import InvalidInput
from .schema_guard import check_schema_bounds
from .schemas import CompiledSchema, compile_schema
from .tenancy import check_tenant, routable

__all__ = ["SEMVER_RE", "CapabilityContract", "check_against_schema", "normalise_label"]

#: Semantic Versioning 2.0.0 (semver.org), e.g. ``1.4.0`` or ``2.0.0-rc.1+build.5``.
SEMVER_RE = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)
_NAME_RE = re.compile(r"^[a-z][a-z0-9_.-]{0,127}$")
_LABEL_RE = re.compile(r"^[a-z0-9][a-z0-9_.:-]{0,63}$")


class _SchemaCache(dict[str, tuple[dict[str, Any], CompiledSchema]]):
    """A contract's compiled schemas. A cache: it never makes two contracts unequal."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _SchemaCache)

    __hash__ = None


def normalise_label(value: str) -> str:
    """Tags and actions are compared lower-case, trimmed, with spaces and dashes as ``_``."""
    return re.sub(r"[\s-]+", "_", value.strip().lower())


def normalise_tag_set(values: list[str]) -> list[str]:
    """Query-side tags: normalised, blanks dropped, deduplicated, sorted."""
    return sorted({normalise_label(t) for t in values if t.strip()})


def _labels(values: list[str], field: str) -> list[str]:
    out: list[str] = []
    for i, raw in enumerate(values):
        label = normalise_label(raw)
        if not _LABEL_RE.match(label):
            raise ValueError(f"{field}[{i}] {raw!r} is not a valid label (letters, digits, _ . : -)")
        if label not in out:
            out.append(label)
    return out


class CapabilityContract(Model):
    """What one agent (one name at one version) declares it can do."""

    name: str = Field(description="Capability name, lower-case, e.g. ``warranty_agent``.")
    version: str = Field(default="1.0.0", description="Semantic version of this contract.")
    description: str = Field(default="", max_length=2000)
    tags: list[str] = Field(default_factory=list, description="Routing tags, normalised.")
    slo_latency_ms: int = Field(default=1000, gt=0, le=3_600_000, description="Latency SLO.")
    can_do: list[str] = Field(min_length=1, description="Actions this agent performs.")
    cannot_do: list[str] = Field(default_factory=list, description="Actions it must never get.")
    input_schema: dict[str, Any] = Field(default_factory=dict, description="JSON Schema of input.")
    output_schema: dict[str, Any] = Field(default_factory=dict, description="JSON Schema of output.")
    owner: str = Field(default="", max_length=256)
    endpoint: str = Field(default="", max_length=512, description="Remote address, empty = in process.")
    # What the agent satisfies for context constraints (see docs/catalog-and-router.md).
    regions: list[str] = Field(
        default_factory=list, description="Regions whose data it serves, normalised; empty = any region."
    )
    data_residency: list[str] = Field(
        default_factory=list,
        description="Regions where it processes and keeps data; a 'data must not leave X' request "
        "only goes to an agent that declares residency in X and nowhere else. Empty = undeclared.",
    )
    max_data_delay_ms: int | None = Field(
        default=None,
        ge=0,
        le=31_536_000_000,
        description="Worst delay of the data it serves, in ms; a freshness tolerance needs it declared.",
    )
    time_windows: list[str] = Field(
        default_factory=list, description="Time windows it can answer for (e.g. last_24h); empty = any."
    )
    granularities: list[str] = Field(
        default_factory=list, description="Granularities it can report at (e.g. hour); empty = any."
    )
    metrics: list[str] = Field(
        default_factory=list, description="Metrics it can compute (e.g. refund_rate); empty = any."
    )
    human_review: bool = Field(
        default=False, description="Its results pass a human reviewer (satisfies 'needs human review')."
    )
    time_critical: bool = Field(
        default=False,
        description="Its answers are time-critical data: each must carry a freshness_ttl (SMF).",
    )
    side_effect_free: bool = Field(
        default=False,
        description="It cannot act on the world (a read-only lookup, a pure function): a call "
        "changes nothing outside the gateway. Run in process, its task's dispatch records become "
        "durable with the outcome instead of before the call (one fdatasync wait per task fewer); "
        "a remote agent keeps the dispatch barrier. The declarer's word, not checked "
        "(docs/audit-log.md, the write-ahead promise).",
    )
    facts: list[str] = Field(
        default_factory=list,
        max_length=100,
        description="The fields of its answers (names, found at any depth) that are facts the task "
        "keeps consistent: each is compared with what the request, the task's context and earlier "
        "steps state (else DATA_INCONSISTENCY). Empty: every scalar field of its answers.",
    )
    idempotency: Literal["", "key"] = Field(
        default="",
        description="'key': the agent acts at most once per idempotency key "
        "(AgentRequest.idempotency_key, sent with every call: the same for every call of a step "
        "with the same input), so a step interrupted with its gateway may be dispatched again. "
        "Empty: not declared. The declarer's word, not checked (docs/failures.md, interrupted tasks).",
    )
    stream_progress: bool = Field(
        default=False,
        description="Its progress while it works (a streaming chat model's token deltas, what it "
        "passes to emit_progress, the events of the sub-agents it asks) goes to the task's event "
        "stream as agent.progress events, never audited. In process only (a remote worker's call "
        "is one request and one answer).",
    )

    data_classes: list[str] = Field(
        default_factory=list,
        description="Personal data classes it may receive in clear (email, phone, payment_card, "
        "cn_resident_id, iban ...); with the personal-data guard on, every other class is tokenised "
        "or redacted before dispatch (docs/security.md). Empty = none.",
    )
    restore_personal_data: bool = Field(
        default=False,
        description="Tokens of personal data in its answer are turned back into the values "
        "(personal-data guard in tokenize mode): the next step and the user see them.",
    )
    tenant: str = Field(
        default="",
        max_length=63,
        description="The tenant it belongs to (empty: none). Tasks of other tenants never reach it "
        "unless ``shared_with`` names them; its key is ``tenant/name@version`` (middleware.tenancy).",
    )
    shared_with: list[str] = Field(
        default_factory=list,
        max_length=256,
        description="Other tenants whose tasks may be routed to it (``*``: every tenant).",
    )

    # Compiled schemas, kept with the contract: (schema object compiled, compiled form).
    _compiled: _SchemaCache = PrivateAttr(default_factory=lambda: _SchemaCache())

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        v = v.strip().lower()
        if not _NAME_RE.match(v):
            raise ValueError("must start with a letter and use a-z, 0-9, _ . - (max 128)")
        return v

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, v: str) -> str:
        return check_tenant(v)

    @field_validator("shared_with")
    @classmethod
    def _shared(cls, v: list[str]) -> list[str]:
        return sorted({t if t.strip() == "*" else check_tenant(t) for t in v if t.strip()})

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        if not SEMVER_RE.match(v.strip()):
            raise ValueError(f"{v!r} is not a semantic version (MAJOR.MINOR.PATCH)")
        return v.strip()

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: list[str]) -> list[str]:
        return _labels(v, "tags")

    @field_validator("can_do")
    @classmethod
    def _can_do(cls, v: list[str]) -> list[str]:
        return _labels(v, "can_do")

    @field_validator("cannot_do")
    @classmethod
    def _cannot_do(cls, v: list[str], info: ValidationInfo) -> list[str]:
        labels = _labels(v, "cannot_do")
        # A field validator (not a model validator) so the overlap is reported together
        # with every other field problem instead of only once all fields are valid.
        overlap = [a for a in labels if a in (info.data.get("can_do") or ())]
        if overlap:
            raise ValueError(f"can_do and cannot_do overlap on {', '.join(sorted(overlap))}")
        return labels

    @field_validator("regions", "data_residency", "time_windows", "granularities", "metrics", "data_classes")
    @classmethod
    def _constraint_labels(cls, v: list[str], info: ValidationInfo) -> list[str]:
        return _labels(v, info.field_name or "labels")

    @field_validator("facts")
    @classmethod
    def _facts(cls, v: list[str]) -> list[str]:
        out: list[str] = []
        for i, name in enumerate(v):
            name = name.strip()
            if not name or len(name) > 128:
                raise ValueError(f"facts[{i}]: a field name of 1..128 characters")
            if name not in out:
                out.append(name)
        return out

    @field_validator("input_schema", "output_schema")
    @classmethod
    def _schema(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if info.context and info.context.get("schemas_checked"):
            return v  # re-read from a catalog that checked them at registration
        try:  # size and patterns first: the meta-schema check itself is costly on a huge schema
            check_schema_bounds(v, field="$")
        except InvalidInput as exc:
            raise ValueError("; ".join(f"{p.field}: {p.reason}" for p in exc.problems)) from None
        try:  # the same schema (often ``{}``, or one shared by many contracts) is checked once
            problem = _meta_schema_problem(orjson.dumps(v, option=orjson.OPT_SORT_KEYS))
        except TypeError:  # not plain JSON data (an integer beyond 64 bits ...): check it as it is
            problem = _meta_schema_problem_of(v)
        if problem is not None:
            raise ValueError(problem)
        return v

    @property
    def key(self) -> str:
        """``name@version`` (``tenant/name@version`` for a tenant's): unique in a catalog."""
        if self.tenant:
            return f"{self.tenant}/{self.name}@{self.version}"
        return f"{self.name}@{self.version}"

    def routable_for(self, tenant: str) -> bool:
        """Whether a task of ``tenant`` may be routed here (its own tenant, or shared with it)."""
        return routable(self.tenant, self.shared_with, tenant)

    def compiled_schema(self, which: str) -> CompiledSchema:
        """The compiled ``input_schema`` or ``output_schema`` (compiled on first use, then kept)."""
        schema = self.input_schema if which == "input" else self.output_schema
        # __pydantic_private__ directly: attribute access to private attrs goes through the
        # slow __getattr__ path, and this runs on every dispatch.
        cache: _SchemaCache = self.__pydantic_private__["_compiled"]  # type: ignore[index]
        cached = cache.get(which)
        if cached is None or cached[0] is not schema:
            cached = cache[which] = (schema, compile_schema(schema))
        return cached[1]

    def check_input(self, data: Any) -> None:
        """Raise :class:`ContractViolation` if ``data`` does not match ``input_schema``."""
        if self.input_schema:
            self.compiled_schema("input").check(data, what=lambda: f"input for {self.key}")

    def check_output(self, data: Any) -> None:
        """Raise :class:`ContractViolation` if ``data`` does not match ``output_schema``."""
        if self.output_schema:
            self.compiled_schema("output").check(data, what=lambda: f"output of {self.key}")


def check_against_schema(schema: dict[str, Any], data: Any, *, what: str) -> None:
    """Validate ``data`` against a JSON Schema, listing every violation by JSON path.

    Compiled schemas are cached by content; hot paths should keep a
    :class:`~middleware.schemas.CompiledSchema` (as contracts do) to skip the lookup.

    Raises:
        ContractViolation: naming every violation (path and reason).
    """
    if not schema:
        return
    compile_schema(schema).check(data, what=what)


@functools.lru_cache(maxsize=1024)
def _meta_schema_problem(text: bytes) -> str | None:
    """``_meta_schema_problem_of`` the schema whose canonical JSON is ``text``, remembered: the
    meta-schema check costs ~1 ms a schema (it made a 100,000-contract catalog load take 80 s)."""
    return _meta_schema_problem_of(orjson.loads(text))


def _meta_schema_problem_of(schema: dict[str, Any]) -> str | None:
    """Why ``schema`` is not a valid JSON Schema of its dialect (None: it is)."""
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path) or "(root)"
        return f"not a valid JSON Schema at {where}: {exc.message}"
    return None
