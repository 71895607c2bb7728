"""What `ebm-jax show` prints: a config's fields grouped by section, each with its value,
its default where they differ, and a one-line description taken from the comment beside
(or above) the field in its dataclass's source.

A config dataclass may name its sections (`FIELD_GROUPS`: title -> top-level field
names, in order; a nested dataclass field is shown with its own fields under it) and
the sections a config of its values does not use (`unused_groups()`); those are hidden
unless `everything` is asked for.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import io
import textwrap
import tokenize



def config_fields(cfg, prefix: str = "") -> list[tuple[str, object, object]]:
    """(dotted field name, value, default) of every field of a config dataclass, the
    fields of nested dataclasses flattened (`box_head.steps`); the default is the
    dataclass's own (`dataclasses.MISSING` where it has none)."""
    out = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out += config_fields(value, f"{prefix}{f.name}.")
        else:
            out.append((f"{prefix}{f.name}", value, default))
    return out


@functools.cache
def _class_docs(cls: type) -> dict[str, str]:
    """{field: description} of the fields a class defines in its own body: the comment
    on the field's line, else the comment lines just above it (joined)."""
    try:
        src = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    comments = {}
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    lines = src.splitlines()
    docs = {}
    for node in ast.parse(src).body[0].body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        text = comments.get(node.lineno) or comments.get(node.end_lineno)
        if text is None:  # the comment block right above the field
            above, at = [], node.lineno - 1
            while at >= 1 and lines[at - 1].strip().startswith("#"):
                above.insert(0, comments.get(at, ""))
                at -= 1
            text = " ".join(above)
        if text:
            docs[node.target.id] = text
    return docs


def field_docs(cls: type) -> dict[str, str]:
    """{field: one-line description} of a dataclass, its base classes' fields included
    (a subclass's own comment wins)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update(_class_docs(klass))
    return docs


def _short(text: str, width: int = 88) -> str:
    return text if len(text) <= width else text[:width - 3].rstrip() + "..."


def show_lines(cfg, *, everything: bool = False) -> list[str]:
    """The lines of `ebm-jax show` for a resolved config (see the module)."""
    rows = {name: (value, default) for name, value, default in config_fields(cfg)}
    width = max(len(n) for n in rows)
    top = [f.name for f in dataclasses.fields(cfg)]
    groups = dict(getattr(cfg, "FIELD_GROUPS", {}) or {})
    grouped = {f for fields in groups.values() for f in fields}
    rest = [f for f in top if f not in grouped]
    ordered = ([("settings", rest)] if rest else []) + [
        (title, [f for f in fields if f in top]) for title, fields in groups.items()]
    unused = set() if everything else set(getattr(cfg, "unused_groups", lambda: ())())
    out, hidden = [], []

    def value_lines(name: str, doc: str | None) -> None:
        v, default = rows[name]
        note = ("" if default is dataclasses.MISSING or default == v
                else f"  (default {default!r})")
        out.append(f"  --config.{name:<{width}} = {v!r}{note}")
        if doc:
            out.append(f"      {_short(doc)}")

    def field_lines(prefix: str, obj) -> None:
        docs = field_docs(type(obj))
        for f in dataclasses.fields(obj):
            name = prefix + f.name
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                out.append(f"  {name}: {_short(docs.get(f.name, ''), 70)}".rstrip(": "))
                field_lines(name + ".", value)
                continue
            value_lines(name, docs.get(f.name))

    for title, fields in ordered:
        if not fields:
            continue
        if title in unused:
            hidden.append(title)
            continue
        out.append(f"[{title}]")
        docs = field_docs(type(cfg))
        for name in fields:
            value = getattr(cfg, name)
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                head = docs.get(name) or (type(value).__doc__ or "").strip().split("\n")[0]
                out.append(f"  {name}: {_short(head, 80)}")
                field_lines(name + ".", value)
                continue
            value_lines(name, docs.get(name))
    if hidden:
        out.append(f"(not used by this config, hidden: {', '.join(hidden)}; "
                   "`ebm-jax show --all` shows them)")
    return out


__all__ = ["config_fields", "field_docs", "show_lines"]
