"""The project's datasets as tensorflow-datasets ArrayRecord datasets, with no
TensorFlow: the scalable data path, and the tracking experiments' (tensorflow-datasets,
array-record and grain are dependencies of the package).

    path = records_write.write_image_records(image_data, "data/digits16")  # or toy1d,
    records = open_records(path)                                  # detection, tracking
    records.source("train")[3]  -> {"image": uint8 (H, W, C), "label": int64, ...}

The writers live in `ebm_jax.data.records_write`. Each takes what the in-memory path
already has (arrays, a `DetectionSet`'s
files, tracking `Sequence`s), and writes one tfds dataset directory
`<out>/<builder name>/1.0.0/` (`dataset_info.json`, `features.json`, one ArrayRecord
file per split) through tfds' builder, which writes into a temporary directory and
renames it when complete: a failed write leaves no half-written dataset. Examples keep
their order (no shuffling at write time), so record i of a split is example i of the
in-memory data. Every feature is a plain `tfds.features.Tensor` (images as uint8), which
tfds encodes without TensorFlow. `open_records` reads any of them back from its
directory alone (`tfds.builder_from_directory`): a random-access source per split that
`grain` reads (`ebm_jax.data.pipeline`), and the metadata the writer stored.

Kinds and features:

- "toy1d" (the EBM regression paper, sec. 4.1): split "train", {x, y: float32 (1,)}.
- "images" (the contrastive benchmark): splits "train", "test",
  {image: uint8 (H, W, C) = round(255 x), label: int64}.
- "detection" (the EBM regression paper, sec. 4.2): split "train" (every image of the set, in order;
  the recipe draws its splits), {image: uint8 (H, W, 3), image_id: int64,
  boxes / noisy_boxes: float32 (N, 4) x, y, w, h in the image's pixels,
  category: int64 (N,)}.
- "tracking" (the tracking experiments): split "train", one example per frame, sequences
  one after another, {frame_file: uint8 (n,) the frame's JPEG/PNG file as stored,
  sequence: int64 (index into metadata "sequences": name, size, annotations),
  frame_index: int64, box: float32 (4,) (NaN where none), absent: bool, point /
  noisy_point: float32 (2,) (NaN where none)}.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from ebm_jax.data.labelled_images import ImageData

KINDS = ("toy1d", "images", "detection", "tracking")
VERSION = "1.0.0"


class RecordsError(ValueError):
    """A records directory that is missing, not a dataset of this project, or of
    another kind than the caller needs."""


_WRITE_AGAIN = "write the records again (`ebm-jax records ...`)"


def _tfds():
    try:
        import tensorflow_datasets as tfds
    except ImportError as error:  # pragma: no cover - a dependency of the package
        raise ImportError("the ArrayRecord data path needs tensorflow-datasets, grain "
                          "and array-record (dependencies of ebm_jax: pip install -e "
                          ".)") from error
    return tfds


# --------------------------------------------------------------------------- writing


def _builder_class(kind: str):
    """The tfds builder of one kind, defined on first use (tfds registers builder
    classes by name when they are defined, and its import is slow)."""
    if kind in _BUILDERS:
        return _BUILDERS[kind]
    tfds = _tfds()

    class _Info(tfds.core.DatasetInfo):
        def initialize_from_bucket(self) -> None:
            """Nothing to fetch: these datasets are not on tfds' bucket (whose lookup,
            at every write, left an empty `tmp*tfds` folder in the system's temporary
            folder)."""

    class _Records(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        VERSION = tfds.core.Version(VERSION)

        def __init__(self, *, data_dir, features: Mapping[str, tuple], splits:
                     Mapping[str, Callable[[], Iterator[dict]]], metadata: Mapping):
            self._features, self._splits, self._meta = dict(features), dict(splits), metadata
            super().__init__(data_dir=data_dir, file_format="array_record")

        def _info(self):
            # frames of varying size (two unknown dimensions) and byte strings (uint8
            # of unknown length: an image file) are stored as raw bytes
            spec = {k: tfds.features.Tensor(
                        shape=shape, dtype=dtype,
                        encoding="bytes" if sum(d is None for d in shape) > 1 or (
                            dtype == np.uint8 and None in shape) else "none")
                    for k, (shape, dtype) in self._features.items()}
            return _Info(
                builder=self, description=f"ebm_jax {kind} records",
                features=tfds.features.FeaturesDict(spec),
                metadata=tfds.core.MetadataDict(self._meta), disable_shuffling=True)

        def _split_generators(self, dl_manager):
            return {name: self._generate_examples(name) for name in self._splits}

        def _generate_examples(self, split):
            for i, example in enumerate(self._splits[split]()):
                yield i, example

    _Records.__name__ = f"ebm_jax_{kind}_records"
    _Records.name = f"ebm_jax_{kind}_records"
    _BUILDERS[kind] = _Records
    return _Records


_BUILDERS: dict[str, type] = {}


# --------------------------------------------------------------------------- reading


def find_dataset_dir(path) -> Path:
    """The tfds dataset directory (the one holding `dataset_info.json`) at `path`, or
    the only one below it (`<out>/<name>/<version>`): what a writer's `out` holds."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise RecordsError(f"{path}: no such records directory")
    if (path / "dataset_info.json").is_file():
        return path
    found = sorted(p.parent for p in path.glob("*/*/dataset_info.json"))
    if len(found) != 1:
        what = "no dataset" if not found else f"{len(found)} datasets"
        raise RecordsError(f"{path}: {what} (a directory written by ebm_jax's records "
                           "writers, holding dataset_info.json, or its parent)")
    return found[0]


