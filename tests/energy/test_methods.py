"""The one parser of the paper's method names (`ebm_jax.energy.methods`), as the
detection losses and the 1D regression recipe use it."""

import pytest

from ebm_jax.energy import boxes
from ebm_jax.energy.methods import BOX_LOSSES, mcmc_steps, parse_method
from ebm_jax.recipes import regression1d


@pytest.mark.parametrize("name, steps", [
    ("ml-mcmc-1", 1), ("ml-mcmc-16", 16), ("ml-mcmc-256", 256), ("ml-mcmc-016", 16),
    ("ml-mcmc-0", None), ("ml-mcmc", None), ("ml-mcmc-", None), ("ml-mcmc-x", None),
    ("ml-mcmc-1.5", None), ("ml-mcmc--1", None), ("ml-mcmc-\u00b2", None), ("nce", None),
])
def test_mcmc_steps(name, steps):
    assert mcmc_steps(name) == steps


def test_parse_method_on_the_box_losses_and_on_given_names():
    assert parse_method("ml-mcmc-4") == ("ml-mcmc", {"num_steps": 4})
    for name in BOX_LOSSES:
        if name != "ml-mcmc":
            assert parse_method(name) == (name, {})
    with pytest.raises(ValueError, match=r"method must be one of \['ml-is', 'kld-is', "
                       r"'nce', 'nce\+', 'dsm'\] or ml-mcmc-<L> \(L Langevin steps >= 1\), "
                       r"got 'sm'"):
        parse_method("sm")
    assert parse_method("sm", ("sm", "nce")) == ("sm", {})
    assert parse_method("ml-mcmc-2", ("sm",)) == ("ml-mcmc", {"num_steps": 2})
    for bad in ("ml-mcmc", "ml-mcmc-0", "ml-is"):
        with pytest.raises(ValueError, match=r"one of \['sm', 'ml-mcmc'\] or ml-mcmc-<L>"):
            parse_method(bad, ("sm", "ml-mcmc"))


def test_detection_and_regression_use_the_one_parser():
    assert boxes.parse_method is parse_method
    assert regression1d.mcmc_steps is mcmc_steps
    assert regression1d.check_method("ml-mcmc-3") == "ml-mcmc-3"
    assert regression1d.check_method("sm") == "sm"
    for bad in ("ml-mcmc-0", "ml-mcmc", "foo"):
        with pytest.raises(ValueError, match=r"method must be one of \['ml-is', .*'nce\+'\] "
                           r"or ml-mcmc-<L>"):
            regression1d.check_method(bad)
