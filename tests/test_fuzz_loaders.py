"""Property-based tests of the loaders a user feeds (hypothesis): for any damage to a
valid file (bits flipped, cut short, bytes inserted or overwritten), the loader returns
a result or raises the project's own error in one line naming the file, within a time
and a memory bound; never another exception or a hang.

The bounds: each example within hypothesis's deadline (5 s; 10 s in the long profile),
and each load's peak allocation within MEMORY_BOUND, as traced by `tracemalloc`
(Python objects and numpy's arrays; not the C++ buffers of ArrayRecord). The valid
inputs are a few kilobytes to a few hundred, so a loader that sized an array from a
damaged length field before checking it against the file would pass the bound by orders
of magnitude.

Deterministic: hypothesis runs derandomized (the examples follow from the test), so a
failure repeats. `make test` runs the "default" profile (a few dozen mutants per
loader, seconds); `make test-slow` sets EBM_JAX_FUZZ=long for thousands.
"""

import json
import os
import pickle
import shutil
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ebm_jax.config import ConfigError
from ebm_jax.config_catalog import wall_times
from ebm_jax.data.images import _read_cifar_batch
from ebm_jax.models.torch_weights import TorchCheckpointError, read_torch_state_dict
from ebm_jax.report import claims, stored
from ebm_jax.report.provenance import StoredError

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "models" / "data"

settings.register_profile("default", max_examples=40, derandomize=True, deadline=5000,
                          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                 HealthCheck.too_slow])
settings.register_profile("long", max_examples=2000, derandomize=True, deadline=10000,
                          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                 HealthCheck.too_slow])
settings.load_profile(os.environ.get("EBM_JAX_FUZZ", "default"))


@st.composite
def damage(draw, size: int):
    """A list of edits to a file of `size` bytes: flip a bit, cut at, insert at,
    overwrite at."""
    edits = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "overwrite"]))
        at = draw(st.integers(0, max(size - 1, 0)))
        if kind == "flip":
            edits.append(("flip", at, draw(st.integers(0, 7))))
        elif kind == "cut":
            edits.append(("cut", at, None))
        else:
            edits.append((kind, at, draw(st.binary(min_size=1, max_size=16))))
    return edits


def _apply(data: bytes, edits) -> bytes:
    b = bytearray(data)
    for kind, at, arg in edits:
        at = min(at, max(len(b) - 1, 0))
        if kind == "flip" and b:
            b[at] ^= 1 << arg
        elif kind == "cut":
            del b[at:]
        elif kind == "insert":
            b[at:at] = arg
        elif kind == "overwrite":
            b[at:at + len(arg)] = arg
    return bytes(b)


def _leaves(tree, path=()):
    """The paths of a JSON tree's leaves (and of its empty lists and objects)."""
    if isinstance(tree, dict) and tree:
        return [q for k, v in tree.items() for q in _leaves(v, path + (k,))]
    if isinstance(tree, list) and tree:
        return [q for i, v in enumerate(tree) for q in _leaves(v, path + (i,))]
    return [path]


JSON_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40),
                        st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                        st.lists(st.integers(-5, 5), max_size=3),
                        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@st.composite
def edited_json(draw, raw: bytes):
    """A JSON file with 1-3 of its values replaced by values of other types or sizes
    (numbers edited, wrong types, a key dropped): valid JSON, wrong content."""
    tree = json.loads(raw)
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _leaves(tree) if p]
        if not paths:
            break
        short = [p for p in paths if len(p) <= 3]  # a record's own fields, half the time
        path = draw(st.sampled_from(short if short and draw(st.booleans()) else paths))
        parent = tree
        for k in path[:-1]:
            parent = parent[k]
        if isinstance(parent, dict) and draw(st.booleans()) and len(parent) > 1:
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(JSON_VALUES)
    return json.dumps(tree).encode()


MEMORY_BOUND = 64 * 2**20  # bytes one load may allocate at its peak