def read_rows(source, idx, fields: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """The examples `idx` of `source`, each field stacked into one array."""
    idx = np.asarray(idx, np.int64)
    if hasattr(source, "read_rows"):
        return source.read_rows(idx, fields)
    n = len(source)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise IndexError(f"record indices must be in [0, {n}), got range "
                         f"[{idx.min()}, {idx.max()}]")
    getitems = getattr(source, "__getitems__", None)
    rows = getitems([int(i) for i in idx]) if getitems else [source[int(i)] for i in idx]
    keys = fields if fields is not None else (rows[0].keys() if rows else ())
    return {k: np.stack([np.asarray(r[k]) for r in rows]) for k in keys}


@dataclasses.dataclass(frozen=True)
class Records:
    """An opened records dataset: its kind, metadata and per-split sizes; `source(split)`
    is a random-access source (len, [i], __getitems__) of numpy examples."""

    path: Path
    kind: str
    metadata: dict
    splits: dict[str, int]
    builder: object = dataclasses.field(repr=False, compare=False)

    def source(self, split: str = "train"):
        if split not in self.splits:
            raise RecordsError(f"{self.path}: no split {split!r} (has "
                               f"{', '.join(self.splits)})")
        return _CheckedSource(self.builder.as_data_source(split=split),
                              [f for f, _ in self.files(split)])

    def files(self, split: str) -> list[tuple[Path, int]]:
        """The ArrayRecord files of a split and the number of records each holds."""
        info = self.builder.info.splits[split]
        return [(Path(fi.filename), int(fi.examples_in_shard))
                for fi in info.file_instructions]

    def verify(self, chunk: int = 1024) -> None:
        """Reads every record of every split back (ArrayRecord, a Riegeli file, checks
        a hash per chunk header and chunk data); a RecordsError naming the file where
        one is truncated or corrupted. Costs one read of the whole dataset."""
        for split in self.splits:
            for path, n in self.files(split):
                reader = _open_file(path, n)
                try:
                    for start in range(0, n, chunk):
                        reader.read(list(range(start, min(start + chunk, n))))
                except RuntimeError as e:
                    raise RecordsError(_damaged(path, _reason(e))) from None
                finally:
                    reader.close()

    def read_all(self, split: str = "train", fields=None) -> dict[str, np.ndarray]:
        """Every example of a split, each field stacked (fixed-shape fields only)."""
        return read_rows(self.source(split), np.arange(self.splits[split]), fields)


class _CheckedSource:
    """A tfds data source whose damaged records (ArrayRecord's hash checks fail while
    grain or `read_rows` reads them) raise one RecordsError naming the split's file."""

    def __init__(self, source, files: list[Path]):
        self.source, self.files = source, files

    def __len__(self) -> int:
        return len(self.source)

    def _damaged(self, error):
        where = self.files[0] if len(self.files) == 1 else ", ".join(map(str, self.files))
        return RecordsError(_damaged(where, _reason(error)))

    def __getitem__(self, i):
        try:
            return self.source[i]
        except RuntimeError as e:
            raise self._damaged(e) from None

    def __getitems__(self, idx):
        try:
            return self.source.__getitems__(idx)
        except RuntimeError as e:
            raise self._damaged(e) from None


def _reason(error: BaseException) -> str:
    """The first clause of an ArrayRecord/Riegeli error ("chunk data hash mismatch")."""
    text = str(error).removeprefix("Corrupted Riegeli/records file: ")
    return text.split(" (")[0].split(";")[0].strip() or type(error).__name__


def _damaged(path: Path, reason: str) -> str:
    return (f"{path}: the ArrayRecord file is truncated or corrupted ({reason}); "
            f"{_WRITE_AGAIN}")


def _open_file(path: Path, num_records: int):
    """An ArrayRecord reader of `path`, checked to open and to index `num_records`
    records (what dataset_info.json says): a cut file has no footer or index."""
    from array_record.python.array_record_module import ArrayRecordReader

    if not path.is_file():
        raise RecordsError(f"{path}: the ArrayRecord file is missing; {_WRITE_AGAIN}")
    try:
        reader = ArrayRecordReader(str(path))
    except (RuntimeError, ValueError, OSError) as e:
        raise RecordsError(_damaged(path, _reason(e))) from None
    if not reader.ok() or reader.num_records() != num_records:
        found = reader.num_records()
        try:
            reader.close()
        except RuntimeError as e:  # a reader that failed to open fails to close
            raise RecordsError(_damaged(path, _reason(e))) from None
        raise RecordsError(_damaged(path, f"holds an index of {found} of its "
                                          f"{num_records} records"))
    return reader


def _read_builder(tfds, where: Path):
    """tfds' builder of the dataset directory `where`; a description file that cannot
    be read is a RecordsError naming it."""
    from google.protobuf import json_format

    from ebm_jax.io import CorruptFileError, read_json

    for name in ("dataset_info.json", "features.json", "metadata.json"):
        if (where / name).is_file():
            try:
                read_json(where / name, what="records file", fix=_WRITE_AGAIN)
            except CorruptFileError as error:
                raise RecordsError(str(error)) from None
    try:
        return tfds.builder_from_directory(str(where))
    except Exception as error:  # noqa: BLE001 - valid JSON that tfds cannot use
        file = where / "dataset_info.json" if isinstance(
            error, json_format.ParseError) else where
        first = (str(error).strip().splitlines() or [""])[0][:200]
        raise RecordsError(f"{file}: not a records dataset tfds can read "
                           f"({type(error).__name__}: {first}); {_WRITE_AGAIN}") from None


def open_records(path, kind: str | None = None) -> Records:
    """Opens a dataset written by this module (from its directory alone); `kind`
    checks what it holds. Each ArrayRecord file is opened and its record count checked
    (a truncated file is refused here, naming it); `Records.verify` reads every
    record."""
    tfds = _tfds()
    where = find_dataset_dir(path)
    builder = _read_builder(tfds, where)
    meta = dict(builder.info.metadata or {})
    if meta.get("kind") not in KINDS:
        raise RecordsError(f"{where}: not an ebm_jax records dataset (metadata kind "
                           f"{meta.get('kind')!r})")
    if kind is not None and meta["kind"] != kind:
        raise RecordsError(f"{where} holds {meta['kind']} records, not {kind}")
    try:  # the splits and their files, as dataset_info.json describes them
        splits = {name: int(s.num_examples) for name, s in builder.info.splits.items()}
        records = Records(where, meta["kind"], meta, splits, builder)
        files = {split: records.files(split) for split in splits}
    except Exception as error:  # noqa: BLE001 - a description tfds parsed but cannot use
        first = (str(error).strip().splitlines() or [""])[0][:200]
        raise RecordsError(f"{where / 'dataset_info.json'}: its splits cannot be read "
                           f"({type(error).__name__}: {first}); {_WRITE_AGAIN}") from None
    for split in splits:
        for file, n in files[split]:
            _open_file(file, n).close()
    return records


def image_data_from_records(path, *, size: int | None = None):
    """The `ImageData` of an "images" records dataset (images / 255, float32), its size
    checked against `size`; its `train_index` is the record index of each training
    image, so that a grain pipeline reads the same images from the records."""
    rec = open_records(path, "images")
    # every record is read here, through the checked source: a damaged one is one
    # RecordsError naming its file, before any training (no separate verify pass)
    parts = {s: rec.read_all(s) for s in ("train", "test")}
    arrays = {f"{s}_images": parts[s]["image"].astype(np.float32) / 255.0
              for s in parts}
    stored = int(arrays["train_images"].shape[1])
    if size is not None and size != stored:
        raise RecordsError(f"{rec.path} holds {stored}x{stored} images: set image_size "
                           f"to {stored} (got {size}); records are read as written")
    return ImageData(
        name=f"records:{rec.metadata.get('name', rec.path.name)}",
        train_labels=parts["train"]["label"].astype(np.int32),
        test_labels=parts["test"]["label"].astype(np.int32),
        num_classes=int(rec.metadata["num_classes"]),
        class_names=tuple(rec.metadata.get("class_names") or ()),
        train_index=np.arange(rec.splits["train"]), records=str(rec.path), **arrays)


__all__ = [
    "KINDS",
    "Records",
    "RecordsError",
    "find_dataset_dir",
    "image_data_from_records",
    "open_records",
    "read_rows",
]
