"""metrics.jsonl after a kill: a final line cut short is dropped on resume only when it
provably lies past the checkpoint (and that step is logged again); anything else is
refused with --restart, never skipped or to be edited away (the results' final loss
and timings are read from these rows)."""

import json
import shutil

import jax
import numpy as np
import optax
import pytest
from flax import nnx

from ebm_jax.energy import batch_loss, make_loss
from ebm_jax.io import CorruptFileError
from ebm_jax.models import ToyEnergyMLP
from ebm_jax.train import (
    RunRecords,
    create_train_state,
    fit,
    make_mesh,
    make_train_step,
    read_metrics,
)

ROWS = "".join(json.dumps({"step": s, "time": 0.1 * s, "loss": 1.0 / s}) + "\n"
               for s in (1, 2, 3, 4))


def _records(tmp_path, text):
    (tmp_path / "metrics.jsonl").write_text(text)
    return RunRecords(tmp_path, enabled=True)


@pytest.mark.parametrize("torn", ['{"step": 5, "time": 0.', '{"st', '{"step": 5'])
def test_a_torn_last_line_past_the_checkpoint_is_dropped_on_resume(tmp_path, torn):
    _records(tmp_path, ROWS + torn).truncate(4)
    assert (tmp_path / "metrics.jsonl").read_text() == ROWS
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3, 4]


@pytest.mark.parametrize("torn,step", [('{"step": 3, "time": 0.', 4),  # before it
                                       ('{"step": 4, "time": 0.', 4),  # the saved step
                                       ('{"step": 1', 4)])  # step 1? 10? unknown
def test_a_torn_line_not_provably_past_the_checkpoint_is_refused(tmp_path, torn, step):
    rows = ROWS if torn != '{"step": 1' else ROWS.split("\n")[0] + "\n"
    path = tmp_path / "metrics.jsonl"
    with pytest.raises(CorruptFileError, match=r"metrics file .*metrics.jsonl is corrupt "
                       r"at line \d+ .*cut short and not provably past the checkpoint at "
                       rf"step {step}; rerun with --restart; do not edit") as e:
        _records(tmp_path, rows + torn).truncate(step)
    assert "delete" not in str(e.value)
    assert path.read_text() == rows + torn  # left as it was


def test_corrupt_lines_say_restart_never_delete(tmp_path):
    _records(tmp_path, ROWS.replace('{"step": 2', '{"stop": 2'))
    with pytest.raises(CorruptFileError, match=r"corrupt at line 2 .*; rerun with "
                       r"--restart; do not edit the file: the results' final loss and "
                       r"timings are read from it") as e:
        read_metrics(tmp_path)
    assert "delete" not in str(e.value)
    _records(tmp_path, ROWS + '{"step": 5, "ti')
    with pytest.raises(CorruptFileError, match=r"corrupt at line 5 .*last line is cut "
                       r"short .*rerun the same command, which drops that line when it "
                       r"lies past the last checkpoint, or rerun with --restart") as e:
        read_metrics(tmp_path)
    assert "delete" not in str(e.value)


def test_a_fresh_start_starts_the_metrics_over(tmp_path):
    """No checkpoint: training starts at step 0, so the rows of an earlier try (and a
    torn line they end in) are stale; appending after them made a corrupt line."""
    _records(tmp_path, ROWS + '{"step": 5, "ti').start({"lr": 1})
    assert not (tmp_path / "metrics.jsonl").exists()


def _fit(stage_dir, num_steps):
    nce = make_loss("nce", sigmas=(0.1, 0.8), num_samples=4)
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, (8, 1)).astype(np.float32)
    y = np.sin(x).astype(np.float32)

    def loss_fn(model, batch, key):
        f = lambda xx, yy: model(xx[None], yy[None])[0]  # noqa: E731
        return batch_loss(nce, f, *batch, key), {}

    opt = optax.adam(1e-2)
    graphdef, state = create_train_state(ToyEnergyMLP(rngs=nnx.Rngs(0)), opt,
                                         jax.random.key(0))
    step = make_train_step(graphdef, loss_fn, opt, make_mesh(1))
    return fit(stage_dir, state, step, lambda s: (x, y), num_steps=num_steps,
               save_every=2, log_every=1, config={"lr": 1e-2}, progress=False)