def _bounded(call, *args):
    """`call(*args)`, failing the test when its peak allocation (traced by tracemalloc)
    passes MEMORY_BOUND; an exception of the call propagates."""
    tracing = tracemalloc.is_tracing()
    if tracing:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
    else:
        tracemalloc.start()
        base = 0
    try:
        return call(*args)
    finally:
        peak = tracemalloc.get_traced_memory()[1] - base
        if not tracing:
            tracemalloc.stop()
        assert peak <= MEMORY_BOUND, f"{call} allocated {peak / 2**20:.0f} MiB at its peak"


def test_the_memory_bound_catches_an_allocation_sized_from_a_damaged_field():
    """The bound sees numpy's allocations (untouched pages included): an array sized one
    byte past it fails; one well inside passes."""
    with pytest.raises(AssertionError, match="MiB at its peak"):
        _bounded(np.empty, MEMORY_BOUND + 1, np.uint8)
    _bounded(np.empty, MEMORY_BOUND // 2, np.uint8)


def _one_line_naming(error: BaseException, path: Path) -> None:
    text = str(error)
    assert "\n" not in text, text
    assert str(path) in text or path.name in text, text


def _check(load, path: Path, errors):
    try:
        _bounded(load, path)
    except errors as e:
        _one_line_naming(e, path)


ZIP = (DATA / "torch_state_dict_zip.pt").read_bytes()
LEGACY = (DATA / "torch_state_dict_legacy.pt").read_bytes()


@given(edits=damage(len(ZIP)))
def test_a_damaged_zip_checkpoint_is_one_line(tmp_path_factory, edits):
    path = tmp_path_factory.mktemp("pth") / "weights.pth"
    path.write_bytes(_apply(ZIP, edits))
    _check(read_torch_state_dict, path, (TorchCheckpointError,))


@given(edits=damage(len(LEGACY)))
def test_a_damaged_legacy_checkpoint_is_one_line(tmp_path_factory, edits):
    path = tmp_path_factory.mktemp("pth") / "weights.pth"
    path.write_bytes(_apply(LEGACY, edits))
    _check(read_torch_state_dict, path, (TorchCheckpointError,))


CIFAR = pickle.dumps({b"batch_label": b"training batch 1 of 5",
                      b"data": np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3072),
                      b"labels": [3, 7]}, protocol=2)


@given(edits=damage(len(CIFAR)))
def test_a_damaged_cifar_batch_is_one_line(tmp_path_factory, edits):
    path = tmp_path_factory.mktemp("cifar") / "data_batch_1"
    path.write_bytes(_apply(CIFAR, edits))
    _check(_read_cifar_batch, path, (ValueError,))


WALL = json.dumps({"tracking/x.py": {"quick": [
    {"seconds": 120.5, "machine": "2 CPU cores", "date": "2026-11-27", "how": "h"}],
    "tiny": [{"seconds": [30, 40], "machine": "2 CPU cores"}]}}).encode()


@given(edits=damage(len(WALL)))
def test_a_damaged_wall_times_file_is_one_line(tmp_path_factory, edits):
    root = tmp_path_factory.mktemp("experiments")
    (root / "wall_times.json").write_bytes(_apply(WALL, edits))
    _check(wall_times, root / "wall_times.json", (ConfigError,))


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory):
    """A valid stored run's results.json (the repository's own)."""
    names = stored.stored_names(ROOT)
    if not names:
        pytest.skip("no stored run")
    return (ROOT / stored.RESULTS / names[0] / "results.json").read_bytes()


@given(data=st.data())
def test_a_damaged_stored_results_file_is_one_line(tmp_path_factory, stored_run, data):
    edits = data.draw(damage(len(stored_run)))
    folder = tmp_path_factory.mktemp("stored")
    (folder / "results.json").write_bytes(_apply(stored_run, edits))
    _check(lambda p: stored.read_results(p.parent), folder / "results.json", (StoredError,))


CLAIMS = (ROOT / "docs" / "claims.toml").read_bytes()


