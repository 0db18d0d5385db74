"""A candidate team configuration: named text components, discrete settings and demos.

Components are namespaced: ``role/<name>`` is a role's editable prompt, ``protocol/<part>`` an
editable part of the team protocol (e.g. ``protocol/handoff``). The output contract is never a
component, so no optimizer edit can remove it. ``id`` is a content hash, so two candidates with the
same content are the same candidate everywhere (caches, journals, selection).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from optimizers.journal import canonical_json, short_hash

ROLE_PREFIX = "role/"
PROTOCOL_PREFIX = "protocol/"
NAMESPACES = (ROLE_PREFIX, PROTOCOL_PREFIX)
SettingValue = int | float | str


def _freeze_components(components: Mapping[str, str]) -> Mapping[str, str]:
    frozen: dict[str, str] = {}
    for key in sorted(components):
        value = components[key]
        if not isinstance(key, str) or not key.startswith(NAMESPACES) or key in NAMESPACES:
            raise ValueError(f"component key {key!r} must look like 'role/<name>' or 'protocol/<part>'")
        if not isinstance(value, str):
            raise TypeError(f"component {key!r} must be text, not {type(value).__name__}")
        frozen[key] = value
    return MappingProxyType(frozen)


def _freeze_settings(settings: Mapping[str, SettingValue]) -> Mapping[str, SettingValue]:
    frozen: dict[str, SettingValue] = {}
    for key in sorted(settings):
        value = settings[key]
        if not isinstance(value, int | float | str):
            raise TypeError(f"setting {key!r} must be int, float or str, not {type(value).__name__}")
        frozen[key] = value
    return MappingProxyType(frozen)


def _freeze_demos(demos: Any) -> tuple[Mapping[str, Any], ...]:
    out = []
    for demo in demos:
        if not isinstance(demo, Mapping):
            raise TypeError("each demo must be a mapping")
        canonical_json(dict(demo))  # must be JSON-safe: demos are hashed and journaled
        out.append(MappingProxyType(dict(demo)))
    return tuple(out)


@dataclass(frozen=True, eq=False, slots=True)
class Candidate:
    """An immutable team configuration; equality and hashing follow ``id`` (its content)."""

    components: Mapping[str, str]
    settings: Mapping[str, SettingValue] = field(default_factory=dict)
    demos: tuple[Mapping[str, Any], ...] = ()
    parent: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "components", _freeze_components(self.components))
        object.__setattr__(self, "settings", _freeze_settings(self.settings))
        object.__setattr__(self, "demos", _freeze_demos(self.demos))
        if not any(k.startswith(ROLE_PREFIX) for k in self.components):
            raise ValueError("a candidate needs at least one 'role/<name>' component")

    def content(self) -> dict[str, Any]:
        """What the id hashes: everything except lineage."""
        return {
            "components": dict(self.components),
            "settings": dict(self.settings),
            "demos": [dict(d) for d in self.demos],
        }

    @property
    def id(self) -> str:
        return short_hash(self.content())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Candidate) and self.content() == other.content()

    def __hash__(self) -> int:
        return hash(self.id)

    # ---------------------------------------------------------------- views

    def roles(self) -> dict[str, str]:
        """Role name -> prompt text."""
        return {k[len(ROLE_PREFIX) :]: v for k, v in self.components.items() if k.startswith(ROLE_PREFIX)}

    def protocol(self) -> dict[str, str]:
        """Protocol part -> text."""
        return {
            k[len(PROTOCOL_PREFIX) :]: v for k, v in self.components.items() if k.startswith(PROTOCOL_PREFIX)
        }

    # ---------------------------------------------------------------- edits (new candidates)

    def with_component(self, key: str, text: str) -> Candidate:
        """A child with one component replaced; the key must already exist (no new roles)."""
        if key not in self.components:
            raise KeyError(f"unknown component {key!r}; known: {', '.join(self.components)}")
        return Candidate({**self.components, key: text}, self.settings, self.demos, parent=self.id)

    def with_components(self, updates: Mapping[str, str]) -> Candidate:
        unknown = [k for k in updates if k not in self.components]
        if unknown:
            raise KeyError(f"unknown component(s) {unknown}; known: {', '.join(self.components)}")
        return Candidate({**self.components, **updates}, self.settings, self.demos, parent=self.id)

    def with_setting(self, key: str, value: SettingValue) -> Candidate:
        if key not in self.settings:
            raise KeyError(f"unknown setting {key!r}; known: {', '.join(self.settings) or 'none'}")
        return Candidate(self.components, {**self.settings, key: value}, self.demos, parent=self.id)

    def with_demos(self, demos: Any) -> Candidate:
        return Candidate(self.components, self.settings, tuple(demos), parent=self.id)

    # ---------------------------------------------------------------- JSON

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "parent": self.parent, **self.content()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Candidate:
        candidate = cls(
            components=data["components"],
            settings=data.get("settings", {}),
            demos=tuple(data.get("demos", ())),
            parent=data.get("parent"),
        )
        if "id" in data and data["id"] != candidate.id:
            raise ValueError(f"candidate id {data['id']} does not match its content ({candidate.id})")
        return candidate
