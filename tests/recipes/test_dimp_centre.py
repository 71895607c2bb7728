"""The dimp-centre experiment (`experiments/tracking/dimp_centre.py`): DiMP's classifier
trained on the frozen Box-Siam backbone, its centre tracked beside SiamFC's and the
DCF's on the validation and test splits, with the paired differences."""

import json

from ebm_jax import cli


def test_the_tiny_run_tracks_the_three_centres_on_both_splits(tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(["run", "dimp_centre:tiny", "--workdir", str(tmp_path / "runs"),
                     "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    data = json.loads((out / "results.json").read_text())
    for split in ("generated-val", "generated-test"):
        rows = data["tables"][split]
        assert {"SiamFC centre", "DCF centre", "DiMP centre"} <= set(rows)
        assert 0.0 <= rows["DiMP centre"][0]["precision"] <= 1.0
        assert "DiMP centre vs SiamFC centre" in data["summary"][split]
        assert "DiMP centre vs DCF centre" in data["summary"][split]
    (stage,) = [k for k in data["training"] if k.startswith("dimp-")]
    assert data["training"][stage]["identity_hash"].startswith("dimp-s0-")
    md = (out / "results.md").read_text()
    assert "### generated-val" in md and "DiMP centre" in md