@given(edits=damage(len(CLAIMS)))
def test_a_damaged_claims_file_is_one_line(tmp_path_factory, edits):
    root = tmp_path_factory.mktemp("repo")
    (root / "docs").mkdir()
    (root / "docs" / "claims.toml").write_bytes(_apply(CLAIMS, edits))
    path = root / "docs" / "claims.toml"
    _check(lambda p: claims.load(root), path, (StoredError,))
    for problem in claims.problems(root):
        assert "\n" not in problem and str(path) in problem


def test_wall_times_refuses_non_finite_and_reversed_entries(tmp_path):
    """Values JSON lets through that are no wall time: Infinity, 1e300 (finite but no
    run), true, a reversed range."""
    for bad in ('Infinity', '1e300', 'true', '[40, 30]', '[0, 5]'):
        (tmp_path / "wall_times.json").write_text(
            '{"a.py": {"quick": [{"seconds": %s, "machine": "m"}]}}' % bad)
        with pytest.raises(ConfigError, match=str(tmp_path / "wall_times.json")):
            wall_times(tmp_path)
    shutil.rmtree(tmp_path)
    (tmp_path / "wall_times.json").mkdir(parents=True)
    with pytest.raises(ConfigError, match="wall_times.json: not a file"):
        wall_times(tmp_path)


def _zip_mutants(count: int):
    """`count` byte-level mutants of the small zip checkpoint (seeded): 1-4 bits flipped,
    or bytes overwritten, or the file cut, as the issue's 120 mutants were made."""
    rng = np.random.default_rng(0)
    for _ in range(count):
        data = bytearray(ZIP)
        kind = rng.integers(0, 3)
        if kind == 0:
            for at in rng.integers(0, len(data), size=rng.integers(1, 5)):
                data[at] ^= 1 << int(rng.integers(0, 8))
        elif kind == 1:
            at = int(rng.integers(0, len(data)))
            data[at:at + 8] = rng.integers(0, 256, size=8, dtype=np.uint8).tobytes()
        else:
            del data[int(rng.integers(1, len(data))):]
        yield bytes(data)


def _zip_header_cases():
    """Targeted edits of every central-directory entry (what Python's zipfile trusts):
    the encrypted flag set, an unknown compression method, a stored size of 2**32 - 1."""
    import struct

    def each_entry(edit):
        data, at = bytearray(ZIP), 0
        while (at := data.find(b"PK\x01\x02", at)) >= 0:
            edit(data, at)
            at += 4
        return bytes(data)

    def encrypted(data, at):
        flags = struct.unpack_from("<H", data, at + 8)[0]
        struct.pack_into("<H", data, at + 8, flags | 0x1)

    def method(data, at):
        struct.pack_into("<H", data, at + 10, 99)

    def size(data, at):
        struct.pack_into("<I", data, at + 24, 2**32 - 1)

    return {"encrypted": each_entry(encrypted), "unknown method": each_entry(method),
            "huge size": each_entry(size)}


def test_zip_header_cases_are_refused_by_the_reader(tmp_path):
    for name, data in _zip_header_cases().items():
        path = tmp_path / f"{name.replace(' ', '_')}.pth"
        path.write_bytes(data)
        with pytest.raises(TorchCheckpointError) as error:
            _bounded(read_torch_state_dict, path)
        _one_line_naming(error.value, path)


def test_damaged_checkpoints_are_one_line_at_the_command_line(tmp_path, capsys):
    """Zip mutants given to --config.pretrained (24 of the 120 in `make test`, all 120
    under EBM_JAX_FUZZ=long) and the targeted header cases: each the reader refuses is
    refused by `ebm-jax run` before any training, exit code 2, one line naming the
    option and the file; a mutant the reader takes (a flipped byte of padding or of a
    name) is not run."""
    from ebm_jax import cli

    count = 120 if os.environ.get("EBM_JAX_FUZZ") == "long" else 24
    cases = dict(enumerate(_zip_mutants(count)))
    cases.update(_zip_header_cases())
    refused = 0
    for name, data in cases.items():
        path = tmp_path / f"mutant_{name}.pth".replace(" ", "_")
        path.write_bytes(data)
        try:
            read_torch_state_dict(path)
            assert not isinstance(name, str), f"{name}: the reader took it"
            continue
        except TorchCheckpointError:
            pass
        rc = cli.main(["run", "siamfc_box:tiny", "--config.backbone=resnet18",
                       f"--config.pretrained={path}", "--workdir", str(tmp_path / "w"),
                       "--out", str(tmp_path / "o"), "--no-progress"])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and "\n" not in err, (name, err)
        assert err.startswith("ebm-jax run: error: --config.pretrained=") and str(path) in err
        refused += 1
    assert refused >= count // 3 + 3, refused  # most mutants break the archive
    assert not (tmp_path / "o").exists()


