"""The run system keeps what it did not write: `--out` and `--workdir` never overlap,
`--out` is locked like the work directory, files that appear in `--out` during a run
are kept, leftovers of an interrupted results write are cleared, symbolic links and
broken lock files are one clear line (ebm_jax.recipes.runner, ebm_jax.report.output,
ebm_jax.train.stages.RunLock, ebm_jax.checks)."""

import json
import os
import socket
import sys
from pathlib import Path

import pytest

from ebm_jax import cli
from ebm_jax.recipes import run_experiment
from ebm_jax.report.output import OutChangedError, clean_stale
from ebm_jax.train.stages import RunLock, RunLockedError

HERE = Path(__file__).parent
DEAD = 2**22 + 12345  # above Linux's largest pid: never a running process


def _run(toy, workdir, out=None, **cfg):
    return run_experiment(toy.Config(**cfg), workdir=workdir, out=out, progress=False,
                          log=lambda s: None)


def _files(d: Path) -> dict:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file()}


# --------------------------------------------------------------- 2.1 overlapping dirs


@pytest.mark.parametrize("layout", ["same", "workdir_in_out", "out_in_workdir",
                                    "same_through_a_link", "same_through_dotdot"])
def test_out_and_workdir_never_overlap(toy, tmp_path, layout):
    o = tmp_path / "O"
    _run(toy, tmp_path / "first", o)  # O holds the results of an earlier run
    results = _files(o)
    workdir, out = {
        "same": (o, o),
        "workdir_in_out": (o / "runs", o),
        "out_in_workdir": (tmp_path / "W", tmp_path / "W" / "results"),
        "same_through_a_link": (tmp_path / "link", o),
        "same_through_dotdot": (tmp_path / "x" / ".." / "O", o),
    }[layout]
    (tmp_path / "link").symlink_to(o)
    (tmp_path / "x").mkdir()
    with pytest.raises(ValueError, match=r"(same directory|lies inside).*separate "
                       r"directories.*results replace --out whole"):
        _run(toy, workdir, out)
    assert _files(o) == results  # nothing trained, nothing replaced
    assert not (tmp_path / "W").exists() and not (o / "runs").exists()


# ------------------------------------------------------------------- 2.2 out lock


def test_out_is_locked_while_a_run_writes_it(toy, tmp_path):
    out = tmp_path / "o"
    with RunLock.beside(out):  # another live run (this process) writes --out
        with pytest.raises(RunLockedError, match=rf"results directory {out} is being "
                           rf"written by process {os.getpid()} on .*use another --out"):
            _run(toy, tmp_path / "w2", out)
    assert not (tmp_path / "w2").exists()  # refused before training
    _run(toy, tmp_path / "w1", out)
    assert (out / "results.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o", "w1"]  # lock released


def test_the_out_lock_is_released_on_ctrl_c_and_a_stale_one_is_taken_over(toy, tmp_path):
    out = tmp_path / "o"
    with pytest.raises(KeyboardInterrupt):
        _run(toy, tmp_path / "w", out, die_at=15)
    assert not (tmp_path / ".o.lock").exists()
    (tmp_path / ".o.lock").write_text(json.dumps(
        {"pid": DEAD, "host": socket.gethostname(), "started": "then"}))
    _run(toy, tmp_path / "w", out)
    assert not (tmp_path / ".o.lock").exists() and (out / "results.json").is_file()


# -------------------------------------------------- 2.3 files that appear during a run


def test_files_created_in_out_during_the_run_are_kept(toy, tmp_path, monkeypatch):
    out = tmp_path / "o"
    _run(toy, tmp_path / "w", out)
    before = _files(out)
    run = toy.run

    def run_and_write_a_note(cfg, ctx):
        (out / "notes.txt").write_text("mine")
        return run(cfg, ctx)

    monkeypatch.setattr(toy, "run", run_and_write_a_note)
    with pytest.raises(OutChangedError, match=r"--out .*o received files during the "
                       r"run \(notes.txt\), so it is left as it is and the new results "
                       r"are in .*o\.new-"):
        _run(toy, tmp_path / "w", out, learning_rate=0.05)
    assert _files(out) == {**before, "notes.txt": b"mine"}
    (kept,) = tmp_path.glob("o.new-*")
    assert json.loads((kept / "results.json").read_text())["ebm_jax"]["config"][
        "learning_rate"] == 0.05
    assert not list(tmp_path.glob(".o.*"))  # no hidden leftovers, no lock


