"""The plan of the detection recipe (`ebm_jax.recipes.detection`): which energy heads
each table of a config trains (one `HeadSpec` per method, M and hyperparameters, named
so that the same head of two tables is one stage), how many stages a run has, and each
method's refinement step lengths. `cfg` is the recipe's Config (its fields only: this
module does not import it)."""

from __future__ import annotations

import dataclasses

from ebm_jax.energy.boxes import parse_method


@dataclasses.dataclass(frozen=True)
class HeadSpec:
    """One head stage: a method, M, and its loss's hyperparameters (resolved)."""

    name: str
    method: str
    num_samples: int
    hyperparameters: tuple  # sorted (name, value) pairs

    @property
    def hp(self) -> dict:
        return dict(self.hyperparameters)


def method_hyperparameters(cfg, method: str) -> dict:
    """The config's hyperparameters of a method's loss (other than M)."""
    loss, fixed = parse_method(method)
    hp = {"ml-is": {"sigmas": cfg.is_sigmas},
          "kld-is": {"sigmas": cfg.is_sigmas, "label_sigma": cfg.kld_label_sigma},
          "ml-mcmc": {"step_size": cfg.mcmc_step_size},
          "nce": {"sigmas": cfg.nce_sigmas},
          "nce+": {"sigmas": cfg.nce_sigmas, "beta": cfg.nce_plus_beta},
          "dsm": {"sigma": cfg.dsm_sigma}}[loss]
    return {**hp, **fixed}


def head_spec(cfg, method: str, num_samples: int, **changes) -> HeadSpec:
    """The stage of `method` at M = num_samples with some hyperparameters changed; the
    name lists the changes that differ from the config's values (so the same head of
    two tables is one stage)."""
    hp = method_hyperparameters(cfg, method)
    unknown = set(changes) - set(hp)
    if unknown:
        raise ValueError(f"{method} has no hyperparameter {sorted(unknown)}; it has "
                         f"{sorted(hp)}")
    parts = [f"head-{method}", f"m{num_samples}"]
    for k, v in sorted(changes.items()):
        v = tuple(v) if isinstance(v, (list, tuple)) else v
        if v != hp[k]:
            parts.append(k + ("_".join(f"{x:g}" for x in v) if isinstance(v, tuple)
                              else f"{v:g}"))
        hp[k] = v
    return HeadSpec("-".join(parts), method, int(num_samples), tuple(sorted(hp.items())))


def plan(cfg) -> dict[str, list[HeadSpec]]:
    """The heads of each table of `cfg.tables`."""
    m = cfg.num_samples
    rows = {"table2": lambda: [head_spec(cfg, x, m) for x in cfg.methods],
            "m": lambda: [head_spec(cfg, x, v) for x in cfg.m_methods for v in cfg.m_values],
            "beta": lambda: [head_spec(cfg, "nce", m)]
            + [head_spec(cfg, "nce+", m, beta=b) for b in cfg.betas],
            "sigma": lambda: [head_spec(cfg, "nce", m, sigmas=s) for s in cfg.sigma_sets]}
    return {t: rows[t]() for t in cfg.tables}


def count_stages(cfg) -> int:
    """The run's training stages, for "stage i of n" and the run's ETA: per seed the
    backbone and one head per distinct head of the tables."""
    heads = dict.fromkeys(s for rows in plan(cfg).values() for s in rows)
    return len(cfg.run_seeds) * (1 + len(heads))


def step_lengths(cfg, method: str) -> tuple[float, float, float, float]:
    """(l_c, l_c, l_s, l_s) of a method's loss, times `step_scale`."""
    table = {name: (lc, ls) for name, lc, ls in cfg.step_lengths}
    lc, ls = table[parse_method(method)[0]]
    return tuple(v * cfg.step_scale for v in (lc, lc, ls, ls))


__all__ = ["HeadSpec", "count_stages", "head_spec", "method_hyperparameters", "plan",
           "step_lengths"]
