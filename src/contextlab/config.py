"""Typed configs: dataclasses loaded from TOML and overridden with ``--set a.b=value``.

Every configurable thing in contextlab is a dataclass whose fields carry a one-line help
text (``opt(default, "help")``). A config is built from a TOML file plus overrides, and is
checked strictly: an unknown key or a value of the wrong type fails with one line naming
the key (``UserError``), never a silent default. The resolved config is written next to
every artifact (``save_toml``) so a result always says how it was made.

Trade-off: we check types ourselves from the annotations (ints, floats, strings, bools,
lists, optionals, literals, nested dataclasses) instead of pulling in a validation
framework; that covers everything our configs use and keeps the errors in our words.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

from contextlab.errors import UserError
from contextlab.io import atomic_write_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

T = TypeVar("T")
_MISSING = dataclasses.MISSING


def opt(default: Any = _MISSING, help: str = "", *, factory: Any = _MISSING) -> Any:
    """A dataclass field with a one-line help text (shown by ``--help`` and in errors)."""
    meta = {"help": help}
    if factory is not _MISSING:
        return dataclasses.field(default_factory=factory, metadata=meta)
    if isinstance(default, (list, dict, set)):
        value = default
        return dataclasses.field(default_factory=lambda: type(value)(value), metadata=meta)
    if dataclasses.is_dataclass(default) and not isinstance(default, type):
        value = default
        return dataclasses.field(default_factory=lambda: dataclasses.replace(value), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def field_help(cls: type, name: str) -> str:
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f.metadata.get("help", "")
    return ""


# ---------------------------------------------------------------------------- checking


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in get_args(tp))
    if origin is list:
        (inner,) = get_args(tp) or (Any,)
        return f"list of {_type_name(inner)}"
    if origin is dict:
        return "table"
    if tp is type(None):
        return "none"
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Return ``value`` as type ``tp`` or raise UserError naming ``key``."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        return _coerce_union(value, tp, key)
    if origin is Literal:
        if value in get_args(tp):
            return value
        raise _type_error(key, value, tp)
    if origin is list:
        return _coerce_list(value, tp, key)
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise _type_error(key, value, tp)
        return dict(value)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise _type_error(key, value, tp)
        return from_dict(tp, value, prefix=key)
    scalar = _SCALARS.get(tp)
    if scalar is None:
        return value
    out = scalar(value)
    if out is _MISSING:
        raise _type_error(key, value, tp)
    return out


def _coerce_union(value: Any, tp: Any, key: str) -> Any:
    """The first member type that accepts ``value``; "none"/"null" for an optional."""
    args = get_args(tp)
    none_text = isinstance(value, str) and value.lower() in ("none", "null")
    if (value is None or none_text) and type(None) in args:
        return None
    for arg in args:
        if arg is type(None):
            continue
        try:
            return _coerce(value, arg, key)
        except UserError:
            continue
    raise _type_error(key, value, tp)


def _coerce_list(value: Any, tp: Any, key: str) -> list:
    (inner,) = get_args(tp) or (Any,)
    if isinstance(value, str):  # "--set a.b=1,2,3" convenience
        value = [v for v in value.split(",") if v != ""]
    if not isinstance(value, (list, tuple)):
        raise _type_error(key, value, tp)
    return [_coerce(v, inner, f"{key}[{i}]") for i, v in enumerate(value)]


# scalar readers: the value as the type, or _MISSING when it is not one (the caller names the key)


def _as_bool(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
        return value.lower() in ("true", "1", "yes")
    return _MISSING


def _as_int(value: Any) -> Any:
    if isinstance(value, bool):
        return _MISSING
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(float(value)) if _is_int_like(value) else int(value)
        except ValueError:
            pass
    return _MISSING


def _as_float(value: Any) -> Any:
    if isinstance(value, bool):
        return _MISSING
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    return _MISSING


_SCALARS = {
    bool: _as_bool,
    int: _as_int,
    float: _as_float,
    str: lambda v: v if isinstance(v, str) else _MISSING,
    Path: lambda v: Path(v) if isinstance(v, (str, Path)) else _MISSING,
}


def _is_int_like(text: str) -> bool:
    """'1e6' and '2_000' are accepted for ints when they are whole numbers."""
    try:
        return float(text).is_integer() and not text.strip().lstrip("-").isdigit()
    except ValueError:
        return False


def _type_error(key: str, value: Any, tp: Any) -> UserError:
    return UserError(f"config key '{key}' must be {_type_name(tp)}, got {value!r}")


_RENAME_NOTED: set[str] = set()


def _renamed_keys(cls: type, data: dict, prefix: str) -> dict:
    """``data`` with the old names a dataclass declares in ``RENAMED = {old: new}`` read as
    the new ones (said once per key on stderr); both names at once is an error."""
    renamed = getattr(cls, "RENAMED", {})
    if not any(old in data for old in renamed):
        return data
    out = dict(data)
    for old, new in renamed.items():
        if old not in out:
            continue
        full_old, full_new = (f"{prefix}.{k}" if prefix else k for k in (old, new))
        if new in out:
            raise UserError(f"config keys '{full_old}' and '{full_new}' are the same; keep only '{full_new}'")
        out[new] = out.pop(old)
        if full_old not in _RENAME_NOTED:
            _RENAME_NOTED.add(full_old)
            print(f"note: config key '{full_old}' is read as '{full_new}' (its new name)", file=sys.stderr)
    return out


def from_dict(cls: type[T], data: dict, prefix: str = "") -> T:
    """Build dataclass ``cls`` from a (possibly nested) dict, strictly.

    A dataclass may declare ``RENAMED: ClassVar[dict] = {old: new}``: old configs, run
    directories and ``--set`` overrides that use an old key name keep working."""
    hints = get_type_hints(cls)
    names = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in _renamed_keys(cls, data, prefix).items():
        full = f"{prefix}.{key}" if prefix else key
        if key not in names:
            valid = ", ".join(sorted(names))
            where = f" under '{prefix}'" if prefix else ""
            if not names:
                raise UserError(f"unknown config key '{full}': {prefix or 'this'} takes no keys")
            raise UserError(f"unknown config key '{full}' (valid keys{where}: {valid})")
        kwargs[key] = _coerce(value, hints[key], full)
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required field without a value
        raise UserError(f"config '{prefix or cls.__name__}' is incomplete: {exc}") from None
    except ValueError as exc:  # __post_init__ validation
        raise UserError(f"config '{prefix or cls.__name__}': {exc}") from None


def to_dict(obj: Any) -> dict:
    """A dataclass as a plain dict (Paths become strings, None values are dropped for TOML)."""

    def clean(v: Any) -> Any:
        if dataclasses.is_dataclass(v):
            return {f.name: clean(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, Path):
            return str(v)
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        return v

    return clean(obj)


def flat_keys(data: dict, prefix: str = "") -> dict:
    """A nested dict as {"section.key": value}, in order (a later spelling of one key wins: a grid's
    ``"train.context" = [...]`` and a ``--set grid.train.context=[...]`` are one key)."""
    out: dict = {}
    for k, v in data.items():
        if isinstance(v, dict):
            out.update(flat_keys(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


# ---------------------------------------------------------------------------- overrides


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"a.b=3"`` -> (["a", "b"], 3). The value is read as a TOML value when it parses as
    one (numbers, booleans, quoted strings, arrays), else taken as a bare string."""
    if "=" not in text:
        raise UserError(f"--set expects KEY=VALUE (e.g. --set optim.lr=3e-4), got {text!r}")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise UserError(f"--set has an empty key in {text!r}")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key.split("."), value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``--set`` overrides to a nested dict (a copy is returned)."""
    out = _deep_copy(data)
    for text in overrides:
        path, value = parse_override(text)
        node = out
        for part in path[:-1]:
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise UserError(f"--set {text}: '{part}' is a value, not a table")
            node = nxt
        node[path[-1]] = value
    return out


def _deep_copy(d: dict) -> dict:
    return {k: _deep_copy(v) if isinstance(v, dict) else v for k, v in d.items()}


def read_toml(path: str | Path) -> dict:
    path = Path(path)
    if not path.exists():
        raise UserError(f"config file not found: {path}")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8-sig"))  # -sig: a leading BOM (Notepad) is dropped
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"config file {path} is not valid TOML: {exc}") from None


def load_config(cls: type[T], path: str | Path | None = None, overrides: list[str] = ()) -> T:
    """Build ``cls`` from an optional TOML file plus ``--set`` overrides, strictly."""
    data = read_toml(path) if path is not None else {}
    return from_dict(cls, apply_overrides(data, list(overrides)))


def dumps_toml(obj: Any) -> str:
    import tomli_w

    def drop_none(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: drop_none(x) for k, x in v.items() if x is not None}
        if isinstance(v, list):
            return [drop_none(x) for x in v]
        return v

    data = obj if isinstance(obj, dict) else to_dict(obj)
    return tomli_w.dumps(drop_none(data))


def save_toml(obj: Any, path: str | Path) -> None:
    """Write a resolved config (dataclass or dict) as TOML, atomically."""
    atomic_write_text(path, dumps_toml(obj))


# ---------------------------------------------------------------------------- argparse


def add_dataclass_args(parser: Any, cls: type, *, skip: tuple[str, ...] = ()) -> None:
    """Add one ``--field-name`` option per dataclass field, with its help text and default.

    Values are parsed later by ``dataclass_from_args`` with the same strict rules as TOML,
    so ``--min-tokens 1e3`` and ``--include '*.py,*.txt'`` work like ``--set`` does.
    """
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip or dataclasses.is_dataclass(hints[f.name]):
            continue
        flag = "--" + f.name.replace("_", "-")
        default = (
            f.default
            if f.default is not _MISSING
            else (f.default_factory() if f.default_factory is not _MISSING else None)
        )
        helptext = f.metadata.get("help", "")
        helptext = f"{helptext} [{_type_name(hints[f.name])}; default: {default!r}]"
        if hints[f.name] is bool:
            parser.add_argument(flag, dest=f.name, nargs="?", const="true", default=None, help=helptext)
        else:
            tp, choice = hints[f.name], {}
            if get_origin(tp) is Literal and all(isinstance(a, str) for a in get_args(tp)):
                choice = {"choices": list(get_args(tp))}  # a wrong value names the flag, not a config key
            parser.add_argument(
                flag, dest=f.name, default=None, metavar=f.name.upper(), help=helptext, **choice
            )
    for old in getattr(cls, "RENAMED", {}):  # old option names keep working (from_dict says so once)
        parser.add_argument("--" + old.replace("_", "-"), dest=old, default=None, help=argparse.SUPPRESS)


def dataclass_from_args(cls: type[T], args: Any, base: dict | None = None) -> T:
    """Build ``cls`` from parsed argparse options (only those given) on top of ``base``."""
    data = dict(base or {})
    for name in [f.name for f in dataclasses.fields(cls)] + list(getattr(cls, "RENAMED", {})):
        value = getattr(args, name, None)
        if value is not None:
            data[name] = value
    return from_dict(cls, data)
