"""The content guard: what the dispatcher asks before an agent is called and after it answers.

Before a dispatch (:meth:`ContentGuard.screen_request`):

1. **Injection** — the user's parts of the agent's input (the request's or step's text, the
   request's and the step's input, a clarification answer) are read by the injection
   detectors; a finding is a ``POLICY_VIOLATION`` (quarantined like any: the task stops, the
   evidence is audited, nothing is sent to the agent).
2. **Personal data** — every data class the agent's contract does not list in
   ``data_classes`` is tokenised (``[phone:3f9a2c1b5d7e]``) or redacted
   (``[redacted:phone]``) in the input and in the text the agent gets; what was replaced
   (classes, counts, JSON paths — never the values) is audited as ``guard.redacted``.

After the answer:

* :meth:`restore` — in the reply of a contract with ``restore_personal_data``, the task's own
  tokens are turned back into the values (the next step and the user see them; the next
  agent gets them only if its own contract allows the class);
* :meth:`inspect` — the answer is read by the injection detectors before the built-in
  detectors, so an instruction planted in a tool's output never reaches the next agent.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..contracts import CapabilityContract
from ..detectors import AgentResult, Detection
from ..failures import FailureType
from ..tasks import TaskRecord, TaskStep
from .audit_guard import ReplacerFor
from .config import GuardConfig
from .injection import HeuristicInjectionDetector, InjectionDetector, InjectionFinding, detect_all
from .pii import PiiScanner, default_recognizers
from .redaction import Redactions, Tokenizer, redact_text, redact_value, redacted

__all__ = ["GUARD_RECORD", "ContentGuard", "Screened"]

#: The audit event type of a redaction before dispatch.
GUARD_RECORD = "guard.redacted"


@dataclass
class Screened:
    """The agent's input as the guard lets it go: input, text, what was replaced, or why not."""

    payload: dict[str, Any]
    text: str
    redactions: Redactions = field(default_factory=Redactions)
    detection: Detection | None = None


class ContentGuard:
    """Personal-data and injection guards for dispatch (see the module docstring).

    Args:
        config: What is on (``agency.guards``).
        scanner: Finds personal data (default: the built-in recognizers of ``config``).
        injection: The injection detectors, in order (default: the heuristics).
        token_key: The key of the tokens (default: ``config``'s ``token_key_file``, else 32
            random bytes per gateway process).
        audit_replacer: How personal data in audit records is replaced, per record (default:
            ``[redacted:<class>]``; ``middleware.audit.shredding.SubjectSealer.replacer`` seals
            it under the subject's key).
    """

    def __init__(
        self,
        config: GuardConfig | None = None,
        *,
        scanner: PiiScanner | None = None,
        injection: Sequence[InjectionDetector] | None = None,
        token_key: bytes | None = None,
        audit_replacer: ReplacerFor | None = None,
    ) -> None:
        self.audit_replacer = audit_replacer
        self.config = config or GuardConfig()
        pd = self.config.personal_data
        self.scanner = scanner or PiiScanner(default_recognizers(pd.classes, phone_regions=pd.phone_regions))
        self.injection: list[InjectionDetector] = (
            list(injection) if injection is not None else [HeuristicInjectionDetector()]
        )
        self._token_key = token_key or pd.token_key() or os.urandom(32)

    @property
    def personal_data(self) -> bool:
        return self.config.personal_data.enabled

    def tokenizer(self, task_id: str) -> Tokenizer:
        """The tokens of one task (the same for every guard holding the same key)."""
        return Tokenizer(self._token_key, task_id)

    def _tokens(self, run: TaskRecord) -> Tokenizer:
        return self.tokenizer(run.task_id)

    async def screen_request(
        self,
        run: TaskRecord,
        step: TaskStep,
        contract: CapabilityContract,
        payload: dict[str, Any],
        text: str,
        extra: dict[str, Any],
    ) -> Screened:
        """The input and text ``contract``'s agent may get, or the injection that stops them."""
        inj = self.config.injection
        if inj.enabled and inj.user_input and self.injection:
            user_parts = {
                "text": text,
                "input": run.request.input,
                "step_input": step.input,
                "answer": extra,
            }
            finding, where = await self._find_injection(user_parts)
            if finding is not None:
                return Screened(payload, text, detection=_detection(finding, where, "input to", contract.key))
        if not self.personal_data:
            return Screened(payload, text)
        allowed = set(contract.data_classes)
        mode = self.config.personal_data.mode
        replace = self._tokens(run) if mode == "tokenize" else redacted
        found = Redactions()
        new_payload = redact_value(payload, self.scanner, replace, allowed=allowed, found=found)
        new_text = redact_text(text, self.scanner, replace, allowed=allowed, found=found, path="text")
        return Screened(new_payload, new_text, found)

    def restore(self, run: TaskRecord, contract: CapabilityContract, output: Any) -> tuple[Any, int]:
        """``output`` with this task's tokens restored when ``contract`` allows it (and how many)."""
        if (
            not self.personal_data
            or not contract.restore_personal_data
            or self.config.personal_data.mode != "tokenize"
            or not Tokenizer.holds_tokens(output)
        ):
            return output, 0
        tokens = self._tokens(run)
        sources = [
            run.request.text,
            run.request.input,
            run.context,
            run.outputs,
            [s.input for s in run.request.steps],
            [s.text for s in run.request.steps],
            run.step_inputs,
        ]
        return tokens.restore(output, tokens.vault(sources, self.scanner))

    async def inspect(self, result: AgentResult) -> Detection | None:
        """An injected instruction in an agent's answer, as a POLICY_VIOLATION (else None)."""
        inj = self.config.injection
        if not (inj.enabled and inj.outputs and self.injection):
            return None
        finding, where = await self._find_injection({"output": result.output})
        if finding is None:
            return None
        detection = _detection(finding, where, "output of", result.agent)
        text = "\n".join(s for _, s in _strings(result.output, "$"))
        detection.context["output_sha256"] = hashlib.sha256(text.encode()).hexdigest()
        return detection

    async def _find_injection(self, parts: dict[str, Any]) -> tuple[InjectionFinding | None, str]:
        strings = [(path, s) for name, value in parts.items() for path, s in _strings(value, name)]
        if not strings:
            return None, ""
        finding = await detect_all(self.injection, "\n".join(s for _, s in strings))
        if finding is None:
            return None, ""
        where = next((path for path, s in strings if finding.evidence and finding.evidence in s), "")
        return finding, where


def _strings(value: Any, path: str) -> list[tuple[str, str]]:
    """Every non-empty string in a JSON value, with its path."""
    if isinstance(value, str):
        return [(path, value)] if value.strip() else []
    if isinstance(value, dict):
        return [item for k, v in value.items() for item in _strings(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [item for i, v in enumerate(value) for item in _strings(v, f"{path}[{i}]")]
    return []


def _detection(finding: InjectionFinding, where: str, what: str, whose: str) -> Detection:
    return Detection(
        type=FailureType.POLICY_VIOLATION,
        detail=f"{what} {whose} holds an injected instruction: {finding.reason} "
        f"(rule {finding.rule}, {finding.detector})",
        context={
            "rule": finding.rule,
            "detector": finding.detector,
            "evidence": {"path": where, "match": finding.evidence, "reason": finding.reason},
        },
    )
