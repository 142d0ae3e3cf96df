"""Seeded random JSON schemas of the shapes users send, and random valid instances of a schema:
the oracles of the schema brute-force test (test_schema_random_brute.py)."""
from __future__ import annotations

import datetime
import math
import random
import re
import string
import urllib.parse
import uuid
from typing import Any

import jsonschema

FORMATS = ("date", "time", "date-time", "email", "uri", "uuid", "ipv4")
NAMES = ("id", "name", "age", "tags", "city", "kind", "note", "x", "when", "url", "ok", "count", "child", "data")
# pattern -> one string it matches (the instance generator's pick)
PATTERNS = {r"^[a-z]+$": "abc", r"^[A-Z]{2,4}-[0-9]{3}$": "AB-123", r"[0-9]+": "42", r"^(foo|bar)$": "bar",
            r"^#[0-9a-f]{6}$": "#a0b1c2", r"^\w+$": "word_1"}
FORMAT_VALUES = {
    "time": ("12:00:00Z", "23:59:59.123+02:00", "00:00:00-05:30"),
    "date-time": ("2024-02-29T12:00:00Z", "1999-12-31T23:59:59.5+01:00", "2026-11-29T07:40:00.000Z"),
    "email": ("a@b.co", "first.last+tag@example.org", "x_y@sub.domain.io"),
    "uri": ("https://example.com/a/b?q=1#f", "http://localhost:8080/", "urn:isbn:0451450523"),
    "ipv4": ("0.0.0.0", "192.168.1.254", "255.255.255.255"),
}
ENUM_VALUES = ("a", "b c", "Ünï", 1, 2.5, True, None, 'x"y', "", "tab\t")
CONST_VALUES = ("v1", 3, False, None, {"a": 1}, [1, "x"], 'q"uote')


