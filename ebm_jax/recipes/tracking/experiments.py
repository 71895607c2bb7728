"""The tracking recipe's table of experiments (`--config.experiment`): each one's arms,
in the order of its tables, each with its training, its tracker (SiamFC's scale search
unless given), the arms whose models it uses (same seed) and the arms it is compared
with ("static": the first box in every frame, tracked once per set); its training
stages per seed and its own checks. A new tracker is a module of its arms (as
`dimp_stages` is for DiMP's centre) and one more line here.
"""

from __future__ import annotations

from ebm_jax.recipes.tracking import stages
from ebm_jax.recipes.tracking.arms import Arm, Experiment, Trained
from ebm_jax.recipes.tracking.box_head import (box_head_arms, choose_box_head_arms,
                                               coarse_evaluation)
from ebm_jax.recipes.tracking.dimp_joint_stages import check_dimp_joint, dimp_joint_arms
from ebm_jax.recipes.tracking.dimp_stages import (check_dimp_centre, check_dimp_chosen,
                                                  choose_dimp_box_head_arms,
                                                  dimp_box_head_arms, dimp_centre_arms)
from ebm_jax.recipes.tracking.stages import TrackingRun, box_siam_arm


def random_start(env: TrackingRun, seed: int, used) -> Trained:
    """SiamFC with the random initial backbone of the same seed's Box-Siam."""
    box = used["box-siam"]
    return Trained(stages.build_model(env.cfg, env.ctx, box.stage, env.data),
                   {"start_of": box.identity["trained"]})


def box_head_stages(cfg) -> int:
    """Box-Siam, then a head per loss, training sigmas and training length."""
    sigmas = len(cfg.sigma_grid or (cfg.box_head.sigmas,))
    return 1 + len(cfg.box_head_methods) * sigmas * (len(cfg.box_head_lengths) + 1)


EXPERIMENTS = {
    "box-siam": Experiment(lambda cfg: [
        Arm("random", "random", random_start, uses=("box-siam",)),
        Arm("box-siam", "box-siam", box_siam_arm, compared_with=("static", "random"))],
        stages_per_seed=lambda cfg: 1),
    "box-head": Experiment(box_head_arms, paper="the EBM regression paper's Table 4",
                           choose=choose_box_head_arms, after=coarse_evaluation,
                           stages_per_seed=box_head_stages),
    "dimp-centre": Experiment(dimp_centre_arms, stages_per_seed=lambda cfg: 2,
                              check=check_dimp_centre, track_validation=True),
    "dimp-box-head": Experiment(dimp_box_head_arms, paper="the EBM regression paper's Table 4",
                                stages_per_seed=lambda cfg: 2 + len(cfg.box_head_methods),
                                check=check_dimp_centre, track_validation=True),
    # the same table, each head's sigmas, length and step lengths chosen on validation
    "dimp-box-head-chosen": Experiment(
        dimp_box_head_arms, paper="the EBM regression paper's Table 4",
        choose=choose_dimp_box_head_arms,
        stages_per_seed=lambda cfg: 1 + box_head_stages(cfg), check=check_dimp_chosen,
        track_validation=True),
    "dimp-joint": Experiment(dimp_joint_arms, paper="the EBM regression paper's Table 4",
                             stages_per_seed=lambda cfg: 1 + len(cfg.box_head_methods),
                             check=check_dimp_joint, track_validation=True),
}


def count_stages(cfg) -> int | None:
    """The run's training stages, for "stage i of n" and the run's ETA: the
    experiment's stages per seed, and the MoCo start once. None for experiments that
    do not count theirs."""
    experiment = EXPERIMENTS.get(cfg.experiment)
    if experiment is None or experiment.stages_per_seed is None:
        return None
    return len(cfg.seeds) * experiment.stages_per_seed(cfg) + (cfg.init == "moco")


__all__ = ["EXPERIMENTS", "count_stages", "random_start"]
