"""The API reference's text, generated from the code: a package's (or module's) own
docstring opening, then each public name (`__all__`) with its signature and the first
sentence of its docstring. `docs/api.md` includes it through `<!-- api: MODULE -->`
blocks, which `python -m ebm_jax.report.stored sync` fills and the tests keep in sync.
"""

from __future__ import annotations

import importlib
import inspect
import re

from ebm_jax.report.provenance import StoredError


def _first_paragraph(doc: str | None) -> str:
    text = inspect.cleandoc(doc or "").split("\n\n")[0]
    return " ".join(text.split())


_ABBREVIATIONS = ("eq", "eqs", "sec", "secs", "fig", "e.g", "i.e", "al", "vs", "cf", "no")


def _first_sentence(doc: str | None) -> str:
    """Up to the first full stop that ends a sentence (not "eq. 3", "et al. 2020")."""
    para = _first_paragraph(doc)
    for m in re.finditer(r"\. (?=[A-Z(`])", para):
        word = para[:m.start()].rsplit(" ", 1)[-1].lower().strip("(")
        if word not in _ABBREVIATIONS:
            return para[:m.start() + 1]
    return para


def _signature(obj) -> str:
    try:
        sig = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""
    # default values that print where they live (a module's file, an object's address)
    sig = re.sub(r"<module '([^']+)' from '[^']*'>", r"\1", sig)
    sig = re.sub(r"<(function|built-in function|class) ([\w.]+)[^>]*>", r"\2", sig)
    sig = re.sub(r" at 0x[0-9a-f]+", "", sig)
    return sig if len(sig) <= 110 else sig[:105] + " ...)"


def api_block(module_name: str, page) -> str:
    """The Markdown of one module's public API (see the module docstring)."""
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise StoredError(f"{page}: <!-- api: {module_name} --> names no importable "
                          f"module ({error})") from None
    names = getattr(module, "__all__", None)
    if not names:
        raise StoredError(f"{page}: {module_name} has no __all__ to document")
    out = [_first_paragraph(module.__doc__), ""]
    for name in names:
        obj = getattr(module, name, None)
        if obj is None:
            continue
        kind = "class" if inspect.isclass(obj) else ""
        own = str(getattr(obj, "__module__", "") or "").startswith("ebm_jax")
        # a signature for the project's own functions and classes only (another
        # package's objects, such as flax's filters, print by its version)
        sig = _signature(obj) if callable(obj) and own else ""
        head = f"`{kind + ' ' if kind else ''}{name}{sig}`"
        doc = _first_sentence(getattr(obj, "__doc__", None)) if (
            inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismethod(obj)) else ""
        out.append(f"- {head}" + (f": {doc}" if doc else ""))
    return "\n".join(out).replace("|", "\\|") + "\n"