class RandomSchema:
    """``RandomSchema(seed).top()``: an object schema (sometimes another type) with required and
    optional properties, additionalProperties false / true / a schema / absent, arrays with items or
    prefixItems and bounds, strings with lengths, patterns, formats, enum, const, bounded integers
    and numbers, type lists, anyOf, allOf of one, $defs with $ref (recursive too) and descriptions;
    now and then a keyword the constraint refuses (multipleOf, uniqueItems, oneOf, pattern beside
    maxLength). With ``edges``, also the shapes schema_normal.py rewrites: keywords with no type,
    type lists beside object and array keywords, ``false`` and ``true`` as items, properties and
    branches, allOf of several objects (through $ref too) and keywords beside a $ref,
    ``uniqueItems`` with at most one item, and a $ref to nothing (refused)."""

    def __init__(self, seed: int, edges: bool = False):
        self.rng = random.Random(seed)
        self.defs: dict[str, Any] = {}
        self.edges = edges

    def top(self) -> dict:
        schema = self.schema(0) if self.rng.random() < 0.3 else self.object(0)
        return {**schema, "$defs": dict(self.defs)} if self.defs else schema

    def schema(self, depth: int) -> dict:
        kinds = [self.string, self.integer, self.number, self.boolean, self.null, self.enum, self.const]
        if depth < 3:
            kinds += [self.object] * 3 + [self.array] * 2 + [self.any_of, self.all_of_one, self.type_list, self.ref]
            kinds += [self.all_of, self.ref_beside, self.typeless, self.nullable] * 2 if self.edges else []
        schema = self.rng.choice(kinds)(depth)
        if self.rng.random() < 0.2:
            schema["description"] = "what this field holds"
        if self.rng.random() < 0.1:
            schema["title"] = "Field"
        return schema

    def string(self, depth: int) -> dict:
        rng, schema, pick = self.rng, {"type": "string"}, self.rng.random()
        if pick < 0.2:
            schema["format"] = rng.choice(FORMATS)
        elif pick < 0.35:
            schema["pattern"] = rng.choice(list(PATTERNS))
        elif pick < 0.55:
            low = rng.randint(0, 3)
            schema.update({"minLength": low} if rng.random() < 0.7 else {})
            schema.update({"maxLength": low + rng.randint(0, 5)} if rng.random() < 0.7 else {})
        elif pick < 0.6:
            schema.update(pattern="^[a-z]+$", maxLength=5)  # refused: the regex keeps one of the two
        return schema

    def integer(self, depth: int) -> dict:
        return self._bounds({"type": "integer"}, lambda: self.rng.randint(-50, 50))

    def number(self, depth: int) -> dict:
        rng = self.rng
        return self._bounds({"type": "number"},
                            lambda: rng.choice([rng.randint(-50, 50), round(rng.uniform(-50, 50), rng.randint(1, 3))]))

    def _bounds(self, schema: dict, value) -> dict:
        rng, low = self.rng, value()
        if rng.random() < 0.5:
            schema["exclusiveMinimum" if rng.random() < 0.3 else "minimum"] = low
        if rng.random() < 0.5:
            schema["exclusiveMaximum" if rng.random() < 0.3 else "maximum"] = low + abs(value()) + 1
        if rng.random() < 0.05:
            schema["multipleOf"] = 5  # refused
        return schema

    def boolean(self, depth: int) -> dict:
        return {"type": "boolean"}

    def null(self, depth: int) -> dict:
        return {"type": "null"}

    def enum(self, depth: int) -> dict:
        values = self.rng.sample(ENUM_VALUES, self.rng.randint(1, 4))
        typed = self.rng.random() < 0.3 and all(isinstance(v, str) for v in values)
        return {"type": "string", "enum": values} if typed else {"enum": values}

    def const(self, depth: int) -> dict:
        return {"const": self.rng.choice(CONST_VALUES)}

    def object(self, depth: int) -> dict:
        rng = self.rng
        names = rng.sample(NAMES, rng.randint(0, 4))
        schema: dict[str, Any] = {"type": "object", "properties": {name: self.schema(depth + 1) for name in names}}
        required = [name for name in names if rng.random() < 0.6]
        if required or rng.random() < 0.5:
            schema["required"] = required
        extra = rng.random()
        if extra < 0.4:
            schema["additionalProperties"] = False
        elif extra < 0.55:
            schema["additionalProperties"] = True
        elif extra < 0.6:
            schema["additionalProperties"] = {"type": "integer"}
        if not names and rng.random() < 0.5:
            del schema["properties"]
        if self.edges and rng.random() < 0.3:
            schema.setdefault("properties", {})[rng.choice([n for n in NAMES if n not in names])] = \
                rng.choice([False, True])
        return schema

    def array(self, depth: int) -> dict:
        rng, schema = self.rng, {"type": "array"}
        if rng.random() < 0.2:
            schema["prefixItems"] = [self.schema(depth + 1) for _ in range(rng.randint(1, 3))]
            schema.update({"items": False} if rng.random() < 0.5 else {})
        else:
            schema["items"] = self.schema(depth + 1)
        schema.update({"minItems": rng.randint(0, 2)} if rng.random() < 0.4 else {})
        schema.update({"maxItems": schema.get("minItems", 0) + rng.randint(0, 3)} if rng.random() < 0.4 else {})
        schema.update({"uniqueItems": True} if rng.random() < 0.05 else {})  # refused
        if self.edges and rng.random() < 0.2:  # no two items: uniqueItems asserts nothing
            schema.update(uniqueItems=True, maxItems=rng.randint(0, 1))
            schema.pop("minItems", None)
        if self.edges and "prefixItems" not in schema and rng.random() < 0.15:
            schema["items"] = False
            schema.pop("minItems", None)
        return schema

    def all_of(self, depth: int) -> dict:
        """allOf of objects (one through a $ref now and then) sharing some properties, sometimes
        closed, sometimes requiring what another part lists."""
        rng, parts = self.rng, []
        shared = {"id": {"type": "integer"}, "name": {"type": "string", "maxLength": 8}}
        for _ in range(rng.randint(2, 3)):
            names = rng.sample(NAMES, rng.randint(1, 3))
            props = {name: shared.get(name) or self.schema(depth + 1) for name in names}
            part: dict[str, Any] = {"type": "object", "properties": props} if rng.random() < 0.8 else {"properties": props}
            part["required"] = [name for name in names if rng.random() < 0.5]
            if rng.random() < 0.25:
                part["additionalProperties"] = False
            parts.append(part)
        if rng.random() < 0.4:
            name = f"d{len(self.defs)}"
            self.defs[name] = parts[0]
            parts[0] = {"$ref": f"#/$defs/{name}"}
        return {"allOf": parts, "description": "merged"} if rng.random() < 0.3 else {"allOf": parts}

    def ref_beside(self, depth: int) -> dict:
        """A $ref with keywords beside it (a description, a bound, more properties), or to nothing."""
        rng, name = self.rng, f"d{len(self.defs)}"
        if rng.random() < 0.1:
            return {"$ref": "#/$defs/missing"}  # refused
        kind = rng.choice(["object", "string", "integer"])
        if kind == "object":
            self.defs[name] = self.object(depth + 1)
            beside = {"properties": {"extra": {"type": "boolean"}}} if rng.random() < 0.5 else {}
        elif kind == "string":
            self.defs[name] = {"type": "string"}
            beside = {"maxLength": rng.randint(1, 6)}
        else:
            self.defs[name] = {"type": "integer", "minimum": rng.randint(-5, 5)}
            beside = {"maximum": rng.randint(6, 20)}
        return {"$ref": f"#/$defs/{name}", "description": "see there", **beside}

    def typeless(self, depth: int) -> dict:
        """Keywords of a type with no ``type``: every value of another type is an instance too."""
        rng = self.rng
        schema = rng.choice([self.object, self.array, self.string, self.integer, self.number])(depth)
        if len(schema) > 1:
            del schema["type"]
        return schema

    def nullable(self, depth: int) -> dict:
        """An object or array schema whose type is a list with null (Optional[Model])."""
        schema = (self.object if self.rng.random() < 0.6 else self.array)(depth)
        schema["type"] = [schema["type"], "null"] if self.rng.random() < 0.8 else [schema["type"]]
        return schema

    def any_of(self, depth: int) -> dict:
        branches = [self.schema(depth + 1) for _ in range(self.rng.randint(1, 3))]
        if self.edges and self.rng.random() < 0.3:
            branches.insert(self.rng.randint(0, len(branches)), self.rng.choice([False, True]))
        return {"oneOf": branches} if self.rng.random() < 0.05 else {"anyOf": branches}  # oneOf: refused

    def all_of_one(self, depth: int) -> dict:
        return {"allOf": [self.schema(depth + 1)]}

    def type_list(self, depth: int) -> dict:
        return {"type": self.rng.sample(["string", "integer", "number", "boolean", "null"], self.rng.randint(1, 3))}

    def ref(self, depth: int) -> dict:
        name = f"d{len(self.defs)}"
        if self.rng.random() < 0.3:  # a tree: the node refers to itself
            self.defs[name] = {"type": "object", "additionalProperties": False, "required": ["v"], "properties": {
                "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": f"#/$defs/{name}"}, "maxItems": 2}}}
        else:
            self.defs[name] = {}
            self.defs[name] = self.schema(depth + 1)
        return {"$ref": f"#/$defs/{name}"}


