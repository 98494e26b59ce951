"""The content guards' settings (``agency.guards`` in a definition file; docs/security.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from .._model import Model
from .pii import DATA_CLASSES

__all__ = ["GuardConfig", "InjectionSettings", "PersonalDataSettings"]


class PersonalDataSettings(Model):
    """Personal data: what is looked for, and what happens to it."""

    enabled: bool = Field(default=False, description="Redact or tokenise personal data before dispatch.")
    classes: list[str] = Field(
        default_factory=lambda: list(DATA_CLASSES),
        description="The data classes looked for (email, phone, payment_card, cn_resident_id, iban).",
    )
    phone_regions: list[str] = Field(
        default_factory=lambda: ["CN", "US"],
        description="Regions whose national phone numbers are recognised (+ numbers always are).",
    )
    mode: Literal["tokenize", "redact"] = Field(
        default="tokenize",
        description="tokenize: [phone:3f9a2c1b5d7e], restored in the reply of a contract with "
        "restore_personal_data; redact: [redacted:phone], irreversible.",
    )
    audit: bool = Field(
        default=True,
        description="Replace personal data in audit records too (sealed under the subject's key "
        "when a subject key store is configured, else redacted), so no export holds it in clear.",
    )

    @field_validator("classes")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        unknown = [c for c in v if c not in DATA_CLASSES]
        if unknown:
            raise ValueError(f"unknown data classes {', '.join(unknown)} (known: {', '.join(DATA_CLASSES)})")
        return v


class InjectionSettings(Model):
    """Prompt-injection screening of what reaches an agent."""

    enabled: bool = Field(default=False, description="Screen for injected instructions.")
    user_input: bool = Field(default=True, description="Screen the request's text and input before dispatch.")
    outputs: bool = Field(
        default=True, description="Screen every agent's and tool's answer before it reaches the next step."
    )


class GuardConfig(Model):
    """The content guards (all off by default)."""

    personal_data: PersonalDataSettings = Field(default_factory=PersonalDataSettings)
    injection: InjectionSettings = Field(default_factory=InjectionSettings)

    @property
    def any_enabled(self) -> bool:
        return self.personal_data.enabled or self.injection.enabled