def test_ranges_are_checked_before_training_and_named(tmp_path, capsys):
    """Options that overflowed after a stage (jitter factors), a data root that is a
    file, a range that said more than the check took (region_fields): one line each."""
    from ebm_jax import cli

    afile = tmp_path / "afile"
    afile.write_text("x")
    cases = [
        (["run", "ebm_table4_box_head:tiny", "--config.box_head.scale_jitter_factors=200,200"],
         "BoxHeadSettings.scale_jitter_factors must be two numbers in (0, 2]"),
        (["run", "siamfc_box:tiny", f"--config.data_root={afile}"],
         f"--config.data_root must be a directory, got the file {afile}"),
        (["run", "socl_table1_ablation:tiny", "--config.region_fields=16"],
         "--config.region_fields must be a number in [0.0, 11.75], got 16.0"),
    ]
    for argv, says in cases:
        rc = cli.main([*argv, "--workdir", str(tmp_path / "w"), "--out",
                       str(tmp_path / "o"), "--no-progress"])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and "\n" not in err and says in err, err
    assert not (tmp_path / "o").exists()


@pytest.fixture(scope="module")
def tracking_records(tmp_path_factory):
    """A small valid tracking records folder (2 sequences of 4 frames) and its files."""
    from ebm_jax.data.records_write import write_tracking_records
    from ebm_jax.data.sequences import read_got10k
    from ebm_jax.data.tracking import TrackingSpec, generate_tracking_split

    root = tmp_path_factory.mktemp("records")
    spec = TrackingSpec(split="train", num_sequences=2, num_frames=4, height=48, width=64,
                        seed=1)
    seqs = read_got10k(generate_tracking_split(root / "d", spec, progress=False))
    path = Path(write_tracking_records(seqs, root / "trk"))
    files = {p.relative_to(path): p.read_bytes() for p in sorted(path.rglob("*"))
             if p.is_file()}
    return path, files


def _records_copy(tmp_path_factory, tracking_records, name, edits) -> Path:
    path, files = tracking_records
    dest = tmp_path_factory.mktemp("damaged") / "trk"
    for rel, data in files.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(_apply(data, edits) if rel.name == name else data)
    return dest


def _open_and_verify(path: Path) -> None:
    from ebm_jax.data.records import open_records
    from ebm_jax.data.tracking_records import read_tracking_records

    read_tracking_records(path)
    open_records(path, "tracking").verify()


@pytest.mark.parametrize("name", ["metadata.json", "features.json", "dataset_info.json"])
@given(data=st.data())
def test_a_damaged_records_description_is_one_line(tmp_path_factory, tracking_records,
                                                   name, data):
    """The records' JSON descriptions (the project's metadata with its annotation
    checksums, TFDS's features and dataset info): damage is one RecordsError naming the
    folder, or the records still read whole."""
    from ebm_jax.data.records import RecordsError

    (size,) = [len(v) for k, v in tracking_records[1].items() if k.name == name]
    edits = data.draw(damage(size))
    dest = _records_copy(tmp_path_factory, tracking_records, name, edits)
    _check(_open_and_verify, dest, (RecordsError,))


