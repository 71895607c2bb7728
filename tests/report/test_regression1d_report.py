"""Table 1 of the 1D comparison: the timing columns name the setting each is at."""

import numpy as np

from ebm_jax.report.regression1d import figure2_models_markdown, table1_markdown

RECORDS = [{"method": m, "dataset": d, "kl_top_k": 0.1, "seconds_per_epoch": 0.5,
            "num_models": 5, "epochs": 20, "top_k": 3}
           for m in ("ml-mcmc-256", "nce+") for d in (1, 2)]


def test_timing_headers_state_both_settings():
    """Ours (M = 256, 8 chains, CPU) beside the paper's (M = 1024, 1024 chains, its
    GPU) read as a 60x speed-up when the headers did not say so."""
    md = table1_markdown(RECORDS, (1, 2), {"nce+": 0.066}, {"ml-mcmc-256": 30.8},
                         setting="M = 256, ML-MCMC 8 chains, CPU",
                         reference_setting="M = 1024, ML-MCMC 1024 chains, the authors' GPU")
    header = md.splitlines()[0]
    assert "| s/epoch/model at M = 256, ML-MCMC 8 chains, CPU |" in header
    assert "| paper s/epoch at M = 1024, ML-MCMC 1024 chains, the authors' GPU |" in header
    assert "| ml-mcmc-256 | 0.100 | 0.100 | 0.100 | - | 0.500 | 30.80 |" in md


def _sweep(kl_all):
    """Figure 2 records: kl_all[(method, M)] = (dataset 1's models, dataset 2's)."""
    return [{"method": meth, "dataset": d, "num_samples": m, "kl_top_k": min(models),
             "kl_all": list(models), "num_models": len(models), "epochs": 2, "top_k": 1,
             "seconds_per_epoch": 0.1}
            for (meth, m), per_dataset in kl_all.items()
            for d, models in zip((1, 2), per_dataset)]


def test_figure2_with_error_bars_over_every_model_and_the_papers_differences():
    """Every model's D_KL (mean +- se over models, datasets averaged), and the claim's
    differences (NCE and NCE+ against ML-IS and KLD-IS), unpaired, in bold only beyond
    twice their standard error; a diverged model is left out and counted."""
    records = _sweep({
        ("nce", 1): ([0.1, 0.2, 0.3], [0.1, 0.2, 0.3]),
        ("ml-is", 1): ([1.0, 1.1, float("inf")], [1.0, 1.1, 1.2]),
        ("nce", 4): ([0.1, 0.2, 0.3], [0.1, 0.2, 0.3]),
        ("ml-is", 4): ([0.0, 0.3, 0.6], [0.0, 0.3, 0.6]),
    })
    md = figure2_models_markdown(records)
    se_nce = np.sqrt(2 * (0.01 / 3)) / 2  # sd 0.1 over 3 models on each dataset
    assert f"| nce | {0.2:.3f} +- {se_nce:.3f} | {0.2:.3f} +- {se_nce:.3f} |" in md
    assert "(1 not finite)" in md.splitlines()[3]  # ml-is at M = 1
    mean = ((0.2 - 1.05) + (0.2 - 1.1)) / 2
    assert f"| nce - ml-is | **{mean:+.3f} +- " in md  # beyond 2 se at M = 1
    assert "| nce - ml-is | " in md and f"| {0.2 - 0.3:+.3f} +- " in md  # within at M = 4
    assert "**-0.100" not in md
    assert "kld-is" not in md  # pairs whose methods did not run are left out
