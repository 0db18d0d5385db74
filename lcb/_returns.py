"""A functional test's return value on the wire: the child encodes it, the harness compares.

Stdlib only and free of package imports: the sandbox child loads this file directly.

The child never sees the expected value; it reports what the method returned as tagged JSON,
and the harness decodes it to plain Python data and applies the official rule (``==`` with the
JSON-decoded expected value, a top-level tuple counting as a list). The tags keep the
distinctions ``==`` makes: a nested tuple is not a list, a set is not a list, dict keys keep
their types. Numbers and arrays of numpy become the Python numbers and lists they equal. Any
other type is refused (the official harness would compare the object itself; a program-defined
object with its own ``__eq__`` must not decide its own verdict).
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from fractions import Fraction

class UnsupportedReturn(TypeError):
    """The method returned something that has no faithful plain-data form."""


def _plain(value, depth: int = 0):
    if depth > 2000:
        raise UnsupportedReturn("return value nested more than 2000 levels deep")
    down = depth + 1
    # Exact types first; subclasses are reduced to their base (their own __eq__ is ignored).
    if value is None or value is True or value is False:
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        number = float.__float__(value)
        return number if math.isfinite(number) else {"__float__": repr(number)}
    if isinstance(value, str):
        return str.__getitem__(value, slice(None))
    if isinstance(value, list):
        return [_plain(item, down) for item in list.__iter__(value)]
    if isinstance(value, tuple):
        return {"__tuple__": [_plain(item, down) for item in tuple.__iter__(value)]}
    if isinstance(value, frozenset):
        return {"__frozenset__": [_plain(item, down) for item in frozenset.__iter__(value)]}
    if isinstance(value, set):
        return {"__set__": [_plain(item, down) for item in set.__iter__(value)]}
    if isinstance(value, dict):
        return {"__dict__": [[_plain(k, down), _plain(v, down)] for k, v in dict.items(value)]}
    if isinstance(value, (bytes, bytearray)):
        return {"__bytes__": bytes(value).hex()}
    if isinstance(value, complex):
        return {"__complex__": [_plain(value.real, down), _plain(value.imag, down)]}
    if isinstance(value, Decimal):
        return {"__decimal__": str(value)}
    if isinstance(value, Fraction):
        return {"__fraction__": [value.numerator, value.denominator]}
    module = type(value).__module__ or ""
    if module == "numpy" or module.startswith("numpy."):
        if hasattr(value, "tolist"):  # numpy scalars and arrays: the Python values they equal
            return _plain(value.tolist(), down)
    raise UnsupportedReturn(f"unsupported return type {type(value).__module__}.{type(value).__qualname__}")


def encode(value) -> str:
    """Tagged JSON for ``value`` (a top-level tuple becomes a list, as officially)."""
    if isinstance(value, tuple):
        value = list(tuple.__iter__(value))
    return json.dumps(_plain(value), ensure_ascii=False, separators=(",", ":"))


def _revive(obj: dict):
    if len(obj) != 1:
        raise ValueError("not a tagged value")
    (tag, payload), = obj.items()
    if tag == "__tuple__":
        return tuple(payload)
    if tag == "__set__":
        return set(payload)
    if tag == "__frozenset__":
        return frozenset(payload)
    if tag == "__dict__":
        return {key: val for key, val in payload}
    if tag == "__bytes__":
        return bytes.fromhex(payload)
    if tag == "__complex__":
        return complex(*payload)
    if tag == "__decimal__":
        return Decimal(payload)
    if tag == "__fraction__":
        return Fraction(*payload)
    if tag == "__float__":
        return float(payload)
    raise ValueError(f"unknown tag {tag!r}")


def decode(text: str):
    """The plain value a child reported (raises ValueError for anything malformed)."""
    try:
        return json.loads(text, object_hook=_revive)
    except (TypeError, RecursionError) as exc:  # e.g. an unhashable set member
        raise ValueError(str(exc)) from None
