"""The stage runner (ebm_jax.train.stages) and the experiment runner around it:
named keys, path-independent resume, the work-directory lock, cached results,
corrupt files, the results directory, Ctrl-C."""

import json
import os
import shutil
import stat
from pathlib import Path

import jax
import numpy as np
import pytest

from ebm_jax.io import CorruptFileError, content_hash
from ebm_jax.recipes import run_experiment
from ebm_jax.train.stages import (
    RunContext,
    RunLock,
    RunLockedError,
    interrupted_message,
    stable_hash,
)


def _run(toy, workdir, out=None, **cfg):
    return run_experiment(toy.Config(**cfg), workdir=workdir, out=out, progress=False,
                          log=lambda s: None)


def _stage(workdir) -> Path:
    (stage,) = [p for p in Path(workdir).iterdir() if p.name.startswith("toy-")]
    return stage


def test_keys_are_named_and_distinct(tmp_path):
    ctx = RunContext(tmp_path, seed=3, lock=False)
    k = [ctx.key("stage", "init"), ctx.key("stage", "train"), ctx.key("other", "init")]
    data = [tuple(np.asarray(jax.random.key_data(x)).tolist()) for x in k]
    assert len(set(data)) == 3
    again = RunContext(tmp_path, seed=3, lock=False).key("stage", "init")
    assert np.array_equal(jax.random.key_data(again), jax.random.key_data(k[0]))
    assert stable_hash("init") == stable_hash("init") < 2**31
    assert content_hash({"a": (1, 2)}, 8) == content_hash({"a": [1, 2]}, 8)
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2147483647\]"):
        RunContext(tmp_path, seed=-1)


# identities and the 8 hex digits their stage directories were named with before the
# stage hash and io's content hash became one function (computed with the old
# `identity_hash`); and content hashes of io's, computed with the old `content_hash`
OLD_STAGE_HASHES = [
    ({"a": (1, 2)}, "0bf464f8"),
    ({"stage": "train", "seed": 3, "lr": 0.001, "sizes": (64, 64),
      "nested": {"b": [1.5, None, True], "a": "x"}}, "b0e31313"),
    ({2: "two", 10: "ten"}, "bf63a23f"),
    ({"path": Path("/x/y"), "nan": float("nan"), "inf": float("inf")}, "f8ac1692"),
    ({}, "44136fa3"),
]
OLD_CONTENT_HASHES = [
    ([["a.png", "ff00"]], "cfe1bad967299316"),
    ({"split": "train", "n": 3, "sigma": (0.1, 0.2)}, "926c87bcf7c1acb7"),
    ([1, 2.5, "x"], "b5d659ea2901c3b2"),
]


@pytest.mark.parametrize("identity, digits", OLD_STAGE_HASHES)
def test_stage_directory_names_are_those_of_existing_runs(tmp_path, identity, digits):
    assert content_hash(identity, 8) == digits
    ctx = RunContext(tmp_path, seed=0, lock=False)
    assert ctx.stage_dir("train", identity).name == f"train-{digits}"


@pytest.mark.parametrize("content, digits", OLD_CONTENT_HASHES)
def test_content_hashes_are_unchanged(content, digits):
    assert content_hash(content) == digits
    assert content_hash(content, 8) == digits[:8]


def _interrupt(toy, workdir):
    with pytest.raises(KeyboardInterrupt):
        _run(toy, workdir, num_steps=20, die_at=15)
    stage = _stage(workdir)
    assert [p.name for p in (stage / "checkpoints").iterdir() if p.name.isdigit()] == ["10"]
    assert not (Path(workdir) / ".lock").exists()  # released on the way out


def _resumed_at(workdir):
    return json.loads((_stage(workdir) / "run.json").read_text())["resumed_at"]


@pytest.fixture
def reference(toy, tmp_path_factory):
    d = tmp_path_factory.mktemp("ref")
    return _run(toy, d / "w", num_steps=20).payload["tables"]


