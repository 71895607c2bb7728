"""The generic command line and the experiment config files."""

import ast
import sys
from pathlib import Path

import pytest

from ebm_jax import cli
from ebm_jax.config import load_config, load_module
from ebm_jax.config_catalog import find_configs

ROOT = Path(__file__).parents[1]
CONFIGS = find_configs(ROOT / "experiments")
# every table and figure of the three existing works
EXPECTED = {
    "ebm_regression": {"table1_toy1d", "figure2_toy1d_m", "table2_detection",
                       "figure3_detection_m", "figure5_detection_beta",
                       "table3_detection_sigma"},
    "contrastive": {"moco_linear_eval", "moco_ablation_momentum",
                    "moco_ablation_mechanism", "moco_ablation_queue",
                    "instdisc_linear_eval"},
    "tracking": {"siamfc_box"},
}


def test_every_table_and_figure_has_a_config():
    have = {(p.parent.name, p.stem) for p in CONFIGS}
    for group, stems in EXPECTED.items():
        assert {(group, s) for s in stems} <= have


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_config_file_loads_every_variant_and_names_its_command(path):
    rel = path.relative_to(ROOT).as_posix()
    module = load_module(path)
    first = module.__doc__.strip().splitlines()[0]
    assert first.startswith(f"ebm-jax run {rel}:"), first
    assert first.split(":", 1)[1].split()[0] in module.VARIANTS
    assert "tiny" in module.VARIANTS
    for variant in module.VARIANTS:
        cfg = load_config(f"{path}:{variant}")
        assert hasattr(cfg, "seed")
    # values only: no imports but its recipe's Config, never another config file
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.module.startswith("ebm_jax.recipes."), node.module
        elif isinstance(node, ast.Import):
            assert all(a.name in ("dataclasses",) for a in node.names)


