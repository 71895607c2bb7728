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


@pytest.mark.parametrize("manifest", ["listed", "older"])
def test_an_out_holding_files_no_run_wrote_is_refused_before_training(toy, tmp_path,
                                                                      manifest):
    out = tmp_path / "o"
    _run(toy, tmp_path / "w", out)
    if manifest == "older":  # results written before the manifest listed its files
        path = out / "results.json"
        payload = json.loads(path.read_text())
        del payload["ebm_jax"]["files"]
        path.write_text(json.dumps(payload))
    (out / "notes.txt").write_text("mine")
    before = _files(out)
    with pytest.raises(ValueError) as caught:
        _run(toy, tmp_path / "w2", out, learning_rate=0.05)
    message = str(caught.value)
    assert "\n" not in message
    assert f"--out {out} holds notes.txt, which no run wrote" in message
    assert _files(out) == before  # kept
    assert not (tmp_path / "w2").exists()  # refused before training
    (out / "notes.txt").unlink()
    _run(toy, tmp_path / "w2", out, learning_rate=0.05)  # the earlier results: replaced
    assert json.loads((out / "results.json").read_text())["ebm_jax"]["files"] == [
        "results.json", "results.md", "toy.png"]


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


def _long_path(root: Path, length: int) -> Path:
    """A path of exactly `length` characters below `root`, of 200-character folders."""
    path = root
    while len(str(path)) < length - 201:
        path = path / ("a" * 200)
    return path / ("b" * (length - len(str(path)) - 1))


@pytest.mark.parametrize("option,length", [("--workdir", 3976), ("--out", 4040)])
def test_a_path_too_long_is_refused_before_training(toy, tmp_path, monkeypatch, capsys,
                                                    option, length):
    """A 3,976-character work dir trained 17 s and then failed at its first checkpoint
    with the cause cut off; now it is refused first, in one line naming the option and
    the system's limit (a results file needs fewer characters below --out than a
    checkpoint below --workdir)."""
    long = _long_path(tmp_path / "long", length)
    paths = {"--workdir": str(tmp_path / "w"), "--out": str(tmp_path / "o")}
    paths[option] = str(long)
    cfg = _toy_config(tmp_path, monkeypatch)
    capsys.readouterr()
    rc = cli.main(["run", cfg, "--workdir", paths["--workdir"], "--out", paths["--out"],
                   "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err[-3000:]
    assert err.startswith(f"ebm-jax run: error: {option} ") and f"{length} characters" in err
    assert "PC_PATH_MAX" in err and str(os.pathconf("/", "PC_PATH_MAX") - 1) in err
    assert len(err) < 400  # the path itself is not printed whole
    assert not (tmp_path / "long").exists() and not list(tmp_path.rglob("checkpoints"))


def test_a_folder_name_too_long_is_refused_before_training(toy, tmp_path, monkeypatch,
                                                           capsys):
    name_max = os.pathconf("/", "PC_NAME_MAX")
    cfg = _toy_config(tmp_path, monkeypatch)
    capsys.readouterr()
    out = tmp_path / ("o" * (name_max + 1)) / "results"
    assert cli.main(["run", cfg, "--workdir", str(tmp_path / "w"), "--out", str(out),
                     "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ebm-jax run: error: --out ")
    assert f"{name_max + 1} characters" in err and "PC_NAME_MAX" in err
    # the last folder of --out also names its lock and staging folders beside it
    out = tmp_path / ("o" * (name_max - 3))
    assert cli.main(["run", cfg, "--workdir", str(tmp_path / "w"), "--out", str(out),
                     "--no-progress"]) == 2
    assert "PC_NAME_MAX" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


def _tensorstore_error(code: int, text: str) -> ValueError:
    """What TensorStore raises through orbax when a write fails: far past 300
    characters before the cause."""
    file = "/w/toy-0123abcd/checkpoints/10.orbax-checkpoint-tmp/state.orbax-checkpoint-tmp"
    return ValueError(f'RESOURCE_EXHAUSTED: Error writing "params.kernel/0.0" in OCDBT '
                      f'database at local file "{file}/ocdbt.process_0/": Failed writing: '
                      f'"{file}/ocdbt.process_0/d/06ec2ba5ec3b688c2323fa90e470613a": '
                      f"Failed to write 1700863 bytes to file 4: {text} "
                      f"[os_error_code='{code}'] [source locations='tensorstore/kvstore/"
                      "file/file_key_value_store.cc:388']")


@pytest.mark.parametrize("raised", ["OSError", "TensorStore"])
@pytest.mark.parametrize("where", ["save", "wait"])
def test_a_full_disk_at_a_checkpoint_save_is_one_line(toy, tmp_path, monkeypatch, capsys,
                                                      caplog, raised, where):
    """The cause and the fix first: TensorStore's message was cut at 300 characters,
    before "No space left on device"."""
    import errno

    import orbax.checkpoint as ocp

    def full(self, *a, **k):
        if raised == "OSError":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC),
                          f"{self.directory}/10/state/d/0")
        raise _tensorstore_error(errno.ENOSPC, os.strerror(errno.ENOSPC))

    if where == "save":
        monkeypatch.setattr(ocp.CheckpointManager, "save", full)
    else:  # an asynchronous save that fails in its thread
        real = ocp.CheckpointManager.wait_until_finished

        def wait(self):
            real(self)
            if self.latest_step() is not None:
                full(self)

        monkeypatch.setattr(ocp.CheckpointManager, "wait_until_finished", wait)
    cfg = _toy_config(tmp_path, monkeypatch)
    capsys.readouterr()
    rc = cli.main(["run", cfg, "--workdir", str(tmp_path / "w"), "--out",
                   str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err[-3000:]
    (stage,) = (tmp_path / "w").glob("toy-*")
    assert err.startswith(f"ebm-jax run: error: no space left on device at "
                          f"{stage / 'checkpoints'}: free some space, or use a --workdir "
                          "on another disk"), err
    assert "checkpoint " in err and "[ENOSPC]" in err
    assert not (tmp_path / "o").exists() and not (tmp_path / ".o.lock").exists()


@pytest.mark.parametrize("raised", ["OSError", "TensorStore"])
def test_a_file_name_too_long_at_a_checkpoint_save_says_so_first(tmp_path, monkeypatch,
                                                                 raised):
    import errno

    import jax.numpy as jnp
    import orbax.checkpoint as ocp

    from ebm_jax.train.checkpoint import CheckpointError, StageCheckpoints

    def too_long(self, step, *a, **k):
        if raised == "OSError":
            raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG),
                          "/w/" + "a" * 4090)
        raise _tensorstore_error(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))

    monkeypatch.setattr(ocp.CheckpointManager, "save", too_long)
    ckpt = StageCheckpoints(tmp_path / "s", save_every=1, asynchronous=False)
    with pytest.raises(CheckpointError) as e:
        ckpt.save(10, {"w": jnp.zeros(2)}, {}, force=True)
    ckpt.close()
    msg = str(e.value)
    assert msg.startswith(f"path too long at {tmp_path / 's' / 'checkpoints'}"), msg
    assert "use a shorter --workdir" in msg and "[ENAMETOOLONG]" in msg
    assert "\n" not in msg and len(msg) < 400


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