@pytest.mark.parametrize("how", ["moved", "absolute", "other_cwd"])
def test_resume_wherever_the_workdir_lives(toy, tmp_path, monkeypatch, reference, how):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    _interrupt(toy, "runs/w")  # a relative path
    if how == "moved":
        shutil.move(tmp_path / "runs", tmp_path / "moved")
        workdir = "moved/w"
    elif how == "absolute":
        workdir = str(tmp_path / "runs" / "w")
    else:
        monkeypatch.chdir(tmp_path / "elsewhere")
        workdir = "../runs/w"
    tables = _run(toy, workdir, num_steps=20).payload["tables"]
    assert _resumed_at(workdir) == [10]
    assert tables == reference  # bitwise the same as an uninterrupted run


def test_a_rerun_reuses_the_stage_and_the_cached_result(toy, tmp_path):
    toy.CALLS["compute"] = 0
    first = _run(toy, tmp_path / "w")
    second = _run(toy, tmp_path / "w")
    assert first.payload["tables"] == second.payload["tables"]
    assert toy.CALLS["compute"] == 1
    assert _resumed_at(tmp_path / "w") == [20]
    # another setting is another stage, not a refusal
    _run(toy, tmp_path / "w", learning_rate=0.05)
    assert len(list((tmp_path / "w").glob("toy-*"))) == 2
    # --restart trains the stage again and recomputes its cached result
    run_experiment(toy.Config(), workdir=tmp_path / "w", progress=False, restart=True,
                   log=lambda s: None)
    assert toy.CALLS["compute"] == 3


def test_the_lock_stops_a_second_run_and_leaves_the_first_intact(toy, tmp_path):
    _run(toy, tmp_path / "w")
    stage = _stage(tmp_path / "w")
    before = {p: p.read_bytes() for p in stage.rglob("*") if p.is_file()}
    holder = RunLock(tmp_path / "w")
    holder.acquire()  # a live process (this one) holds it
    with pytest.raises(RunLockedError, match=rf"work directory {tmp_path / 'w'} is in "
                       rf"use by process {os.getpid()} on .* since .*use another "
                       "--workdir"):
        _run(toy, tmp_path / "w")
    assert {p: p.read_bytes() for p in stage.rglob("*") if p.is_file()} == before
    holder.release()
    _run(toy, tmp_path / "w")


def test_a_stale_lock_of_a_dead_process_is_taken_over(toy, tmp_path):
    (tmp_path / "w").mkdir()
    import socket

    (tmp_path / "w" / ".lock").write_text(json.dumps(
        {"pid": 2**22 + 12345, "host": socket.gethostname(), "started": "then"}))
    _run(toy, tmp_path / "w")
    assert not (tmp_path / "w" / ".lock").exists()


@pytest.mark.parametrize("name,content,match", [
    ("run.json", "{not json", r"run record .*run.json is not valid JSON"),
    ("metrics.jsonl", '{"step": 5}\n{"step": 1', r"metrics file .*metrics.jsonl is "
     r"corrupt at line 2"),
])
def test_corrupt_files_name_the_file(toy, tmp_path, name, content, match):
    _run(toy, tmp_path / "w")
    (_stage(tmp_path / "w") / name).write_text(content)
    with pytest.raises(CorruptFileError, match=match):
        _run(toy, tmp_path / "w")


@pytest.mark.parametrize("content", ["[1, 2", b"\xff\xfe\x00", "", "[1, 2]",
                                     '{"identity": {}}'])
def test_a_corrupt_cached_result_is_recomputed_with_a_warning(toy, tmp_path, content):
    toy.CALLS["compute"] = 0
    first = _run(toy, tmp_path / "w")
    path = _stage(tmp_path / "w") / "eval.json"
    good = path.read_bytes()
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    lines = []
    again = run_experiment(toy.Config(), workdir=tmp_path / "w", progress=False,
                           log=lines.append)
    assert again.payload["tables"] == first.payload["tables"]
    assert toy.CALLS["compute"] == 2  # computed again, never the corrupt content
    warnings = [s for s in lines if "eval.json" in s]
    assert len(warnings) == 1 and "\n" not in warnings[0], lines
    assert warnings[0].startswith("warning:") and "recomputing" in warnings[0]
    assert path.read_bytes() == good  # rewritten whole