# ---------------------------------------------- 2.11 leftovers of an interrupted write


def test_leftovers_of_an_interrupted_results_write_are_cleared(toy, tmp_path):
    out = tmp_path / "o"
    _run(toy, tmp_path / "w", out)
    (tmp_path / f".o.new-{DEAD}").mkdir()
    (tmp_path / f".o.new-{DEAD}" / "results.md").write_text("half")
    (tmp_path / f".o.old-{DEAD + 1}").mkdir()
    live = tmp_path / f".o.new-{os.getppid()}"  # a live process: left alone
    live.mkdir()
    _run(toy, tmp_path / "w", out)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["o", "w", live.name])


def test_an_interrupted_swap_puts_the_earlier_results_back(toy, tmp_path):
    out = tmp_path / "o"
    _run(toy, tmp_path / "w", out)
    before = _files(out)
    os.replace(out, tmp_path / f".o.old-{DEAD}")  # killed between the two renames
    (tmp_path / f".o.new-{DEAD}").mkdir()
    said = []
    clean_stale(out, log=said.append)
    assert _files(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o", "w"]
    assert "put back the earlier results" in said[0]


# ------------------------------------------------------------ 3: symbolic links


def test_a_symlinked_out_is_followed_and_a_dangling_one_refused(toy, tmp_path):
    target = tmp_path / "results"
    _run(toy, tmp_path / "w", target)
    (tmp_path / "latest").symlink_to(target)
    _run(toy, tmp_path / "w", tmp_path / "latest", learning_rate=0.05)
    assert (tmp_path / "latest").is_symlink()  # the link stays, its target is replaced
    payload = json.loads((target / "results.json").read_text())
    assert payload["ebm_jax"]["config"]["learning_rate"] == 0.05
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    with pytest.raises(ValueError, match=r"--out .*gone is a dangling symbolic link to "
                       r".*nowhere, which does not exist"):
        _run(toy, tmp_path / "w2", tmp_path / "gone")
    assert not (tmp_path / "w2").exists()


def test_a_dangling_symlink_as_workdir_is_named(toy, tmp_path, capsys):
    (tmp_path / "w").symlink_to(tmp_path / "nowhere")
    with pytest.raises(ValueError, match=r"--workdir .*w is a dangling symbolic link "
                       r"to .*nowhere, which does not exist"):
        _run(toy, tmp_path / "w")


# ------------------------------------------------------------ 3: broken lock files


@pytest.mark.parametrize("content,what", [("", "is empty"),
                                          ("{garbled", "is not a lock record"),
                                          ('{"pid": null}', "is not a lock record"),
                                          (None, "is a directory")])
def test_a_broken_lock_file_is_one_clear_line(toy, tmp_path, capsys, content, what):
    (tmp_path / "w").mkdir()
    lock = tmp_path / "w" / ".lock"
    lock.mkdir() if content is None else lock.write_text(content)
    with pytest.raises(RunLockedError, match=rf"\.lock .*{what}.*if no other run uses "
                       r"--workdir .*w, delete it and rerun") as e:
        _run(toy, tmp_path / "w")
    assert "None" not in str(e.value)
    assert lock.exists()  # left for the user to judge


# ------------------------------------------------- 3: checkpoints, one line each


def _toy_config(tmp_path, monkeypatch, **fields):
    """A config file of the toy recipe, for `cli.main`."""
    monkeypatch.syspath_prepend(str(HERE / "train"))
    cfg = tmp_path / "toy.py"
    args = ", ".join(f"{k}={v!r}" for k, v in fields.items())
    cfg.write_text(f'"""ebm-jax run {cfg}:tiny\n\nA toy."""\nfrom toy_recipe import '
                   f'Config\nVARIANTS = ("tiny",)\n\n\ndef get_config(v):\n'
                   f'    return Config({args})\n')
    return str(cfg)


def _no_orbax_tracebacks(caplog):
    return [r.getMessage()[:80] for r in caplog.records if r.exc_info]


def test_a_checkpoint_path_too_long_is_one_line(toy, tmp_path, monkeypatch, capsys,
                                                caplog):
    workdir = tmp_path  # 4040 characters: writable, but the stage's files pass
    while len(str(workdir)) < 3840:  # PATH_MAX (4096)
        workdir = workdir / ("a" * 200)
    workdir = workdir / ("b" * (4040 - len(str(workdir)) - 1))
    cfg = _toy_config(tmp_path, monkeypatch)
    capsys.readouterr()
    rc = cli.main(["run", cfg, "--workdir", str(workdir), "--out", str(tmp_path / "o"),
                   "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err[-3000:]
    assert "could not write checkpoint " in err and "/checkpoints/10: " in err
    assert "File name too long [ENAMETOOLONG]: the path is too long" in err
    assert not _no_orbax_tracebacks(caplog)
    assert not (tmp_path / "o").exists()


def test_a_full_disk_at_a_checkpoint_save_is_one_line(toy, tmp_path, monkeypatch, capsys,
                                                      caplog):
    import errno

    import orbax.checkpoint as ocp

    def full(self, step, *a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC),
                      f"{self.directory}/{step}/state/d/0")

    monkeypatch.setattr(ocp.CheckpointManager, "save", full)
    cfg = _toy_config(tmp_path, monkeypatch)
    capsys.readouterr()
    rc = cli.main(["run", cfg, "--workdir", str(tmp_path / "w"), "--out",
                   str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err[-3000:]
    assert "checkpoints/10: No space left on device [ENOSPC]: free some space" in err
    assert not (tmp_path / "o").exists() and not (tmp_path / ".o.lock").exists()


def test_a_corrupt_checkpoints_error_is_one_line():
    from ebm_jax.train.checkpoint import StageCheckpoints

    spec = ValueError('Error opening "zarr" driver: {\n  "driver": "zarr",\n' * 40)
    e = StageCheckpoints._unreadable(type("C", (), {"directory": "/w/s/checkpoints"})(),
                                     10, spec)
    assert "\n" not in str(e) and str(e).startswith("checkpoint /w/s/checkpoints/10 "
                                                    "cannot be read")


def test_callbacks_into_orbaxs_closed_event_loop_print_nothing(capsys):
    """TensorStore reads left running by a failed restore call back into orbax's
    closed event loop: Python would print each as a traceback."""
    saved = sys.excepthook, sys.unraisablehook
    try:
        cli.main(["list", "--root", "/nonexistent-root"])
        capsys.readouterr()
        try:
            raise RuntimeError("Event loop is closed")
        except RuntimeError as e:
            sys.unraisablehook(type("U", (), {"exc_type": RuntimeError, "exc_value": e,
                                              "exc_traceback": e.__traceback__,
                                              "err_msg": None, "object": None})())
            sys.excepthook(RuntimeError, e, e.__traceback__)
        assert capsys.readouterr().err == ""
    finally:
        sys.excepthook, sys.unraisablehook = saved


@pytest.mark.slow
def test_a_damaged_checkpoint_is_one_line_from_the_command(toy, tmp_path, monkeypatch):
    """End to end, as the command prints it: resuming from a checkpoint whose data
    files are gone, five times (the closed-loop tracebacks came now and then)."""
    import subprocess

    cfg = _toy_config(tmp_path, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        _run(toy, tmp_path / "w", die_at=15)
    (stage,) = (tmp_path / "w").glob("toy-*")
    for p in (stage / "checkpoints" / "10" / "state" / "d").iterdir():
        p.unlink()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent), str(HERE / "train")]),
               JAX_PLATFORMS="cpu")
    for _ in range(5):
        r = subprocess.run([sys.executable, "-m", "ebm_jax.cli", "run", cfg, "--workdir",
                            str(tmp_path / "w"), "--out", str(tmp_path / "o"),
                            "--no-progress"], env=env, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr[-3000:]
        assert "checkpoints/10 cannot be read" in r.stderr