@pytest.mark.parametrize("name", ["metadata.json", "features.json", "dataset_info.json"])
@given(data=st.data())
def test_an_edited_records_description_is_one_line(tmp_path_factory, tracking_records,
                                                   name, data):
    """Valid JSON, wrong content (numbers edited, wrong types, keys dropped): one
    RecordsError naming the folder or its file, or the records still read whole."""
    from ebm_jax.data.records import RecordsError

    path, files = tracking_records
    (raw,) = [v for k, v in files.items() if k.name == name]
    edited = data.draw(edited_json(raw))
    dest = _records_copy(tmp_path_factory, tracking_records, name,
                         [("cut", 0, None), ("insert", 0, edited)])
    _check(_open_and_verify, dest, (RecordsError,))


@given(data=st.data())
def test_a_damaged_records_data_file_is_one_line_before_training(tmp_path_factory,
                                                                 tracking_records, data):
    """The ArrayRecord data: a flipped bit, a cut or inserted bytes are found by opening
    and verifying (before any stage reads a chunk), one RecordsError naming the file."""
    from ebm_jax.data.records import RecordsError

    ((rel, raw),) = [(k, v) for k, v in tracking_records[1].items()
                     if "array_record" in k.name]
    edits = data.draw(damage(len(raw)))
    dest = _records_copy(tmp_path_factory, tracking_records, rel.name, edits)
    try:
        _bounded(_open_and_verify, dest)
    except RecordsError as e:
        assert "\n" not in str(e) and str(dest) in str(e), str(e)


@pytest.mark.parametrize("key, value", [("length", "abc"), ("length", None), ("first", "x"),
                                        ("name", None), ("image_size", 5),
                                        ("boxes", [[1, 2]]), ("split", 3)])
def test_an_edited_sequence_field_is_one_line(tmp_path_factory, tracking_records, key,
                                              value):
    """Hand-picked edits of one sequence's metadata: each one RecordsError naming the
    records folder (or its metadata.json), never a ValueError or TypeError of Python."""
    from ebm_jax.data.records import RecordsError

    path, files = tracking_records
    meta = json.loads(files[Path("metadata.json")])
    meta["sequences"][0][key] = value
    dest = _records_copy(tmp_path_factory, tracking_records, "metadata.json",
                         [("cut", 0, None), ("insert", 0, json.dumps(meta).encode())])
    with pytest.raises(RecordsError) as error:
        _open_and_verify(dest)
    _one_line_naming(error.value, dest)


@pytest.fixture(scope="module")
def got10k_folder(tmp_path_factory):
    """A small GOT-10k-layout split (list.txt; per sequence frames, groundtruth.txt,
    absence.label, cover.label, meta.json) and its text files' bytes."""
    from ebm_jax.data.tracking import TrackingSpec, generate_tracking_split

    root = tmp_path_factory.mktemp("got10k")
    spec = TrackingSpec(split="train", num_sequences=2, num_frames=4, height=48, width=64,
                        seed=2)
    path = Path(generate_tracking_split(root / "split", spec, progress=False))
    texts = {p.relative_to(path): p.read_bytes() for p in sorted(path.rglob("*"))
             if p.suffix in (".txt", ".label") or p.name == "meta.json"}
    return path, texts


def _read_all_annotations(read):
    def load(root):
        for seq in read(root):
            seq.boxes, seq.absent, len(seq)

    return load


@pytest.mark.parametrize("name", ["list.txt", "groundtruth.txt", "absence.label",
                                  "cover.label", "meta.json"])
@given(data=st.data())
def test_a_damaged_got10k_annotation_is_one_line(tmp_path_factory, got10k_folder, name,
                                                 data):
    """GOT-10k's text files damaged in a copy of the split: reading it (and every
    sequence's annotations) returns, or raises one ValueError naming the file or its
    sequence folder."""
    from ebm_jax.data.sequences import read_got10k

    path, texts = got10k_folder
    rel = next(k for k in texts if k.name == name)
    edits = data.draw(damage(len(texts[rel])))
    dest = tmp_path_factory.mktemp("got") / "split"
    shutil.copytree(path, dest)
    (dest / rel).write_bytes(_apply(texts[rel], edits))
    try:
        _bounded(_read_all_annotations(read_got10k), dest)
    except ValueError as e:
        text = str(e)
        assert "\n" not in text, text
        assert str(dest) in text or rel.parent.name in text or name in text, text


