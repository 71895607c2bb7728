"""ebm-jax run experiments/tracking/ebm_table4_box_head.py:quick

The EBM regression paper, sec. 5 and Table 4: an energy-based box head (KLD-IS, NCE, NCE+, ML-IS)
against SiamFC's own scale search.

Box-Siam (SiamFC's AlexNet trained on boxes, the tracking recipe's) is trained per seed
on the generated training split less its last `validation_sequences` (the validation
split). On its frozen backbone an IoU-Net-style box energy (conv3 + conv5 through
PrRoIPool) is trained with each loss; the tracker takes SiamFC's centre at one scale and
refines the box by gradient ascent on the energy (the estimate plus 9 jittered copies, 10
steps, the mean of the top 3). Per loss, the training length (early stopping: 150 / 300 /
600 steps on quick, one run through all three), the refinement's centre and size step
lengths (0.5 / 1 / 2 / 4 x PrDiMP's 2.5e-3, separately) and the tracker options are
chosen on the validation split (the refinement probe's mean IoU, then tracking AUC),
averaged over seeds; the test split is tracked once per arm. Scores: OTB AUC / precision / normalised precision, GOT-10k AO /
SR0.5 / SR0.75, FPS with and without the refinement; paired differences (each head -
scale search, NCE+ - KLD-IS, NCE+ - NCE, NCE - KLD-IS) with standard errors over seeds
and over test sequences. --config.box_head_joint=true trains the backbone too;
--config.sigma_grid="0.05,0.5;0.1,1.0" also chooses the training sigmas (every head is
trained once more per entry). With --config.got10k_root (a local folder; nothing is
downloaded) GOT-10k val is tracked too, and --config.train_data=got10k trains on its
train split (the validation split is then its last sequences).

The paper (DiMP / PrDiMP, ResNet-50, real benchmarks; AUC / Success %) orders NCE+ >
KLD-IS > NCE on all five datasets: NCE is below KLD-IS on every one. One public report
has NCE+ below KLD-IS on GOT-10k with SuperDiMP (0.759 vs 0.801).

Variants (the tracking recipe's presets, `ebm_jax.recipes.tracking.PRESETS`, so quick
shares the generated data with siamfc_box.py:quick): quick (AlexNet width 0.25, 50
train sequences of which 10 validate, 30 test sequences of 80 frames at 320x240, Box-Siam
600 steps, heads 600 steps, three seeds; about 2 h of compute on 2 CPU cores, measured
in two sittings with other jobs on the machine: a Box-Siam 4-10 min, a head 2-4.5 min,
then the validation candidates and the test split tracked at 50-120 FPS), tiny (the
tests; 7.5 min on 2 CPU cores beside another job: four losses, two training lengths,
five tracker options on validation, each compiled), paper (the published SiamFC net and schedule, heads 40k
steps; GPU).
quick990: quick on 1,000 generated training sequences (990 train, 10 validate), the
docs' headline table (computed over several sittings on 2 CPU cores; not timed whole).
"""

from ebm_jax.recipes.tracking import BoxHeadSettings, preset
from ebm_jax.recipes.tracking.box_head import TABLE4_REFERENCE

VARIANTS = ("quick", "tiny", "paper", "quick990")

REFERENCE = TABLE4_REFERENCE  # the paper's Table 4, AUC (Success on TrackingNet) %
NOTE = ("In the paper NCE is below KLD-IS on every dataset (NCE+ > KLD-IS > NCE); one "
        "public report has NCE+ below KLD-IS on GOT-10k with SuperDiMP (0.759 vs 0.801).")
COMMON = dict(experiment="box-head", reference=REFERENCE, reference_note=NOTE)
QUICK = dict(validation_sequences=10, box_head=BoxHeadSettings(steps=600),
             box_head_lengths=(150, 300))


def get_config(variant: str):
    if variant == "quick990":  # the docs' headline run: quick on 990 training sequences
        return preset("quick", **COMMON, quick=dict(QUICK, num_train_sequences=1000))
    return preset(
        variant, **COMMON,
        quick=QUICK,
        tiny=dict(validation_sequences=1, num_train_sequences=4, step_scales=(1.0, 4.0),
                  box_head=BoxHeadSettings(steps=3, batch_size=2, num_samples=16,
                                           width=8, hidden=16), box_head_lengths=(2,)),
        paper=dict(validation_sequences=50, box_head=BoxHeadSettings(steps=40_000),
                   box_head_lengths=(10_000, 20_000)))