def test_results_replace_an_earlier_run_whole_and_respect_umask(toy, tmp_path):
    out = tmp_path / "out"
    _run(toy, tmp_path / "w", out)
    (out / "stale.png").write_bytes(b"old figure")  # a figure the earlier run wrote
    manifest = json.loads((out / "results.json").read_text())
    manifest["ebm_jax"]["files"].append("stale.png")
    (out / "results.json").write_text(json.dumps(manifest))
    old = os.umask(0o022)
    try:
        _run(toy, tmp_path / "w", out, learning_rate=0.05)
    finally:
        os.umask(old)
    assert sorted(p.name for p in out.iterdir()) == ["results.json", "results.md",
                                                    "toy.png"]
    payload = json.loads((out / "results.json").read_text())
    assert payload["ebm_jax"]["config"]["learning_rate"] == 0.05
    for p in out.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o644, p
    assert not list(tmp_path.glob(".out.*"))  # no leftovers of the swap


def test_bad_directories_are_refused_before_training(toy, tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep")
    with pytest.raises(ValueError, match=r"--out .*notes is not empty and holds no "
                       r"results.json"):
        _run(toy, tmp_path / "w", tmp_path / "notes")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=r"--workdir must be a directory, got the file"):
        _run(toy, tmp_path / "file")
    with pytest.raises(ValueError, match=r"--out must be a directory, got the file"):
        _run(toy, tmp_path / "w", tmp_path / "file")
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "ro"
        locked.mkdir(mode=0o500)
        with pytest.raises(ValueError, match=r"--out .*ro.* is not writable"):
            _run(toy, tmp_path / "w", locked / "out")
    with pytest.raises(ValueError, match=r"--devices must be in \[1, "):
        run_experiment(toy.Config(), workdir=tmp_path / "w", devices=99)
    assert not (tmp_path / "w").exists() or not list((tmp_path / "w").iterdir())


def test_interrupted_message_names_the_step(toy, tmp_path):
    with pytest.raises(KeyboardInterrupt):
        _run(toy, tmp_path / "w", num_steps=20, die_at=15)
    from ebm_jax.train.stages import last_context

    assert interrupted_message(last_context()) == (
        "stopped in stage toy; rerun the same command to resume from step 10")


def test_paths_go_through_epath(toy, tmp_path):
    from etils import epath

    workdir, out = epath.Path(tmp_path / "w"), epath.Path(tmp_path / "o")
    report = _run(toy, workdir, out)
    assert (tmp_path / "o" / "results.json").is_file()
    assert report.payload["tables"]["toy"][0]["error"] < 1.0


def test_a_checkpoints_path_that_is_a_file_is_one_clear_error(toy, tmp_path):
    from ebm_jax.train import CheckpointError

    _run(toy, tmp_path / "w")
    stage = _stage(tmp_path / "w")
    shutil.rmtree(stage / "checkpoints")
    (stage / "checkpoints").write_text("not a directory")
    with pytest.raises(CheckpointError, match=r"checkpoints must be a directory of "
                       r"checkpoints, but it is a file"):
        _run(toy, tmp_path / "w")
    run_experiment(toy.Config(), workdir=tmp_path / "w", progress=False, restart=True,
                   log=lambda s: None)  # --restart clears it


@pytest.mark.parametrize("damage", ["cut", "removed"])
def test_a_finished_stages_figures_survive_its_metrics_file(toy, tmp_path, damage):
    """The final figures of a finished stage are stored with its last checkpoint, so
    that its metrics.jsonl cut short or removed afterwards changes no result."""
    first = _run(toy, tmp_path / "w").payload["tables"]
    metrics = _stage(tmp_path / "w") / "metrics.jsonl"
    if damage == "cut":
        metrics.write_text("".join(metrics.read_text().splitlines(True)[:2]))
    else:
        metrics.unlink()
    again = _run(toy, tmp_path / "w").payload["tables"]
    assert again == first and again["toy"][0]["final_loss"] is not None