def test_damaged_got10k_annotations_are_one_line_at_the_command_line(
        tmp_path_factory, got10k_folder, capsys):
    """A sample of byte-damaged GOT-10k annotation files under --config.got10k_root
    (its val split): each one the reader refuses is refused by `ebm-jax run` before any
    data is generated or stage trained, exit code 2, one line naming the file's folder."""
    from ebm_jax import cli
    from ebm_jax.data.sequences import read_got10k

    path, texts = got10k_folder
    rng = np.random.default_rng(1)
    names = [k for k in texts if k.name in ("list.txt", "groundtruth.txt", "absence.label")]
    refused = tried = 0
    while refused < 6 and tried < 200:
        tried += 1
        rel = names[tried % len(names)]
        data = bytearray(texts[rel])
        for at in rng.integers(0, len(data), size=2):
            data[at] = int(rng.integers(0, 256))
        root = tmp_path_factory.mktemp("cli_got") / "root"
        shutil.copytree(path, root / "val")
        (root / "val" / rel).write_bytes(bytes(data))
        try:
            _read_all_annotations(lambda r: read_got10k(r, split="val"))(root)
            continue  # a mutant the reader takes (a digit for a digit, say)
        except ValueError:
            pass
        work = root.parent / "w"
        rc = cli.main(["run", "siamfc_box:tiny", f"--config.got10k_root={root}",
                       "--workdir", str(work), "--out", str(root.parent / "o"),
                       "--no-progress"])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and "\n" not in err, err
        assert str(root / "val") in err, err
        assert not (root.parent / "o").exists()
        assert not any(work.glob("box-siam-*")) and not any(work.glob("data/*-*"))
        refused += 1
    assert refused == 6, f"only {refused} of {tried} mutants refused by the reader"


def test_damaged_generated_records_are_one_line_at_the_command_line(tmp_path, capsys):
    """The generated splits' records in a work directory, their description damaged
    (a sample of byte mutants the reader refuses): the next `ebm-jax run` there stops
    before any stage with exit code 2 and one line naming the records folder."""
    from ebm_jax import cli
    from ebm_jax.config import load_config
    from ebm_jax.data.tracking_records import read_tracking_records
    from ebm_jax.recipes.tracking.data import open_data
    from ebm_jax.train.stages import RunContext

    cfg = load_config("siamfc_box:tiny")
    work = tmp_path / "w"
    with RunContext(work, seed=cfg.seed, progress=False, log=lambda _: None) as ctx:
        open_data(cfg, ctx)
    (records,) = [p for p in (work / "data").glob("train-*.records")]
    (meta,) = records.glob("*/*/metadata.json")
    original = meta.read_bytes()
    rng = np.random.default_rng(2)
    refused = tried = 0
    while refused < 4 and tried < 100:
        tried += 1
        data = bytearray(original)
        for at in rng.integers(0, len(data), size=2):
            data[at] = int(rng.integers(0, 256))
        meta.write_bytes(bytes(data))
        try:
            read_tracking_records(records)
            continue
        except ValueError:
            pass
        rc = cli.main(["run", "siamfc_box:tiny", "--workdir", str(work), "--out",
                       str(tmp_path / "o"), "--no-progress"])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and "\n" not in err, err
        assert str(records) in err, err
        assert not (tmp_path / "o").exists() and not any(work.glob("box-siam-*"))
        refused += 1
    assert refused == 4, f"only {refused} of {tried} mutants refused by the reader"


@pytest.fixture(scope="module")
def otb_folder(tmp_path_factory):
    """A small OTB-layout folder: Seq/img/0001.jpg.. and groundtruth_rect.txt."""
    import io as io_module

    from PIL import Image

    root = tmp_path_factory.mktemp("otb")
    for name in ("Basketball", "Car4"):
        img = root / name / "img"
        img.mkdir(parents=True)
        for i in range(4):
            buf = io_module.BytesIO()
            Image.new("RGB", (48, 32), (30 * i, 90, 200)).save(buf, "JPEG")
            (img / f"{i + 1:04d}.jpg").write_bytes(buf.getvalue())
        (root / name / "groundtruth_rect.txt").write_text(
            "".join(f"{3 + i},4,10,8\n" for i in range(4)))
    return root


