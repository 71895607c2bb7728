"""Experiment configs: a Python file of values, loaded by path, with typed overrides.

    cfg = load_config("experiments/ebm_regression/table1_toy1d.py:quick",
                      ["epochs=3", "methods=nce,nce+"])

A config file defines `get_config(variant) -> Config`, where `Config` is a frozen
dataclass of its recipe (`ebm_jax.recipes.*`), and `VARIANTS`, the names it accepts.
Its docstring starts with the command that runs it. Overrides are typed from the
dataclass fields (int, float, bool, str, tuples of those, tuples of tuples written
"a,b;c,d", `X | None`); the dataclass
validates itself in `__post_init__`, so Python users and the command line get the same
checks. Every error is a `ConfigError` naming the file, variant or field.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import types
import typing
from pathlib import Path

CONFIG_ROOT = "experiments"
SHORT_NAME_HELP = ("a config file path/to/file.py, or the name of a shipped config "
                   "(socl_table1_ablation, tracking/socl_table1_ablation.py; `ebm-jax list`)")
SEED_RANGE = (0, 2**31 - 1)  # every seed a run or a dataset takes (int32, non-negative)


class ConfigError(ValueError):
    """A config file, variant or override that cannot be used."""


def split_spec(spec: str) -> tuple[Path, str | None]:
    """"path/to/file.py[:variant]" -> (path, variant or None). A short name
    ("socl_table1_ablation[:variant]", "tracking/socl_table1_ablation.py") that is not
    a file here is the shipped config of that name (`shipped_root`)."""
    text = str(spec)
    path, sep, variant = text.rpartition(":")
    if not sep or not (path.endswith(".py") or _is_name(path)):
        path, variant = text, None
    return resolve_config_path(path), variant


def _is_name(text: str) -> bool:
    """A short config name: letters, digits, `_`, `-` and `/`, no suffix."""
    return bool(text) and all(c.isalnum() or c in "_-/" for c in text)


def shipped_root() -> Path:
    """The config files that ship with the package: `ebm_jax/experiments` (in a clone,
    a link to the repository's `experiments/`)."""
    return Path(__file__).resolve().parent / "experiments"


def resolve_config_path(text: str | Path) -> Path:
    """The config file that `text` names: an existing path as given; else a short name
    of a shipped config, with or without its folder and `.py`. Anything else is
    returned unchanged (`load_module` then says it does not exist)."""
    path = Path(text)
    if path.is_file() or path.is_absolute():
        return path
    name = str(text) if str(text).endswith(".py") else f"{text}.py"
    root = shipped_root()
    if not root.is_dir() or ".." in Path(name).parts:
        return path
    direct = root / name
    if direct.is_file():
        return direct
    if "/" not in name:
        found = sorted(root.rglob(name))
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise ConfigError(f"config name {text!r} is ambiguous: "
                              f"{', '.join(config_name(p) for p in found)}")
    return path


def config_name(path: str | Path) -> str:
    """A config file's name under the shipped root ("tracking/socl_table6.py"), the
    same however the path is spelled; a file elsewhere keeps its path."""
    path = Path(path)
    try:
        return path.resolve().relative_to(shipped_root().resolve()).as_posix()
    except ValueError:
        return str(path)


# `matmul_precision` of the configs whose results depend on it on a GPU or TPU
# (`jax.default_matmul_precision`; the runner applies it around the whole run)
MATMUL_PRECISIONS = ("default", "high", "highest")

# the metadata of a field added after results were stored, whose default keeps what runs
# did before it: left out of the config's identity at its default, so that those results
# stay fresh (`dataclasses.field(default=..., metadata=ADDED_FIELD)`)
ADDED_FIELD = {"identity": "omitted at its default"}


def config_from_preset(config_type, presets: dict, variant: str, fields: dict,
                       per_variant: dict):
    """A config file's variant from named presets: `config_type` with the preset
    `variant`, then `fields`, then the fields `per_variant[variant]`; a ConfigError
    names the variants for an unknown one."""
    if variant not in presets:
        raise ConfigError(f"variant must be one of {list(presets)}, got {variant!r}")
    unknown = sorted(set(per_variant) - set(presets))
    if unknown:
        raise ConfigError(f"per-variant fields of {unknown}: the variants are "
                          f"{list(presets)}")
    return config_type(**{**presets[variant], **fields, **(per_variant.get(variant) or {})})


def config_identity(cfg) -> str:
    """The identity of a resolved config: 16 hex digits of the hash of all its fields
    (`ebm_jax.io.content_hash` of `dataclasses.asdict`), but a field marked
    `ADDED_FIELD` that holds its default. Two runs with one identity ran the same
    settings, whatever file, variant or overrides produced them."""
    from ebm_jax.io import content_hash

    fields = dataclasses.asdict(cfg)
    for f in dataclasses.fields(cfg):
        if f.metadata.get("identity") == ADDED_FIELD["identity"] and (
                fields.get(f.name) == f.default):
            del fields[f.name]
    return content_hash(fields)


def config_changes(old: dict, new: dict, prefix: str = "") -> list[str]:
    """The dotted names of the fields whose values differ between two configs as
    dicts (`dataclasses.asdict`, or read back from JSON): changed, added or removed."""
    from ebm_jax.io import json_normalised

    old, new = json_normalised(old), json_normalised(new)
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, _MISSING), new.get(key, _MISSING)
        if isinstance(a, dict) and isinstance(b, dict):
            out += config_changes(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}")
    return out