def test_list_shows_every_config_and_variant(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for path in CONFIGS:
        line = next(ln for ln in out.splitlines() if path.relative_to(ROOT).as_posix() in ln)
        assert "tiny" in line and len(line.split("]", 1)[1].strip()) > 10


def test_errors_are_one_line(capsys, tmp_path):
    path = CONFIGS[0] if CONFIGS else None
    if path is None:
        pytest.skip("no configs")
    assert cli.main(["run", f"{path}:tiny", "--config.no_such_field=1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no field 'no_such_field'" in err
    assert cli.main(["run", str(tmp_path / "nothing.py")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli.main(["run", f"{path}:nope"]) == 2
    assert "variant must be one of" in capsys.readouterr().err
    assert cli.main(["list", "--config.seed=1"]) == 2
    assert cli.main(["list", "--root", str(tmp_path)]) == 2
    assert "no config files" in capsys.readouterr().err


def test_a_config_flag_without_its_value_says_so(capsys, tmp_path):
    """`--config.epochs --workdir DIR` said "unrecognized arguments: DIR"."""
    path = CONFIGS[0]
    assert cli.main(["run", f"{path}:tiny", "--config.epochs", "--workdir",
                     str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("ebm-jax: error: --config.epochs needs a value (--config.epochs=VALUE "
                   "or --config.epochs VALUE), got the option --workdir after it")
    assert cli.main(["run", f"{path}:tiny", "--config.epochs"]) == 2
    assert capsys.readouterr().err.strip() == (
        "ebm-jax: error: --config.epochs needs a value (--config.epochs=VALUE or "
        "--config.epochs VALUE)")
    assert not (tmp_path / "w").exists()
    # a negative number is a value (refused by the field's own range check)
    assert cli._split_overrides(["run", "c.py", "--config.seed", "-1", "--no-progress"]) \
        == (["run", "c.py", "--no-progress"], ["--config.seed=-1"])
    assert cli._split_overrides(["--config.lr", "-1e-3"])[1] == ["--config.lr=-1e-3"]
    assert cli.main(["run", f"{path}:tiny", "--config.seed", "-1"]) == 2
    assert "--config.seed must be an integer in [0, 2147483647], got -1" in \
        capsys.readouterr().err


def test_list_help_says_configs_are_executed(capsys):
    with pytest.raises(SystemExit):
        cli.main(["list", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "executed when loaded" in out and "imports every .py file" in out


def test_ctrl_c_prints_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "train"))
    sys.modules.pop("toy_recipe", None)
    cfg = tmp_path / "toy.py"
    cfg.write_text(f'"""ebm-jax run {cfg}:die\n\nA toy."""\nfrom toy_recipe import Config\n'
                   'VARIANTS = ("die",)\n\n\ndef get_config(v):\n'
                   '    return Config(die_at=15)\n')
    rc = cli.main(["run", str(cfg), "--workdir", str(tmp_path / "w"), "--out",
                   str(tmp_path / "o"), "--no-progress"])
    assert rc == 130
    err = capsys.readouterr().err.strip()
    assert err == ("ebm-jax: stopped in stage toy; rerun the same command to resume "
                   "from step 10")
    assert not (tmp_path / "o").exists()  # no half-written results


def test_run_keeps_its_compilation_cache_in_the_work_directory(capsys, tmp_path,
                                                                monkeypatch):
    """`--compile-cache`: by default `<workdir>/.jax-cache` (restored to JAX's own
    setting after the run), `none` for no cache, and one warning line for a cache that
    cannot be written, the run going on without it."""
    import jax

    monkeypatch.syspath_prepend(str(ROOT / "tests" / "train"))
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    sys.modules.pop("toy_recipe", None)
    cfg = tmp_path / "toy.py"
    cfg.write_text(f'"""ebm-jax run {cfg}:tiny\n\nA toy."""\nfrom toy_recipe import Config\n'
                   'VARIANTS = ("tiny",)\n\n\ndef get_config(v):\n    return Config()\n')
    before = jax.config.jax_compilation_cache_dir
    (tmp_path / "file").write_text("")
    for name, option in (("default", []), ("off", ["--compile-cache", "none"]),
                         ("unwritable", ["--compile-cache", str(tmp_path / "file" / "c")])):
        capsys.readouterr()
        jax.clear_caches()  # so that the run compiles (the cache is made when it does)
        assert cli.main(["run", str(cfg), "--workdir", str(tmp_path / name), "--out",
                         str(tmp_path / f"o-{name}"), "--no-progress", *option]) == 0
        out = capsys.readouterr().out
        cache = tmp_path / name / ".jax-cache"
        assert cache.is_dir() == (name == "default"), name
        warnings = [line for line in out.splitlines() if "compilation cache" in line]
        assert len(warnings) == (name == "unwritable"), out[-2000:]
        assert jax.config.jax_compilation_cache_dir == before
    entries = (tmp_path / "default" / ".jax-cache").iterdir()
    assert any(p.name.endswith("-cache") for p in entries)


def test_records_writes_what_the_recipes_draw(capsys, tmp_path):
    """`ebm-jax records`: the 1D pairs of the 1D recipe's seed, an image set's split of
    the contrastive recipe's seed; `info` reads them back; bad paths are one line."""
    pytest.importorskip("tensorflow_datasets")
    import numpy as np

    from ebm_jax.data import images as image_data
    from ebm_jax.data import records, toy1d
    from ebm_jax.train.stages import RunContext, stable_hash

    assert cli.main(["records", "toy1d", "--dataset", "2", "--num", "40", "--seed", "3",
                     "--out", str(tmp_path / "t")]) == 0
    x, _ = toy1d.sample(RunContext.key_of(3, "toy1d-d2", "data"), 2, 40)
    np.testing.assert_array_equal(records.open_records(tmp_path / "t").read_all()["x"],
                                  np.asarray(x))
    assert cli.main(["records", "images", "--data", "digits", "--image-size", "8",
                     "--seed", "1", "--out", str(tmp_path / "i")]) == 0
    want = image_data.load_image_data("digits", 8, seed=stable_hash("1/data/split"))
    np.testing.assert_array_equal(records.open_records(tmp_path / "i").read_all()["label"],
                                  want.train_labels)
    capsys.readouterr()
    assert cli.main(["records", "info", str(tmp_path / "i")]) == 0
    assert '"kind": "images"' in capsys.readouterr().out
    assert cli.main(["records", "info", str(tmp_path / "none")]) == 2
    assert cli.main(["records", "detection", "--out", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"ebm-jax records: error: {tmp_path / 'none'}: no such records "
                   "directory", "ebm-jax records: error: give either --annotations (with "
                   "--image-dir) or --generate N"]


@pytest.mark.parametrize("kind,args", [
    ("toy1d", ["--dataset", "1", "--num", "8"]),
    ("images", ["--data", "digits", "--image-size", "8"]),
    ("detection", ["--generate", "2", "--image-size", "32"]),
])
@pytest.mark.parametrize("seed", ["-5", "1e20", "2147483648", "x"])
def test_records_refuse_seeds_outside_the_run_seeds_range(capsys, tmp_path, kind, args,
                                                          seed):
    """`records images --seed -5` (or 1e20) was accepted."""
    pytest.importorskip("tensorflow_datasets")
    assert cli.main(["records", kind, *args, "--seed", seed, "--out",
                     str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err == (
        f"ebm-jax records: error: --seed must be an integer in [0, 2147483647] (the run "
        f"seed's range), got {seed!r}\n")
    assert not (tmp_path / "r").exists()


def test_records_store_what_determines_the_data(capsys, tmp_path):
    """The seed (and what else decides the data) is in the metadata of every kind."""
    pytest.importorskip("tensorflow_datasets")
    import json

    from ebm_jax.data import records
    from ebm_jax.data.tracking import TrackingSpec, generate_tracking_split
    from ebm_jax.train.stages import stable_hash

    runs = {
        "toy1d": (["--dataset", "1", "--num", "8", "--seed", "7"],
                  {"dataset": 1, "num": 8, "seed": 7}),
        "images": (["--data", "digits", "--image-size", "8", "--seed", "7"],
                   {"data": "digits", "image_size": 8, "seed": 7, "eval_split": "test",
                    "split_seed": stable_hash("7/data/split"), "data_root": None}),
        "detection": (["--generate", "2", "--image-size", "32", "--seed", "7"],
                      {"generated": 2, "image_size": 32, "seed": 7}),
    }
    root = generate_tracking_split(tmp_path / "got", TrackingSpec(
        split="train", num_sequences=1, num_frames=2, height=48, width=64, seed=1),
        progress=False)
    runs["tracking"] = (["--root", str(root)], {"root": str(root.resolve())})
    for kind, (args, want) in runs.items():
        assert cli.main(["records", kind, *args, "--out", str(tmp_path / kind)]) == 0
        meta = records.open_records(tmp_path / kind).metadata
        assert {k: meta.get(k) for k in want} == want, kind
        capsys.readouterr()
        assert cli.main(["records", "info", str(tmp_path / kind)]) == 0
        assert json.loads(capsys.readouterr().out)["metadata"]["kind"] == kind


def test_list_gives_each_config_its_whole_purpose(capsys, monkeypatch):
    monkeypatch.chdir(Path(__file__).parents[1])
    assert cli.main(["list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    purposes = [ln for ln in lines if not ln.startswith(" ")]
    assert len(purposes) == len(find_configs(Path(__file__).parents[1] / "experiments"))
    for line in purposes:  # a purpose is whole sentences, never cut mid-sentence
        assert line.rstrip().endswith((".", ")", ".)")), line


def test_list_gives_each_variants_measured_wall_time(capsys, monkeypatch):
    """Every config's tiny variant has a measured wall time on record (a config added
    without one fails here: run `python benchmarks/wall_times.py --configs FILE`), each
    entry names a config and a variant that exist, and `list` prints them."""
    from ebm_jax.config import load_module
    from ebm_jax.config_catalog import wall_times

    root = Path(__file__).parents[1]
    monkeypatch.chdir(root)
    table = wall_times("experiments")
    configs = {p.relative_to(root / "experiments").as_posix(): p
               for p in find_configs(root / "experiments")}
    assert set(table) <= set(configs), set(table) - set(configs)
    for name, path in configs.items():
        assert table.get(name, {}).get("tiny"), f"{name}: no measured tiny wall time"
        assert set(table[name]) <= set(load_module(path).VARIANTS), name
    assert cli.main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    times = [ln.strip() for ln in lines if ln.startswith(" ")]
    assert len(times) == len(configs)
    assert all(ln.startswith("wall time: ") and "tiny " in ln for ln in times)
    assert all("tiny not measured" not in ln for ln in times)


def test_a_wall_time_file_that_is_not_one_is_one_line(tmp_path, capsys):
    (tmp_path / "a.py").write_text('"""ebm-jax run a.py\n\nA toy."""\nVARIANTS = ("x",)\n'
                                   'def get_config(variant):\n    return None\n')
    (tmp_path / "wall_times.json").write_text('{"a.py": {"x": [{"seconds": -1, '
                                              '"machine": "m"}]}}')
    assert cli.main(["list", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "wall_times.json: not a file of measured wall " in err
    (tmp_path / "wall_times.json").write_text('{"a.py": {"x": [{"seconds": [60, 120], '
                                              '"machine": "2 CPU cores"}]}}')
    assert cli.main(["list", "--root", str(tmp_path)]) == 0
    assert "wall time: x 60 s - 2 min (2 CPU cores)" in capsys.readouterr().out


def test_show_prints_fields_values_and_defaults(capsys, monkeypatch):
    monkeypatch.chdir(Path(__file__).parents[1])
    config = "experiments/tracking/ebm_table4_box_head.py:tiny"
    assert cli.main(["show", config, "--config.box_head.processing=prdimp"]) == 0
    out = capsys.readouterr().out
    assert "ebm_jax.recipes.tracking.Config" in out.splitlines()[0]
    fields = {ln.split("=")[0].strip(): ln.split("=", 1)[1].strip()
              for ln in out.splitlines()[1:] if ln.startswith("  --config.")}
    # a nested field, an override, a preset value beside its default, a default one
    assert fields["--config.box_head.processing"] == "'prdimp'  (default 'siamfc')"
    assert fields["--config.num_train_sequences"] == "4  (default 50)"
    assert fields["--config.backbone"] == "'alexnet'"
    assert cli.main(["show", config, "--config.nope=1"]) == 2
    assert "nope" in capsys.readouterr().err


def test_show_groups_describes_and_hides_what_a_config_does_not_use(capsys):
    """SoCL's Table 1 reads no box-head, DiMP or MoCo settings: `show` hides those
    sections (and says so), prints each field's one-line description under it, and
    `--all` shows everything."""
    assert cli.main(["show", "socl_table1_ablation:tiny"]) == 0
    out = capsys.readouterr().out
    assert "[data]" in out and "[SoCL training]" in out and "[box head]" not in out
    assert "--config.box_head_methods" not in out and "--config.dimp" not in out
    assert "hidden: MoCo start, box head, DiMP" in out
    lines = out.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("  --config.points "))
    assert lines[at + 1].strip().startswith("SoCL's point annotations")
    assert cli.main(["show", "socl_table1_ablation:tiny", "--all"]) == 0
    every = capsys.readouterr().out
    assert "[box head]" in every and "--config.box_head.steps" in every
    assert "not used by this config" not in every


def test_run_help_says_the_default_variant_is_the_first(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    assert "the first the file lists" in " ".join(capsys.readouterr().out.split())


def _epilog_examples() -> list[list[str]]:
    """The `ebm-jax ...` example commands of the --help epilog, continuation lines
    joined and comments dropped, as argument lists (without the program's name)."""
    import shlex

    from ebm_jax import cli

    text = cli.__doc__.split("\n", 2)[2].replace("\\\n", " ")
    return [shlex.split(line.split("#")[0])[1:] for line in text.splitlines()
            if line.strip().startswith("ebm-jax ")]


def test_the_help_examples_run_as_shown(tmp_path, capsys, monkeypatch):
    """Each example of `ebm-jax --help` parses, and does what it says where that takes
    seconds: `list` and `show` run; each `run` resolves its config and overrides (not
    trained here); `compare` runs on the stored runs of the configs it names, `rerun`
    compares its stored run with itself; `records`
    writes its dataset; `plot-metrics` is refused only for the missing work directory."""
    from ebm_jax import cli
    from ebm_jax.config import load_config

    examples = _epilog_examples()
    assert {e[0] for e in examples} == {"list", "run", "show", "plot-metrics", "compare",
                                        "records", "rerun"}
    monkeypatch.chdir(tmp_path)
    for argv in examples:
        command = argv[0]
        if command in ("list", "show"):
            assert cli.main(argv) == 0, argv
        elif command == "run":  # a config by its path: from a clone's root
            monkeypatch.chdir(ROOT)
            rest, overrides = cli._split_overrides(argv)
            cli.build_parser().parse_args(rest)
            load_config(rest[1], overrides)
            monkeypatch.chdir(tmp_path)
        elif command == "compare":
            stored = [a if i % 2 else str(ROOT / "docs" / "results" / (
                Path(a).parent.name + "-" + Path(a).name)) for i, a in enumerate(argv[1:])]
            assert cli.main(["compare", *stored]) == 0, stored
        elif command == "records":
            assert cli.main(argv) == 0, argv
        elif command == "rerun":  # the stored run against itself: no training here
            stored = str(ROOT / argv[1])
            assert cli.main(["rerun", stored, "--against", stored]) == 0, argv
            assert "reproduced to the last bit: " in capsys.readouterr().out
        else:  # plot-metrics: no run here, one line naming the folder
            assert cli.main(argv) != 0
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1 and argv[1] in err, err
        capsys.readouterr()


def test_a_closed_pipe_ends_the_command_quietly():
    """`ebm-jax list | head -n 1`: the reader closes the pipe; no traceback follows."""
    import subprocess

    proc = subprocess.Popen([sys.executable, "-m", "ebm_jax.cli", "list"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()  # before the command has written the rest
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
