"""Multi-host training for real: two processes on this machine joined by
`jax.distributed.initialize` (a coordinator on 127.0.0.1, CPU collectives over gloo),
each with one CPU device, against one process with two devices.

The contrastive tiny config reads ArrayRecord records through grain
(`--config.loader=grain`), so each process reads only its own rows of every batch; the
one-process run indexes the whole batch in memory. Both give the same losses and
accuracies, and the checkpoints written by the two processes restore in one process."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow_datasets")
pytest.importorskip("grain")

ROOT = Path(__file__).parents[1]
CONFIG = f"{ROOT / 'experiments' / 'contrastive' / 'moco_linear_eval.py'}:tiny"
TIMEOUT_S = 600


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAX_NUM_CPU_DEVICES", "XLA_FLAGS") and not k.startswith("PYTEST")}
    return {**env, "JAX_PLATFORMS": "cpu", **extra}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "ebm_jax.cli", "run", CONFIG, "--no-progress", *args]


def _two_processes(command: list[str], cwd: Path) -> None:
    """Runs `command` as processes 0 and 1 of a 2-process JAX runtime (a coordinator
    on 127.0.0.1), each with one CPU device; both must succeed."""
    port = _free_port()
    procs = [subprocess.Popen(
        command, env=_env(JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
                          JAX_NUM_PROCESSES="2", JAX_PROCESS_ID=str(i)),
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for i in range(2)]
    try:
        logs = [p.communicate(timeout=TIMEOUT_S)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    for i, (p, log) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, f"process {i}:\n{log[-3000:]}"


def _losses(workdir: Path) -> dict:
    return {m.parent.name: [json.loads(line)["loss"] for line in m.read_text().splitlines()]
            for m in sorted(workdir.glob("*/metrics.jsonl"))}


def _rows(out: Path) -> dict:
    table = json.loads((out / "results.json").read_text())["tables"]["main"]
    keys = ("linear_accuracy", "few_label_accuracy", "knn5_accuracy", "knn10_accuracy",
            "final_loss")
    return {r["name"]: {k: r.get(k) for k in keys} for r in table}


def test_importing_and_loading_configs_leaves_the_backend_to_initialize():
    """`jax.distributed.initialize` must come before any JAX computation: importing
    every module of the package and loading every config starts no backend."""
    code = ("import importlib, pkgutil, ebm_jax\n"
            "from jax._src import xla_bridge as xb\n"
            "from ebm_jax.config import load_config, load_module\n"
            "from ebm_jax.config_catalog import find_configs\n"
            "for m in pkgutil.walk_packages(ebm_jax.__path__, 'ebm_jax.'):\n"
            "    importlib.import_module(m.name)\n"
            "    assert not xb.backends_are_initialized(), m.name\n"
            f"for p in find_configs({str(ROOT / 'experiments')!r}):\n"
            "    for v in load_module(p).VARIANTS:\n"
            "        load_config(f'{p}:{v}', [])\n"
            "        assert not xb.backends_are_initialized(), (p, v)\n")
    subprocess.run([sys.executable, "-c", code], check=True, env=_env(), cwd=ROOT,
                   timeout=TIMEOUT_S)


@pytest.mark.slow  # about 1 min on 2 idle cores: `make test-slow`
def test_two_processes_equal_one_process_with_two_devices(tmp_path):
    from ebm_jax.data import images as image_data
    from ebm_jax.data.records_write import write_image_records

    records = write_image_records(image_data.load_image_data("digits", 8, seed=0)
                                  .subset(96, 40), tmp_path / "records")
    data = ["--config.data=records", f"--config.data_root={records}",
            "--config.num_train=None", "--config.num_test=None"]
    _two_processes(_cli(*data, "--config.loader=grain", "--distributed", "--workdir",
                        str(tmp_path / "w2"), "--out", str(tmp_path / "o2")), tmp_path)
    one = _env(JAX_NUM_CPU_DEVICES="2")
    subprocess.run(_cli(*data, "--config.loader=memory", "--devices", "2",
                        "--workdir", str(tmp_path / "w1"), "--out", str(tmp_path / "o1")),
                   env=one, cwd=tmp_path, check=True, timeout=TIMEOUT_S,
                   capture_output=True)
    assert len(_losses(tmp_path / "w2")) == 2  # MoCo and the supervised ceiling
    # bit for bit: both runs are the same 2-device program (one mesh of 2 CPU devices,
    # in one or two processes) on this machine, and a mean over 2 devices is one
    # addition, the same in either order
    assert _losses(tmp_path / "w2") == _losses(tmp_path / "w1")
    assert _rows(tmp_path / "o2") == _rows(tmp_path / "o1")
    # the 2-process checkpoints restore in one process: nothing trains again, and the
    # linear evaluation of the restored encoders (recomputed) gives the same figures
    for stage in (tmp_path / "w2").glob("*-linear-*"):
        for f in stage.iterdir():
            f.unlink()
        stage.rmdir()
    before = _losses(tmp_path / "w2")
    subprocess.run(_cli(*data, "--devices", "2", "--workdir", str(tmp_path / "w2"),
                        "--out", str(tmp_path / "o3")),
                   env=one, cwd=tmp_path, check=True, timeout=TIMEOUT_S,
                   capture_output=True)
    assert _losses(tmp_path / "w2") == before
    assert _rows(tmp_path / "o3") == _rows(tmp_path / "o2")


@pytest.mark.slow  # under 1 min on 2 idle cores: `make test-slow`
def test_regression1d_two_processes_equal_one_process_with_two_devices(tmp_path):
    """The 1D ensembles: each process builds only its rows of every batch."""
    config = f"{ROOT / 'experiments' / 'ebm_regression' / 'table1_toy1d.py'}:tiny"
    args = [sys.executable, "-m", "ebm_jax.cli", "run", config, "--no-progress",
            "--config.methods=nce,ml-mcmc-1"]
    _two_processes([*args, "--distributed", "--workdir", str(tmp_path / "w2"), "--out",
                    str(tmp_path / "o2")], tmp_path)
    subprocess.run([*args, "--devices", "2", "--workdir", str(tmp_path / "w1"), "--out",
                    str(tmp_path / "o1")], env=_env(JAX_NUM_CPU_DEVICES="2"),
                   cwd=tmp_path, check=True, timeout=TIMEOUT_S, capture_output=True)
    two, one = _losses(tmp_path / "w2"), _losses(tmp_path / "w1")
    assert len(two) == 4 and two.keys() == one.keys()  # 2 methods x 2 datasets
    # bit for bit, as above: the same 2-device program on this machine
    assert two == one

    def kl(out):
        rows = json.loads((out / "results.json").read_text())["tables"]["table1"]
        return {(r["method"], r["dataset"]): r["kl_all"] for r in rows}

    a, b = kl(tmp_path / "o2"), kl(tmp_path / "o1")
    assert a.keys() == b.keys() and len(a) == 4
    assert a == b