_MISSING = object()


def load_module(path: str | Path) -> types.ModuleType:
    """Imports a config file by path (it need not be on sys.path)."""
    path = Path(path)
    if path.suffix != ".py":
        raise ConfigError(f"CONFIG must be a .py file (path/to/file.py[:variant]) or "
                          "the name of a shipped config (`ebm-jax list`), got "
                          f"{str(path)!r}, which is neither")
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist (see `ebm-jax list`)")
    name = "ebm_jax_config_" + "_".join(path.resolve().with_suffix("").parts[-3:])
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ConfigError:
        raise
    except Exception as e:  # a config file with a syntax or import error
        raise ConfigError(f"config file {_where(path, e)} failed to load: "
                          f"{type(e).__name__}: {e}") from e
    for attr in ("get_config", "VARIANTS"):
        if not hasattr(module, attr):
            raise ConfigError(f"config file {path} defines no {attr}")
    return module


def _where(path, error: BaseException) -> str:
    """"path:line" of the innermost line of config file `path` in `error`'s traceback
    (the line of a SyntaxError), or the path alone."""
    import traceback

    line = None
    if isinstance(error, SyntaxError) and error.filename and Path(
            error.filename).resolve() == Path(path).resolve():
        line = error.lineno
    for frame in traceback.extract_tb(error.__traceback__):
        if Path(frame.filename).resolve() == Path(path).resolve():
            line = frame.lineno
    return f"{path}:{line}" if line else str(path)


def get_variant(module: types.ModuleType, variant: str | None, path="config"):
    variants = tuple(module.VARIANTS)
    variant = variant or variants[0]
    if variant not in variants:
        raise ConfigError(f"{path}: variant must be one of {list(variants)}, "
                          f"got {variant!r}")
    try:
        cfg = module.get_config(variant)
    except ConfigError:  # the recipe's own check, already naming the field
        raise
    except Exception as e:  # a typo'd field, a missing import, ... in the file
        file = getattr(module, "__file__", None) or path
        raise ConfigError(f"config file {_where(file, e)}: get_config({variant!r}) "
                          f"failed: {type(e).__name__}: {e}") from e
    if not (dataclasses.is_dataclass(cfg) and not isinstance(cfg, type)):
        raise ConfigError(f"{path}: get_config({variant!r}) must return a dataclass "
                          f"instance, got {type(cfg).__name__}")
    return declared_floats(cfg)


