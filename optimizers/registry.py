"""Optimizer registry: ``@register_optimizer`` plus a lazy table of the built-in methods.

Built-ins are imported only when selected, so a method's heavy dependencies (dspy, torch, ...)
load only for jobs that use it. A name whose module is not part of this build yields a one-line
``MethodUnavailable``; an unknown name yields ``UnknownMethod`` listing the valid ones.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from optimizers.base import Optimizer

# name -> "module:Class". Importing the module may also register the class by name.
BUILTIN_METHODS: dict[str, str] = {
    "identity": "optimizers.identity:IdentityOptimizer",
    "gepa": "optimizers.gepa:GEPAOptimizer",
    "mipro": "optimizers.mipro:MIPROOptimizer",
    "mapro": "optimizers.mapro:MAPROOptimizer",
    "maspo": "optimizers.maspo:MASPOOptimizer",
    "hivemind": "optimizers.hivemind:HiveMindOptimizer",
    "mamut_gepa": "optimizers.mamut_gepa:MAMUTGEPAOptimizer",
    "maspob": "optimizers.maspob:MASPOBOptimizer",
    "tavo": "optimizers.tavo:TAVOOptimizer",
    "random": "optimizers.random_search:RandomSearchOptimizer",  # blind search: the baseline
    # Test-only matched-compute baselines (optimizers/matched.py): no search.
    "self_consistency": "optimizers.self_consistency:SelfConsistencyBaseline",
    "best_of_n": "optimizers.best_of_n:BestOfNBaseline",
}

_REGISTERED: dict[str, type[Optimizer]] = {}


class UnknownMethod(LookupError):
    """No method of that name exists."""


class MethodUnavailable(LookupError):
    """The method exists but cannot be loaded in this build (module or dependency missing)."""


def register_optimizer(name: str) -> Callable[[type[Optimizer]], type[Optimizer]]:
    """Class decorator: make ``name`` resolve to the class (and set ``cls.name``)."""

    def decorate(cls: type[Optimizer]) -> type[Optimizer]:
        if not (isinstance(cls, type) and issubclass(cls, Optimizer)):
            raise TypeError(f"@register_optimizer({name!r}) needs an Optimizer subclass")
        existing = _REGISTERED.get(name)
        if existing is not None and existing is not cls:
            if (existing.__module__, existing.__qualname__) != (cls.__module__, cls.__qualname__):
                raise ValueError(f"optimizer {name!r} is already registered by {existing.__module__}")
        cls.name = name
        _REGISTERED[name] = cls
        return cls

    return decorate


def available_methods() -> list[str]:
    """Every method name this registry knows (loadable or not), sorted."""
    return sorted(set(BUILTIN_METHODS) | set(_REGISTERED))


def get_optimizer_class(name: str) -> type[Optimizer]:
    if name in _REGISTERED:
        return _REGISTERED[name]
    target = BUILTIN_METHODS.get(name)
    if target is None:
        raise UnknownMethod(f"unknown method {name!r}; available: {', '.join(available_methods())}")
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise MethodUnavailable(f"method {name} is not available in this build") from None
        raise MethodUnavailable(
            f"method {name} needs the package {exc.name!r}, which is not installed"
        ) from None
    if name in _REGISTERED:  # the module registered itself on import
        return _REGISTERED[name]
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Optimizer)):
        raise MethodUnavailable(f"method {name} is not available in this build ({target} not found)")
    return cls


def create_optimizer(name: str) -> Optimizer:
    return get_optimizer_class(name)()
