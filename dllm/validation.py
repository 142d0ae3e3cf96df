"""Type checks of user-given values against a dataclass's field annotations.

One checker serves every place a user names options: GenerationConfig's fields, the options of
rules / strategies / stoppers (``policy_args`` ...), and a checkpoint's ArchConfig. A wrong type
fails here with the option's name, the expected type and the value given, instead of a
TypeError deep inside a rule (``tau="high"``) or a silent truncation (``gen_length=8.5``).
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
import os
import types
import typing
from typing import Any, Literal, Union


class OptionTypeError(TypeError, ValueError):
    """A value of the wrong type (or not finite) for a named option.

    A TypeError for the Python API, and a ValueError so that callers reporting bad input
    (the CLI) print it like any other option error.
    """


def did_you_mean(value: str, names, cutoff: float = 0.6) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``names`` to ``value``, else ``""``."""
    close = difflib.get_close_matches(value, [str(n) for n in names], n=1, cutoff=cutoff)
    return f" (did you mean {close[0]!r}?)" if close else ""


def field_types(cls: type) -> dict[str, Any]:
    """Init field name -> resolved annotation (``Any`` where it cannot be resolved)."""
    try:
        hints = typing.get_type_hints(cls)
    except (NameError, TypeError):  # a forward reference only a type checker sees
        hints = {}
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls) if f.init}


def check_fields(cls: type, values: dict[str, Any], owner: str) -> dict[str, Any]:
    """``values`` checked against the fields of dataclass ``cls`` (unknown names are left to
    the caller); ints become floats where a float is declared, lists tuples."""
    types_ = field_types(cls)
    return {name: check_value(value, types_[name], f"{owner} option {name!r}") if name in types_ else value
            for name, value in values.items()}


def check_value(value: Any, annotation: Any, what: str) -> Any:
    """``value`` if it fits ``annotation`` (possibly converted), else OptionTypeError naming
    ``what``, the expected type and what was given."""
    ok, converted = _fits(value, annotation)
    if ok:
        return converted
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isfinite(value):
        raise OptionTypeError(f"{what} must be a finite number, got {value!r}")
    raise OptionTypeError(f"{what} expects {type_name(annotation)}, got {value!r} ({type(value).__name__})")


def type_name(annotation: Any) -> str:
    """Readable form of an annotation: ``int or None``, ``tuple of 3 float``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is None or annotation is type(None):
        return "None"
    if origin in (Union, types.UnionType):
        return " or ".join(type_name(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a list of {type_name(args[0])}"
        return f"a list of {len(args)} {' / '.join(sorted({type_name(a) for a in args}))}"
    if origin is dict:
        return "a dict"
    return getattr(annotation, "__name__", str(annotation))


def _fits(value: Any, annotation: Any) -> tuple[bool, Any]:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any:
        return True, value
    if annotation is None or annotation is type(None):
        return value is None, value
    if origin in (Union, types.UnionType):
        for arm in args:
            ok, converted = _fits(value, arm)
            if ok:
                return True, converted
        return False, value
    if origin is Literal:
        return value in args, value
    if annotation is bool:
        return isinstance(value, bool), value
    if annotation is str:  # a path given for a directory option is its text
        if isinstance(value, os.PathLike):
            return True, os.fspath(value)
        return isinstance(value, str), value
    if annotation is int:  # bools are ints to Python, never to a user
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        return ok, int(value) if ok else value
    if annotation is float:
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
        return ok, float(value) if ok else value
    if origin is tuple:
        return _fits_tuple(value, args)
    if origin is dict:
        ok = isinstance(value, dict) and all(isinstance(k, str) for k in value)
        return ok, value
    if isinstance(origin or annotation, type):
        return isinstance(value, origin or annotation), value
    return True, value  # an annotation this checker does not model


def _fits_tuple(value: Any, args: tuple) -> tuple[bool, Any]:
    if not isinstance(value, (list, tuple)):
        return False, value
    arms = [args[0]] * len(value) if len(args) == 2 and args[1] is Ellipsis else list(args)
    if len(arms) != len(value):
        return False, value
    out = []
    for item, arm in zip(value, arms):
        ok, converted = _fits(item, arm)
        if not ok:
            return False, value
        out.append(converted)
    return True, tuple(out)