def declared_floats(cfg):
    """`cfg` with every int held by a field declared float (or tuple[float, ...]) made
    a float, in nested config dataclasses too: a file's `region_fields=2` is then the
    setting, and the identity, of `--config.region_fields=2` (which parses to 2.0)."""
    def number(v):
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v

    hints = typing.get_type_hints(type(cfg))
    changes = {}
    for f in dataclasses.fields(cfg):
        value, typ = getattr(cfg, f.name), hints.get(f.name)
        if typ is float:
            new = number(value)
        elif (typing.get_origin(typ) is tuple and typing.get_args(typ)[:1] == (float,)
              and isinstance(value, tuple)):
            new = tuple(number(v) for v in value)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            new = declared_floats(value)
        else:
            continue
        if new is not value and repr(new) != repr(value):  # 2 -> 2.0, (1, 2) -> (1.0, 2.0)
            changes[f.name] = new
    return dataclasses.replace(cfg, **changes) if changes else cfg


def load_config(spec: str, overrides: typing.Sequence[str] = ()):
    """Loads "file.py[:variant]" (default: the file's first variant) and applies
    "field=value" overrides. Returns the config dataclass."""
    path, variant = split_spec(spec)
    module = load_module(path)
    cfg = apply_overrides(get_variant(module, variant, path), overrides)
    source = {"file": config_name(path), "variant": variant or tuple(module.VARIANTS)[0],
              "overrides": [str(o).removeprefix("--config.") for o in overrides]}
    try:  # where it came from, for the provenance of its results (not a field)
        object.__setattr__(cfg, SOURCE_ATTR, source)
    except (AttributeError, TypeError):  # a dataclass with __slots__
        pass
    return cfg


SOURCE_ATTR = "_ebm_jax_source"


def config_source_of(cfg) -> dict | None:
    """{"file", "variant", "overrides"} of a config made by `load_config` (None for one
    built otherwise, or changed since by `dataclasses.replace`)."""
    return getattr(cfg, SOURCE_ATTR, None)


# --------------------------------------------------------------------------- overrides


def _parse_scalar(text: str, typ, field: str):
    text = text.strip()
    if typ is bool:
        low = text.lower()
        if low in ("true", "1", "yes"):
            return True
        if low in ("false", "0", "no"):
            return False
        raise ConfigError(f"--config.{field} must be true or false, got {text!r}")
    if typ is int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"--config.{field} must be an integer, got {text!r}") from None
    if typ is float:
        try:
            v = float(text)
        except ValueError:
            raise ConfigError(f"--config.{field} must be a number, got {text!r}") from None
        if not math.isfinite(v):
            raise ConfigError(f"--config.{field} must be a finite number, got {text!r}")
        return v
    if typ is str:
        return text
    raise ConfigError(f"--config.{field} has a type ({typ}) that cannot be set from the "
                      "command line; set it in the config file")


def parse_value(text: str, typ, field: str):
    """A command-line string as a value of the annotated type `typ`."""
    origin = typing.get_origin(typ)
    args = typing.get_args(typ)
    if origin in (typing.Union, types.UnionType):
        if type(None) in args and text.strip().lower() in ("none", "null"):
            return None
        if type(None) in args and not text.strip():
            # an empty value is not "no value": `--config.pretrained=` with a forgotten
            # path must not silently train from a random start
            raise ConfigError(f"--config.{field} is empty: give a value, or "
                              f"--config.{field}=none for none")
        rest = [a for a in args if a is not type(None)]
        errors = []
        for a in rest:
            try:
                return parse_value(text, a, field)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if len(errors) == 1 else
                          f"--config.{field} got {text!r}, which is none of: "
                          + "; ".join(errors))
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis and typing.get_origin(args[0]) is tuple:
            # a tuple of tuples: groups separated by ";", e.g. "0.1,0.2,0.4;0.05,0.1,0.2"
            groups = [g for g in text.split(";") if g.strip()]
            return tuple(parse_value(g, args[0], field) for g in groups)
        items = [t for t in text.replace("(", "").replace(")", "").split(",")
                 if t.strip()]
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(parse_value(t, args[0], field) for t in items)
        if len(items) != len(args):
            raise ConfigError(f"--config.{field} needs {len(args)} comma-separated "
                              f"values, got {text!r}")
        return tuple(parse_value(t, a, field) for t, a in zip(items, args))
    return _parse_scalar(text, typ, field)