def test_the_matmul_precision_holds_for_the_whole_run_and_its_stages(toy, tmp_path):
    """--config.matmul_precision is set around the whole run (every program traced
    under it). At its default, "highest" (full float32, what a CPU computes anyway),
    the run's stage directories are as without the setting (no stored run goes stale);
    set to "default" (the backend's fast passes) the run says so and every stage is its
    own."""
    import jax

    from ebm_jax.config import config_identity

    logs = []
    run_experiment(toy.Config(), workdir=tmp_path / "w", progress=False, log=logs.append)
    highest = dict(toy.SEEN)
    assert highest["precision"] == "highest"
    assert not any("float32 matmuls" in line for line in logs)  # a CPU: nothing to say
    run_experiment(toy.Config(matmul_precision="default"), workdir=tmp_path / "w",
                   progress=False, log=logs.append)
    assert toy.SEEN["precision"] is None  # the backend's own
    assert toy.SEEN["stage_dir"] != highest["stage_dir"]
    assert "float32 matmuls at precision 'default' (--config.matmul_precision)" in logs
    assert jax.config.jax_default_matmul_precision is None  # restored after the run
    assert config_identity(toy.Config()) == config_identity(
        toy.Config(matmul_precision="highest"))
    assert config_identity(toy.Config(matmul_precision="default")) != config_identity(
        toy.Config(matmul_precision="high"))


def test_a_cpu_computes_float32_alike_at_every_matmul_precision():
    """Why "highest" can be the default without a rerun: on a CPU a convolution, a
    matrix product and their gradient are bitwise the same under "default" and
    "highest" (the stored results, all made on CPUs, hold either way)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    if jax.default_backend() != "cpu":
        pytest.skip("a statement about the CPU backend")
    key = jax.random.key(0)
    x = jax.random.normal(key, (4, 16, 16, 8))
    w = jax.random.normal(jax.random.fold_in(key, 1), (3, 3, 8, 16))
    m = jax.random.normal(jax.random.fold_in(key, 2), (16 * 14 * 14, 32))

    def loss(w):
        y = jax.lax.conv_general_dilated(x, w, (1, 1), "VALID",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jnp.sum(jnp.tanh(y.reshape(4, -1) @ m) ** 2)

    out = {}
    for precision in ("default", "highest"):
        with jax.default_matmul_precision(precision):
            out[precision] = jax.jit(jax.value_and_grad(loss))(w)
    for a, b in zip(out["default"], out["highest"]):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_host_only_stage_is_shared_across_matmul_precisions(tmp_path):
    """A stage computed by NumPy on the host (TOP maps: `host_only`) has one directory
    under any matmul precision, so a run at "highest" reuses the default run's; every
    other stage keeps its own."""
    from ebm_jax.train.stages import RunContext

    default = RunContext(tmp_path, lock=False)
    highest = RunContext(tmp_path, lock=False,
                         run_identity={"matmul_precision": "highest"})
    identity = {"data": "abc", "every": 8}
    assert (highest.stage_dir("top-clean", identity, host_only=True)
            == default.stage_dir("top-clean", identity, host_only=True)
            == default.stage_dir("top-clean", identity))
    assert highest.stage_dir("socl-s0", identity) != default.stage_dir("socl-s0", identity)