@given(data=st.data())
def test_a_damaged_otb_annotation_is_one_line(tmp_path_factory, otb_folder, data):
    from ebm_jax.data.sequences import read_otb

    raw = (otb_folder / "Car4" / "groundtruth_rect.txt").read_bytes()
    edits = data.draw(damage(len(raw)))
    dest = tmp_path_factory.mktemp("otbd") / "otb"
    shutil.copytree(otb_folder, dest)
    (dest / "Car4" / "groundtruth_rect.txt").write_bytes(_apply(raw, edits))
    try:
        _bounded(_read_all_annotations(lambda r: read_otb(r, frame_ranges={})), dest)
    except ValueError as e:
        text = str(e)
        assert "\n" not in text, text
        assert "Car4" in text or str(dest) in text, text


@pytest.fixture(scope="module")
def coco_files(tmp_path_factory):
    """A small COCO-layout folder (annotations/instances_<split>.json, images) and the
    detector's results on val; returns (root, detections path)."""
    from tests.data.coco_files import write_coco

    tmp = write_coco(tmp_path_factory.mktemp("coco"), train=3, val=2, image_size=48)
    return tmp / "coco", tmp / "dets.json"


@pytest.mark.parametrize("which", ["annotations", "detections"])
@given(data=st.data())
def test_a_damaged_coco_file_is_one_line(tmp_path_factory, coco_files, which, data):
    """COCO's val annotation file or the detector's result file, damaged (bytes) or
    edited (valid JSON, values retyped or dropped): opening the dataset returns, or
    raises one ValueError naming the file."""
    from ebm_jax.data.detection_sets import open_coco

    root, dets = coco_files
    dest = tmp_path_factory.mktemp("cocod")
    shutil.copytree(root, dest / "coco")
    shutil.copy(dets, dest / "dets.json")
    target = (dest / "coco" / "annotations" / "instances_val2017.json"
              if which == "annotations" else dest / "dets.json")
    raw = target.read_bytes()
    if data.draw(st.booleans()):
        target.write_bytes(_apply(raw, data.draw(damage(len(raw)))))
    else:
        target.write_bytes(data.draw(edited_json(raw)))
    try:
        _bounded(lambda root: open_coco(root, dest / "dets.json", image_size=48),
                 dest / "coco")
    except ValueError as e:
        _one_line_naming(e, target)


def _field_names(cfg, prefix=""):
    import dataclasses

    out = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            out += _field_names(value, f"{prefix}{f.name}.")
        else:
            out.append(prefix + f.name)
    return out


OVERRIDE_VALUES = st.one_of(
    st.sampled_from(["", "nan", "inf", "-inf", "-1", "0", "1e308", "1e-308", "true", "none",
                     "None", "[]", "1,2", "1,,2", "a,b", "0.5;1", "'x'", "2**70", "\x00"]),
    st.integers(-10**12, 10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=12))


@pytest.mark.parametrize("spec", ["table1_toy1d:tiny", "dimp_centre:tiny",
                                  "socl_table1_ablation:tiny", "moco_linear_eval:tiny"])
@given(data=st.data())
def test_any_override_value_is_accepted_or_one_line(spec, data):
    """`--config.FIELD=VALUE` with any value for any field of a config: the config
    resolves (its __post_init__ checks passed) or one ConfigError / ValueError naming
    the field, never another exception."""
    from ebm_jax.config import load_config

    fields = _field_names(load_config(spec))
    field = data.draw(st.sampled_from(fields))
    value = data.draw(OVERRIDE_VALUES)
    try:
        load_config(spec, [f"{field}={value}"])
    except (ConfigError, ValueError) as e:
        text = str(e)
        assert "\n" not in text, text
        assert field.split(".")[-1] in text, (field, value, text)