def apply_overrides(cfg, overrides: typing.Sequence[str], *, _prefix: str = ""):
    """`dataclasses.replace(cfg, ...)` from "field=value" strings (a leading
    "--config." is accepted); the dataclass's `__post_init__` validates the result. A
    field that holds a dataclass takes dotted overrides of its own fields
    ("box_head.steps=5")."""
    hints = typing.get_type_hints(type(cfg))
    names = [f.name for f in dataclasses.fields(cfg) if f.init]
    changes, nested = {}, {}
    for item in overrides:
        text = item.removeprefix("--").removeprefix("config.")
        field, sep, value = text.partition("=")
        field = field.strip().replace("-", "_")
        if not sep:
            raise ConfigError(f"override {item!r} must be --config.FIELD=VALUE")
        head, dot, rest = field.partition(".")
        if head not in names:
            close = [n for n in names if head in n or n in head]
            hint = f" (did you mean {_prefix}{close[0]}?)" if close else ""
            raise ConfigError(f"--config.{_prefix}{head}: {type(cfg).__name__} has no "
                              f"field {head!r}{hint}; fields: {', '.join(names)}")
        if dot:
            inner = getattr(cfg, head)
            if not (dataclasses.is_dataclass(inner) and not isinstance(inner, type)):
                raise ConfigError(f"--config.{_prefix}{field}: {_prefix}{head} is not a "
                                  "group of settings (only a field that holds a "
                                  "dataclass takes dotted names)")
            nested.setdefault(head, []).append(f"{rest}={value}")
            continue
        changes[field] = parse_value(value, hints[field], _prefix + field)
    for head, items in nested.items():
        changes[head] = apply_overrides(changes.get(head, getattr(cfg, head)), items,
                                        _prefix=f"{_prefix}{head}.")
    if not changes:
        return cfg
    try:
        return dataclasses.replace(cfg, **changes)
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:  # a group's own check: name the group's flag
        where = f"--config.{_prefix.rstrip('.')}: " if _prefix else ""
        raise ConfigError(where + str(e)) from e


# --------------------------------------------------------------------------- checks


class Checks:
    """Validation helpers for config `__post_init__`: each raises ConfigError naming
    `--config.<field>` and the allowed range."""

    def __init__(self, cfg):
        self.cfg = cfg

    def _fail(self, field, value, allowed):
        raise ConfigError(f"--config.{field} must be {allowed}, got {value!r}")

    def int_range(self, field: str, low: int, high: int | None = None) -> None:
        v = getattr(self.cfg, field)
        if isinstance(v, bool) or not isinstance(v, int) or v < low or (
                high is not None and v > high):
            self._fail(field, v, f"an integer in [{low}, {high}]" if high is not None
                       else f"an integer >= {low}")

    def positive(self, field: str) -> None:
        v = getattr(self.cfg, field)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (
                math.isfinite(v) and v > 0):
            self._fail(field, v, "a finite number > 0")

    def float_range(self, field: str, low: float, high: float, *,
                    open_low=False, open_high=False) -> None:
        v = getattr(self.cfg, field)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        ok = ok and (v > low if open_low else v >= low) and (
            v < high if open_high else v <= high)
        if not ok:
            lo, hi = "(" if open_low else "[", ")" if open_high else "]"
            self._fail(field, v, f"a number in {lo}{low}, {high}{hi}")

    def boolean(self, field: str) -> None:
        v = getattr(self.cfg, field)
        if not isinstance(v, bool):
            self._fail(field, v, "True or False")

    def one_of(self, field: str, allowed) -> None:
        v = getattr(self.cfg, field)
        if v not in allowed:
            self._fail(field, v, f"one of {list(allowed)}")

    def each_in(self, field: str, allowed) -> None:
        v = getattr(self.cfg, field)
        bad = [x for x in v if x not in allowed]
        if bad or not v:
            self._fail(field, v, f"a non-empty list drawn from {list(allowed)}")

    def seed(self, field: str = "seed") -> None:
        self.int_range(field, *SEED_RANGE)