def test_an_older_stage_with_a_cut_metrics_file_is_one_clear_error(toy, tmp_path,
                                                                   monkeypatch):
    """A stage finished before its figures were stored with its checkpoint: its figures
    come from metrics.jsonl, which must then reach the last step."""
    from ebm_jax.train import loop

    fit = loop.fit

    def fit_without_stored_figures(*args, **kwargs):
        kwargs.pop("final_meta", None)
        return fit(*args, **kwargs)

    monkeypatch.setattr(loop, "fit", fit_without_stored_figures)
    first = _run(toy, tmp_path / "w").payload["tables"]
    assert _run(toy, tmp_path / "w").payload["tables"] == first  # complete: the same
    metrics = _stage(tmp_path / "w") / "metrics.jsonl"
    metrics.write_text("".join(metrics.read_text().splitlines(True)[:2]))
    with pytest.raises(CorruptFileError) as caught:
        _run(toy, tmp_path / "w")
    message = str(caught.value)
    assert "\n" not in message
    assert f"metrics file {metrics} ends at step 10" in message
    assert "finished at step 20" in message and "final loss" in message
    assert f"delete {metrics.parent}" in message
    metrics.unlink()
    with pytest.raises(CorruptFileError, match=r"metrics file .* holds no step"):
        _run(toy, tmp_path / "w")


def test_without_progress_bars_each_stage_says_one_line_when_done(toy, tmp_path):
    lines = []
    run_experiment(toy.Config(), workdir=tmp_path / "w", progress=False, log=lines.append)
    done = [ln for ln in lines if ln.startswith("stage toy") and " steps, " in ln]
    assert len(done) == 1 and "final loss" in done[0], lines


def test_a_stage_loaded_again_in_one_run_says_its_line_once(toy, tmp_path):
    """A stage entered again within one run (the MoCo start under every arm of a SoCL
    table: 25 loads in Table 2) gives its "done" line once, not once per load."""
    from ebm_jax.train.stages import RunContext

    lines = []
    ctx = RunContext(tmp_path / "w", progress=False, log=lines.append, lock=False)
    for _ in range(3):
        toy.run(toy.Config(), ctx)
    done = [ln for ln in lines if ln.startswith("stage toy") and " steps, " in ln]
    assert len(done) == 1 and ctx.stages_started == 1, lines


def test_a_recipe_that_counts_its_stages_gets_stage_i_of_n_and_the_runs_eta(
        toy, tmp_path, monkeypatch):
    """`count_stages(cfg)` of a recipe reaches the run context: each stage's line says
    "stage i of n" and, while stages are left, their time at the run's pace so far;
    without it, "stage i" alone."""
    lines = []
    monkeypatch.setattr(toy, "count_stages", lambda cfg: 3, raising=False)
    run_experiment(toy.Config(), workdir=tmp_path / "w", progress=False, log=lines.append)
    (done,) = [ln for ln in lines if ln.startswith("stage toy") and " steps, " in ln]
    assert "[stage 1 of 3; the other 2 stage(s): about " in done and "at this pace]" in done
    monkeypatch.delattr(toy, "count_stages")
    lines.clear()
    run_experiment(toy.Config(), workdir=tmp_path / "w2", progress=False, log=lines.append)
    (done,) = [ln for ln in lines if ln.startswith("stage toy") and " steps, " in ln]
    assert done.endswith("[stage 1]")


