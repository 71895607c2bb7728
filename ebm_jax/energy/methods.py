"""Method names of the paper's tables (Gustafsson et al. 2020, "How to Train Your EBM
for Regression", Tables 1-2): a loss of `ebm_jax.energy.LOSSES` by its name ("ml-is",
"kld-is", "nce", "nce+", "dsm", "sm"), or "ml-mcmc-<L>", ML-MCMC with L Langevin steps
(sec. 3.3; Table 1 has L = 1, 16, 256). The one parser of these names, shared by the
detection losses (`ebm_jax.energy.boxes`) and the 1D regression recipe.

    parse_method("ml-mcmc-4")  # ("ml-mcmc", {"num_steps": 4})
    parse_method("nce+")       # ("nce+", {})
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# the losses a box method may name (SM needs the Hessian trace of f in y: not used)
BOX_LOSSES = ("ml-is", "kld-is", "ml-mcmc", "nce", "nce+", "dsm")

_MCMC = re.compile(r"ml-mcmc-(\d+)")


def mcmc_steps(method: str) -> int | None:
    """L of "ml-mcmc-L" (L an integer >= 1), or None for any other name (including
    "ml-mcmc" and "ml-mcmc-0")."""
    match = _MCMC.fullmatch(str(method))
    steps = int(match.group(1)) if match else 0
    return steps if steps >= 1 else None


def parse_method(method: str, names: Sequence[str] | None = None) -> tuple[str, dict]:
    """A method name as (loss name, hyperparameters it fixes): "ml-mcmc-4" ->
    ("ml-mcmc", {"num_steps": 4}); a name in `names` -> (name, {}). `names` defaults
    to the losses of Table 2 (`BOX_LOSSES` but plain "ml-mcmc", which needs its L). A
    ValueError names the allowed values otherwise."""
    names = tuple(m for m in BOX_LOSSES if m != "ml-mcmc") if names is None else tuple(names)
    steps = mcmc_steps(method)
    if steps is not None:
        return "ml-mcmc", {"num_steps": steps}
    if method in names and method != "ml-mcmc":
        return method, {}
    raise ValueError(f"method must be one of {list(names)} or ml-mcmc-<L> (L Langevin "
                     f"steps >= 1), got {method!r}")
