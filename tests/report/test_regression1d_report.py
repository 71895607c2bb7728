"""Table 1 of the 1D comparison: the timing columns name the setting each is at."""

from ebm_jax.report.regression1d import table1_markdown

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