def test_the_stage_count_is_shared_by_the_seeds_and_the_eta_is_the_pace_so_far(
        tmp_path, monkeypatch):
    from ebm_jax.train import stages

    clock = [1000.0]
    monkeypatch.setattr(stages.time, "monotonic", lambda: clock[0])
    ctx = RunContext(tmp_path / "w", planned_stages=4, lock=False)
    other = ctx.with_seed(3)
    assert ctx.eta() == ""  # nothing finished yet
    ctx._stages[0].add("w/a")
    other._stages[0].add("w/b")  # a stage of another seed counts for the run
    other._stages[0].add("w/a")  # a stage entered again counts once
    clock[0] += 120.0  # two stages in 2 min: the two left take about 2 min
    assert ctx.stage_label("a") == "stage 2 of 4 (a)" == other.stage_label("a")
    assert ctx.eta() == "; the other 2 stage(s): about 2 min at this pace"
    ctx._stages[0].update({"w/c", "w/d"})
    assert ctx.eta() == ""  # none left
    ctx._stages[0].add("w/e")  # more than counted: no "of n" that would be wrong
    assert ctx.stage_label("e") == "stage 5 (e)"
    assert RunContext(tmp_path / "v", lock=False).stage_label("b") == "stage 0 (b)"


def test_a_resumed_runs_eta_counts_only_the_stages_it_trains(tmp_path, monkeypatch):
    """Finished stages a resumed run loads in a moment are counted in "stage i of n"
    but not in its pace: the ETA is the seconds per stage trained here."""
    from ebm_jax.train import stages

    clock = [0.0]
    monkeypatch.setattr(stages.time, "monotonic", lambda: clock[0])
    ctx = RunContext(tmp_path / "w", planned_stages=6, lock=False)
    for name in "abc":
        ctx.enter_stage(f"w/{name}", finished=True)
    clock[0] += 3.0  # three stages loaded in 3 s
    assert ctx.stage_label("c") == "stage 3 of 6 (c)" and ctx.eta() == ""
    ctx.enter_stage("w/d")
    clock[0] += 600.0  # one stage trained in 10 min: the two left take about 20 min
    assert ctx.eta() == "; the other 2 stage(s): about 20 min at this pace"


def test_a_stage_trained_here_and_entered_again_finished_is_not_reused(tmp_path):
    """A stage this run trained, entered again once finished (the MoCo screen's probe
    loads the stage it has just trained), counts once and not as reused: the run's
    wall time stays a whole run's."""
    ctx = RunContext(tmp_path / "w", planned_stages=2, lock=False)
    ctx.enter_stage("w/a")
    ctx.enter_stage("w/a", finished=True)
    assert ctx.stages_started == 1 and ctx.stages_reused == 0
    ctx.enter_stage("w/b", finished=True)  # finished before this run: reused
    ctx.enter_stage("w/b", finished=True)
    assert ctx.stages_started == 2 and ctx.stages_reused == 1


def test_the_work_before_the_first_stage_is_not_part_of_the_pace(tmp_path, monkeypatch):
    """Data and proposals made once before the first stage (23 min of TOP maps before
    a 4 min MoCo stage) do not make every later stage look 23 min longer."""
    from ebm_jax.train import stages

    clock = [0.0]
    monkeypatch.setattr(stages.time, "monotonic", lambda: clock[0])
    ctx = RunContext(tmp_path / "w", planned_stages=3, lock=False)
    clock[0] += 1380.0  # the run's preparation
    ctx.enter_stage("w/a")
    clock[0] += 240.0  # the first stage: 4 min, so the two left take about 8 min
    assert ctx.eta() == "; the other 2 stage(s): about 8 min at this pace"
    ctx.with_seed(1).enter_stage("w/b")  # a second stage does not restart the clock
    clock[0] += 240.0
    assert ctx.eta() == "; the other 1 stage(s): about 4 min at this pace"


def test_a_finished_stage_run_again_is_loaded_and_gives_no_pace(toy, tmp_path,
                                                                  monkeypatch):
    monkeypatch.setattr(toy, "count_stages", lambda cfg: 3, raising=False)
    for expected in ("[stage 1 of 3; the other 2 stage(s): about ", "[stage 1 of 3]"):
        lines = []
        run_experiment(toy.Config(), workdir=tmp_path / "w", progress=False,
                       log=lines.append)
        (done,) = [ln for ln in lines if ln.startswith("stage toy") and " steps, " in ln]
        assert expected in done, done  # the second run loads the stage: no pace
