"""The detection tables and figures from hand-made rows."""

import matplotlib

matplotlib.use("Agg")

from ebm_jax.report.detection import detection_figures, detection_markdown  # noqa: E402

BETAS = (0.025, 0.05, 0.1, 0.2, 0.3, 0.5)
SIGMA_SETS = ((0.0125, 0.025, 0.05), (0.025, 0.05, 0.1), (0.05, 0.1, 0.2),
              (0.075, 0.15, 0.3), (0.1, 0.2, 0.4))
INFO = {"name": "quick", "data": "generated", "num_train": 1, "num_val": 1,
        "image_size": 64, "pool_size": 5, "channels": 32, "hidden": 128, "head_steps": 3,
        "boxes_per_batch": 16, "refine_steps": 10}


def _row(method, m=128, ap=0.5, **hp):
    res = {"AP": ap, "AP50": 0.9, "AP75": 0.4}
    return {"stage": "x", "method": method, "num_samples": m, "finite": True,
            "seconds_per_iteration": 0.1, "initial": {**res, "AP": 0.4}, "nms": res,
            "refined": res, "hyperparameters": hp}


def test_report_and_plots_of_every_table():
    tables = {
        "table2": [{**_row("ml-is", ap=0.45), "nms": {"AP": 0.43, "AP50": 0.9, "AP75": 0.4}},
                   _row("nce+", ap=0.5, beta=0.1),
                   {**_row("dsm"), "finite": False}],
        "m": [_row(x, m) for x in ("ml-is", "kld-is", "nce", "nce+") for m in (1, 2)]
        + [{**_row("ml-is", 4), "finite": False}],
        "beta": [_row("nce", ap=0.5, sigmas=(0.1,))]
        + [_row("nce+", ap=0.5 + b, beta=b) for b in BETAS],
        "sigma": [_row("nce", ap=0.4, sigmas=s) for s in SIGMA_SETS],
    }
    ref3 = tuple((*s, v) for s, v in zip(SIGMA_SETS, (38.58, 38.95, 39.12, 39.17, 39.05)))
    md = detection_markdown(tables, INFO, reference_table2=(("ml-is", 39.4, 58.6, 42.1),),
                            reference_table3=ref3[:4])
    assert "## Table 2: methods" in md and "Figures 3 and 4" in md
    # AP, AP50, AP75, after NMS, refined - initial, refined - after NMS
    assert ("| ML-IS | 128 | 45.0 | 90.0 | 40.0 | 43.0 | +5.0 | +2.0 | 0.100 | 39.4 / 58.6 / 42.1 |"
            in md)
    assert "| NCE+ | 0.5 | 100.0 |" in md
    assert "| 0.0125, 0.025, 0.05 | 40.0 | 90.0 | 40.0 | 38.58 |" in md
    assert "| 0.1, 0.2, 0.4 | 40.0 | 90.0 | 40.0 | - |" in md  # no reference given
    assert "NaN" in md  # a run whose loss was not finite
    figures = detection_figures(tables, reference_table3=ref3)
    assert sorted(figures) == ["figure3_4_m.png", "figure5_beta.png", "table2_methods.png",
                               "table3_sigmas.png"]
    for make in figures.values():
        fig = make()
        assert fig.axes
        matplotlib.pyplot.close(fig)
