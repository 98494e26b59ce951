"""Shared base for the pydantic models, and the one place pydantic errors become ours."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from .errors import InvalidInput, Problem

M = TypeVar("M", bound=BaseModel)


class Model(BaseModel):
    """Base of every core model: unknown fields are refused, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)

    @classmethod
    def parse(cls: type[M], data: Any, *, what: str | None = None) -> M:
        """Validate ``data`` (a mapping or JSON text) into this model.

        Raises:
            InvalidInput: naming every offending field and the reason.
        """
        return parse_model(cls, data, what=what)


def problems_from(exc: ValidationError, prefix: str = "", data: Any = None) -> list[Problem]:
    """Turn a pydantic ``ValidationError`` into field-named problems.

    ``data`` (the input) lets us drop the discriminator tags pydantic puts into the
    location of tagged unions (``steps.0.regex.pattern`` -> ``steps[0].pattern``).
    """
    out: list[Problem] = []
    for err in exc.errors(include_url=False):
        loc = _clean_loc(err.get("loc", ()), data)
        path = ""
        for part in loc:
            if part.isdigit():
                path += f"[{part}]"
            else:
                path += f".{part}" if path else part
        if prefix:
            path = f"{prefix}.{path}" if path and not path.startswith("[") else f"{prefix}{path}"
        msg = str(err.get("msg", "invalid"))
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        elif msg.startswith("Assertion failed, "):
            msg = msg[len("Assertion failed, ") :]
        out.append(Problem(path, msg))
    return out


def _clean_loc(loc: tuple[Any, ...], data: Any) -> list[str]:
    parts: list[str] = []
    node = data
    for part in loc:
        if _is_union_tag(part):
            continue
        if isinstance(node, dict) and isinstance(part, str) and part not in node and node.get("kind") == part:
            continue  # a discriminator tag, not a field
        parts.append(str(part))
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            node = None
    return parts


def _is_union_tag(part: Any) -> bool:
    # pydantic puts the chosen union member (e.g. "function-after[...]") into the location.
    return isinstance(part, str) and (("[" in part and "]" in part) or part.startswith("function-"))


def parse_model(cls: type[M], data: Any, *, what: str | None = None, prefix: str = "") -> M:
    try:
        if isinstance(data, (str, bytes, bytearray)):
            return cls.model_validate_json(data)
        if isinstance(data, cls):
            return data
        return cls.model_validate(data)
    except ValidationError as exc:
        raise InvalidInput(problems_from(exc, prefix, data), what=what or _describe(cls)) from None


def trusted(cls: type[M], values: dict[str, Any]) -> M:
    """Build ``cls`` from values the gateway itself produced, without validating them again.

    For the core's own working records on the hot path (state transitions, step records, the
    outcome, the messages the gateway sends): every value is already of its field's type, taken
    from validated models or made by the core. Data from a client or an agent is never built
    this way. ``values`` must hold every field, defaults included (a missing one would only
    show when read).

    Raises:
        TypeError: more or fewer values than fields (a bug in the caller).
    """
    # every field is set, so the instances of a class share one fields-set: pydantic only
    # ever adds names to it (on assignment), and every name is already in it
    fields_set = _FIELDS_SETS.get(cls)
    if fields_set is None:
        fields_set = _FIELDS_SETS[cls] = set(cls.model_fields)
    # the count only (comparing the names costs more than the build): each builder is tested
    # to dump exactly as its validated twin, which a misnamed field would not
    if len(values) != len(fields_set):
        missing = sorted(fields_set - set(values))
        unknown = sorted(set(values) - fields_set)
        raise TypeError(f"{cls.__name__}: missing {missing}, unknown {unknown}")
    obj = cls.__new__(cls)
    _set_dict(obj, "__dict__", values)
    _set_fields_set(obj, fields_set)
    _set_extra(obj, None)
    _set_private(obj, None)
    return obj


_FIELDS_SETS: dict[type[BaseModel], set[str]] = {}
# BaseModel's slot setters, looked up once
_set_dict = object.__setattr__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


def _describe(cls: type[BaseModel]) -> str:
    name = cls.__name__
    words: list[str] = []
    for ch in name:
        if ch.isupper() and words:
            words.append(" ")
        words.append(ch.lower())
    return "".join(words)