class RandomInstance:
    """Random values of a schema from ``RandomSchema`` (best effort: check them with jsonschema),
    objects with their properties in the schema's order, as a model writes them."""

    def __init__(self, root: dict, seed: int):
        self.root, self.rng = root, random.Random(seed)

    def value(self, schema: Any, depth: int = 0) -> Any:
        rng = self.rng
        if schema is True or schema == {}:
            return rng.choice([1, "x", None])
        if "allOf" in schema or ("$ref" in schema and len(schema) > 1):
            return self._all(schema, depth)
        while "$ref" in schema:
            schema = self.root["$defs"][schema["$ref"].rsplit("/", 1)[-1]]
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            return rng.choice(schema["enum"])
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return self.value(rng.choice([branch for branch in schema[key] if branch is not False]), depth)
        return getattr(self, f"_{self._kind(schema)}")(schema, depth)

    def _kind(self, schema: dict) -> str:
        """The type to write: one of a type list, or with no type mostly the one its keywords are of."""
        kind = schema.get("type")
        if isinstance(kind, list):
            return self.rng.choice(kind)
        if kind is not None:
            return kind
        keyed = [name for name, keys in (("object", ("properties", "required", "additionalProperties")),
                                         ("array", ("items", "prefixItems", "minItems", "maxItems")),
                                         ("string", ("minLength", "maxLength", "pattern", "format")),
                                         ("number", ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")))
                 if any(key in schema for key in keys)]
        if keyed and self.rng.random() < 0.7:
            return keyed[0]
        return self.rng.choice(["string", "number", "boolean", "null", "object", "array"])

    def _all(self, schema: dict, depth: int) -> Any:
        """A value of every part of an allOf (or a $ref with keywords beside it): the parts' objects
        joined, each name where it first stands in a part (as the merge writes them), else the
        first part's value."""
        parts = [self.root["$defs"][schema["$ref"].rsplit("/", 1)[-1]]] if "$ref" in schema else []
        parts += schema.get("allOf", [])
        rest = {key: value for key, value in schema.items() if key not in ("$ref", "allOf")}
        parts += [rest] if rest else []
        values = [self.value(part, depth) for part in parts if part is not True]
        if all(isinstance(value, dict) for value in values):
            joined = {key: value for part in values for key, value in part.items()}
            order = dict.fromkeys(name for part in parts for name in self._names(part))
            return {name: joined[name] for name in order if name in joined}  # the merged schema's order
        return values[0]

    def _names(self, schema: Any) -> list[str]:
        """Property names in the order the merge meets them: a $ref's target's, the allOf parts',
        then the schema's own."""
        if not isinstance(schema, dict):
            return []
        names = self._names(self.root["$defs"][schema["$ref"].rsplit("/", 1)[-1]]) if "$ref" in schema else []
        names += [name for part in schema.get("allOf", []) for name in self._names(part)]
        return names + list(schema.get("properties") or {})

    def _null(self, schema: dict, depth: int) -> None:
        return None

    def _boolean(self, schema: dict, depth: int) -> bool:
        return self.rng.random() < 0.5

    def _integer(self, schema: dict, depth: int) -> int:
        low, high = -10**6, 10**6
        if "minimum" in schema:
            low = max(low, math.ceil(schema["minimum"]))
        if "exclusiveMinimum" in schema:
            low = max(low, math.floor(schema["exclusiveMinimum"]) + 1)
        if "maximum" in schema:
            high = min(high, math.floor(schema["maximum"]))
        if "exclusiveMaximum" in schema:
            high = min(high, math.ceil(schema["exclusiveMaximum"]) - 1)
        return self.rng.choice([low, high, self.rng.randint(low, high)])

    def _number(self, schema: dict, depth: int) -> float | int:
        if self.rng.random() < 0.3:
            return self._integer(schema, depth)  # an integer is a number
        low = schema.get("minimum", schema.get("exclusiveMinimum", -1000))
        high = schema.get("maximum", schema.get("exclusiveMaximum", 1000))
        return round(self.rng.uniform(low, high), self.rng.randint(1, 4))

    def _string(self, schema: dict, depth: int) -> str:
        rng, fmt = self.rng, schema.get("format")
        if fmt == "date":
            return (datetime.date(1970, 1, 1) + datetime.timedelta(days=rng.randint(0, 40000))).isoformat()
        if fmt == "uuid":
            return str(uuid.UUID(int=rng.getrandbits(128)))
        if fmt in FORMAT_VALUES:
            return rng.choice(FORMAT_VALUES[fmt])
        if "pattern" in schema:
            return PATTERNS[schema["pattern"]]
        low = schema.get("minLength", 0)
        size = rng.randint(low, max(low, schema.get("maxLength", low + 8)))
        return "".join(rng.choice(string.ascii_letters + " é/'-") for _ in range(size))

    def _array(self, schema: dict, depth: int) -> list:
        if schema.get("items") is False and "prefixItems" not in schema:
            return []
        if "prefixItems" in schema:
            return [self.value(item, depth + 1) for item in schema["prefixItems"]]
        low = schema.get("minItems", 0)
        size = self.rng.randint(low, max(low, min(schema.get("maxItems", 3), 3)))
        return [self.value(schema.get("items", {}), depth + 1) for _ in range(size)]

    def _object(self, schema: dict, depth: int) -> dict:
        required = set(schema.get("required", []))
        return {name: self.value(sub, depth + 1) for name, sub in (schema.get("properties") or {}).items()
                if sub is not False and (name in required or (depth < 4 and self.rng.random() < 0.5))}


def format_checker() -> jsonschema.FormatChecker:
    """jsonschema's checkers of the formats dllm writes (date, email, uuid, ipv4) and this test's
    own for RFC 3339 ``time`` / ``date-time`` (jsonschema checks them only with rfc3339-validator,
    and its fallback ``time`` is draft 3's, with no offset) and ``uri`` (a scheme, no character
    RFC 3986 leaves out)."""
    checker = jsonschema.FormatChecker(["date", "email", "uuid", "ipv4"])
    checker.checks("time", raises=ValueError)(lambda v: not isinstance(v, str) or _rfc3339_time(v))
    checker.checks("date-time", raises=ValueError)(lambda v: not isinstance(v, str) or _rfc3339_date_time(v))
    checker.checks("uri", raises=ValueError)(lambda v: not isinstance(v, str) or _uri(v))
    return checker


def _rfc3339_time(text: str) -> bool:
    match = re.fullmatch(r"(\d{2}):(\d{2}):(\d{2})(\.\d+)?(?:[Zz]|[+-](\d{2}):(\d{2}))", text, re.ASCII)
    if not match:
        return False
    hour, minute, second, _, off_hour, off_minute = match.groups()
    return int(hour) < 24 and int(minute) < 60 and int(second) <= 60 and int(off_hour or 0) < 24 \
        and int(off_minute or 0) < 60


def _rfc3339_date_time(text: str) -> bool:
    day, sep, time = text.partition("T")
    if not (sep and re.fullmatch(r"\d{4}-\d{2}-\d{2}", day, re.ASCII)):
        return False
    datetime.date.fromisoformat(day)  # raises on an impossible day
    return _rfc3339_time(time)


def _uri(text: str) -> bool:
    return bool(urllib.parse.urlsplit(text).scheme) and not any(char in text for char in ' "<>\\^`{|}') \
        and text.isprintable()