@pytest.mark.slow  # two trainings with checkpoints: about 15 s on 2 cores
def test_a_run_killed_while_logging_resumes_to_the_same_rows(tmp_path):
    """A kill while step 4's row was appended (before its checkpoint): the rerun drops
    the torn line, resumes from step 2 and logs steps 3 and 4 again; the losses equal
    the uninterrupted run's (the same machine: resume is exact)."""
    stage = tmp_path / "stage"
    _fit(stage, 4)
    full = read_metrics(stage)
    shutil.rmtree(stage / "checkpoints" / "4")
    path = stage / "metrics.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:3]) + lines[3][:25])
    _fit(stage, 4)
    again = read_metrics(stage)
    assert [r["step"] for r in again] == [1, 2, 3, 4]
    assert [r["loss"] for r in again] == [r["loss"] for r in full]
    assert path.read_text().endswith("\n")


def _stage_with_rows(root, text=ROWS):
    stage = root / "run" / "stage-a"
    stage.mkdir(parents=True)
    (stage / "metrics.jsonl").write_text(text)
    return root / "run"


def test_plot_metrics_bad_outputs_are_one_line(tmp_path, capsys):
    import os

    from ebm_jax import cli

    run = _stage_with_rows(tmp_path)
    (tmp_path / "figs").mkdir()
    assert cli.main(["plot-metrics", str(run), "--out", str(tmp_path / "figs")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"ebm-jax plot-metrics: error: --out {tmp_path / 'figs'} is a "
                           "directory; give the PNG file to write (e.g. "
                           f"{tmp_path / 'figs' / 'metrics.png'})")
    (tmp_path / "afile").write_text("x")  # a path under a file: unwritable, also as root
    assert cli.main(["plot-metrics", str(run), "--out",
                     str(tmp_path / "afile" / "m.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"the PNG {tmp_path / 'afile' / 'm.png'} cannot be written: " in err
    if os.geteuid() != 0:  # root writes into a read-only directory anyway
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        try:
            assert cli.main(["plot-metrics", str(run), "--out", str(ro / "m.png")]) == 2
        finally:
            ro.chmod(0o700)
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "cannot be written: Permission denied" in err
    assert not list(tmp_path.rglob("*.tmp"))


def test_plot_metrics_of_empty_metrics_is_one_line(tmp_path, capsys):
    from ebm_jax import cli

    run = _stage_with_rows(tmp_path, "")
    assert cli.main(["plot-metrics", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "hold no rows yet" in err and "Traceback" not in err
    assert not (run / "metrics.png").exists()


def test_plot_metrics_of_a_running_stage_skips_its_torn_last_line(tmp_path):
    from ebm_jax.train import plot_metrics

    run = _stage_with_rows(tmp_path, ROWS + '{"step": 5, "ti')
    assert plot_metrics(run).read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("flags, xla_flags, isa", [
    ("fpu sse4_2 avx avx2 avx512f avx512bw", "", "AVX-512"),
    ("fpu sse4_2 avx avx2 fma", "", "AVX2"),
    ("fpu sse4_2 avx avx2 avx512f", "--xla_cpu_max_isa=AVX2", "AVX2 (XLA_FLAGS)"),
    ("fpu sse4_2 avx avx2 avx512f", "--xla_force_host_platform_device_count=4 "
     "--xla_cpu_max_isa=sse4_2", "SSE4_2 (XLA_FLAGS)"),
    ("fpu sse4_2 avx avx2", "--xla_cpu_max_isa=AVX512", "AVX2"),  # a cap above: none
    ("fpu sse4_2 avx avx2 avx512f", "--xla_cpu_max_isa=AVX512_VNNI", "AVX-512"),
    ("fpu neon", "", None),
])
def test_the_cpus_vector_extension_is_read_from_its_flags_and_xla_flags_cap(
        tmp_path, flags, xla_flags, isa):
    from ebm_jax.train.records import cpu_vector_isa

    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nmodel name\t: A CPU\nflags\t\t: {flags}\n\n"
                    f"processor\t: 1\nflags\t\t: {flags}\n")
    assert cpu_vector_isa(str(info), xla_flags) == isa
    assert cpu_vector_isa(str(tmp_path / "missing"), xla_flags) is None
