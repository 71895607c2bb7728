"""The one source of the papers' claims and their status here: `docs/claims.toml`.

Each `[[claim]]` has

    paper     the paper's short name ("EBM regression", "MoCo", "SoCL", ...)
    claim     the claim in the paper's words, with its table or figure
    number    the paper's figure and its dataset ("+2.8 AUC, GOT-10k -> OTB")
    status    one of STATUSES: "holds", "does not hold", "unresolved" (within noise)
    ours      our figure with its error bars, as the stored run gives it
    run       the one command's CONFIG:VARIANT ("socl_table6_noisy_points:quick")
    page      the docs page that shows the run ("socl.md")
    own       true for a check the paper does not make (labelled as the project's own)

The README's claim table (`<!-- claims: README -->`) and each page's
(`<!-- claims: socl.md -->`) are generated from it by `python -m ebm_jax.report.stored
sync`; `check` keeps them in sync and each entry valid.
"""

from __future__ import annotations

from pathlib import Path

from ebm_jax.report.provenance import StoredError, read_tables

CLAIMS = Path("docs") / "claims.toml"
STATUSES = ("holds", "does not hold", "unresolved")
FIELDS = ("paper", "claim", "number", "status", "ours", "run", "page")
MAX_WORDS = 24  # a cell of a claim table: "at most about 20 words"


def load(root: Path) -> list[dict]:
    path = root / CLAIMS
    entries = read_tables(path, "claim", "a claims file")
    for i, c in enumerate(entries, 1):
        missing = [f for f in FIELDS if not isinstance(c.get(f), str) or not c[f].strip()]
        if missing:
            raise StoredError(f"{path}: claim {i} ({c.get('claim', '?')!r}) lacks "
                              f"{', '.join(missing)}")
    return entries


def problems(root: Path) -> list[str]:
    """Every invalid entry of the claims file, a line each naming it."""
    from ebm_jax.config import ConfigError, load_module, split_spec
    path = root / CLAIMS
    try:
        entries = load(root)
    except StoredError as e:
        return [str(e)]
    out = []
    for i, c in enumerate(entries, 1):
        where = f"{path}: claim {i} ({c['claim'][:40]!r})"
        if c["status"] not in STATUSES:
            out.append(f"{where}: status must be one of {list(STATUSES)}, got "
                       f"{c['status']!r}")
        if not (root / "docs" / c["page"]).is_file():
            out.append(f"{where}: page docs/{c['page']} does not exist")
        for f in ("claim", "number", "ours"):
            if len(c[f].split()) > MAX_WORDS:
                out.append(f"{where}: {f} has {len(c[f].split())} words, at most "
                           f"{MAX_WORDS}")
        try:
            file, variant = split_spec(c["run"])
            module = load_module(file)
            if variant not in tuple(module.VARIANTS):
                out.append(f"{where}: run {c['run']}: {file.name} has no variant "
                           f"{variant!r} (it has {', '.join(module.VARIANTS)})")
        except ConfigError as e:
            out.append(f"{where}: run {c['run']}: {e}")
    return out


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def table(root: Path, which: str, page: Path) -> str:
    """The claim table of the README (`which` = "README") or of one docs page."""
    entries = load(root)
    readme = which == "README"
    if not readme:
        entries = [c for c in entries if c["page"] == which]
        if not entries:
            raise StoredError(f"{page}: <!-- claims: {which} --> but {root / CLAIMS} has "
                              f"no claim with page = {which!r}")
    head = ["paper", "claim", "paper's figure", "status", "here", "one command"]
    if readme:
        head.append("page")
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in entries:
        claim = _cell(c["claim"]) + (" *(the project's own check)*" if c.get("own") else "")
        cells = [_cell(c["paper"]), claim, _cell(c["number"]), f"**{c['status']}**",
                 _cell(c["ours"]), f"`ebm-jax run {c['run']}`"]
        if readme:  # linked from the page that holds the table
            title = c["page"].removesuffix(".md")
            where = "" if page.parent.resolve() == (root / "docs").resolve() else "docs/"
            cells.append(f"[{title}]({where}{c['page']})")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"
