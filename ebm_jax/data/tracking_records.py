"""Tracking sequences read from ArrayRecord records: the storage of the generated
training data at scale (thousands of sequences), read by the same pair samplers as a
GOT-10k folder.

    seqs = read_tracking_records(path)          # [RecordSequence], like read_got10k
    seqs[0].read_frame(3)                       # decoded from the record, on demand
    path, seqs = generated_records(root, spec)  # a generated split, written once

A "tracking" records dataset (`records_write.write_tracking_records`) holds one record
per frame, the frame as its file's bytes (the JPEG the generator wrote), and in its
metadata each sequence's name, frame size and annotations as `read_got10k` read them
(float64). A `RecordSequence` is a `Sequence` whose frames are records: it decodes the
same bytes with the same decoder, so its frames, boxes, labels and points are exactly
those of the folder it was written from, and every batch a pair sampler cuts from it is
the batch it cuts from the folder (tests/data/test_tracking_records.py). Only the
annotations are held in memory; frames are read when a pair needs them.

A generated split's records carry the generator's identity (`tracking.spec_identity`:
every spec field and the generator's VERSION) in their metadata "generator", checked
when they are opened, so records of another spec or an older generator are never read
as this one's.
"""

from __future__ import annotations

import dataclasses
import io
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from ebm_jax.data.records import RecordsError, open_records
from ebm_jax.data import records_write
from ebm_jax.data.records_write import TRACKING_ANNOTATIONS, annotation_checks
from ebm_jax.data.records_write import TRACKING_FORMAT as FORMAT
from ebm_jax.data.sequences import Sequence, SequenceError

@dataclasses.dataclass(frozen=True, eq=False)
class RecordSequence(Sequence):
    """A `Sequence` whose frame i is record `first + i` of a records `source`; its
    `frames` name the records ("<dataset dir>#<record>") for error messages."""

    source: Any = dataclasses.field(default=None, repr=False)
    first: int = 0

    def frame_bytes(self, i: int) -> bytes:
        i = self._checked_index(i)
        record = self.source[self.first + i]
        if int(record["frame_index"]) != i:
            raise RecordsError(f"{self.frames[i]}: holds frame {int(record['frame_index'])}"
                               f" of its sequence where frame {i} of {self.name!r} belongs;"
                               " write the records again")
        return np.asarray(record["frame_file"], np.uint8).tobytes()

    def read_frame(self, i: int) -> np.ndarray:
        data = self.frame_bytes(i)
        return self._decode(io.BytesIO(data), int(i), self.frames[int(i)])


def _differences(found: dict, expected: dict) -> str:
    keys = sorted(k for k in set(found) | set(expected) if found.get(k) != expected.get(k))
    shown = ", ".join(f"{k}: {found.get(k)!r} (needed {expected.get(k)!r})"
                      for k in keys[:4])
    return shown + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")


def _check_annotations(where, meta: dict) -> None:
    """A sequence's annotations against the checksums written with them (records
    written before they were carry none, and are not checked): an edited box, point
    or label is one RecordsError naming the sequence and the first frame that differs."""
    if "annotations_digest" not in meta:
        return
    digest, frames = annotation_checks(meta)
    if digest == meta["annotations_digest"]:
        return
    stored = str(meta.get("frame_checks", ""))
    bad = next((i for i in range(0, len(frames), 4)
                if frames[i:i + 4] != stored[i:i + 4]), None)
    at = (f", frame {bad // 4 + 1}" if bad is not None else
          " (its name, length or size)")
    raise RecordsError(f"{where}: the annotations of sequence {meta.get('name')!r}{at} do "
                       "not match their checksum: edited or damaged since they were "
                       "written; write the records again")


def read_tracking_records(path, *, generator: dict | None = None) -> list[RecordSequence]:
    """The sequences of a "tracking" records dataset, frames read on demand. With
    `generator` (a `spec_identity`), records whose metadata "generator" differs are
    refused, naming the fields that differ. Records written before frames were stored
    as files (format 1), or whose metadata disagrees with the records, are refused."""
    rec = open_records(path, "tracking")
    where = rec.path
    if rec.metadata.get("format") != FORMAT:
        raise RecordsError(f"{where}: tracking records of format "
                           f"{rec.metadata.get('format', 1)!r}, this version reads format "
                           f"{FORMAT} (frames stored as their files); write the records "
                           "again (`ebm-jax records tracking ...`)")
    if generator is not None:
        found = rec.metadata.get("generator")
        if not isinstance(found, dict):
            raise RecordsError(f"{where}: records without a generator identity, needed "
                               f"the generated split {generator.get('split')!r}; write "
                               "them again (delete the folder and rerun)")
        if found != generator:
            raise RecordsError(f"{where}: records of another generated split or generator "
                               f"version ({_differences(found, generator)}); delete the "
                               "folder and rerun, or give another data_root")
    sequences = rec.metadata.get("sequences", [])
    if not isinstance(sequences, list) or not all(isinstance(m, dict) for m in sequences):
        raise RecordsError(f"{where / 'metadata.json'}: its \"sequences\" is not a list of "
                           "objects; write the records again")
    try:
        return _sequences(rec, where, sequences)
    except (KeyError, TypeError, ValueError, OverflowError) as error:
        if isinstance(error, RecordsError):
            raise
        what = f"no field {error}" if isinstance(error, KeyError) else str(error)[:200]
        raise RecordsError(f"{where / 'metadata.json'}: a sequence's metadata cannot be "
                           f"read ({type(error).__name__}: {what}); write the records "
                           "again") from None


def _sequences(rec, where, sequences: list) -> list[RecordSequence]:
    """`read_tracking_records`' sequences from the metadata's list (checked, each
    against its checksum)."""
    sources, first, out, total = {}, {}, [], 0
    for meta in sequences:
        _check_annotations(where, meta)
        n, name = int(meta["length"]), str(meta["name"])
        split = str(meta.get("split", "train"))
        if split not in rec.splits:
            raise RecordsError(f"{where}: sequence {name!r} lies in split {split!r}, which "
                               "the records do not hold; write the records again")
        if split not in sources:
            sources[split], first[split] = rec.source(split), 0
        start = int(meta.get("first", first[split]))
        columns = {k: None if meta.get(k) is None else np.array(meta[k], dtype=float)
                   for k in TRACKING_ANNOTATIONS}
        columns["absent"] = np.asarray(meta["absent"], bool)
        if columns["cover"] is not None:
            columns["cover"] = columns["cover"].astype(np.int64)
        try:
            out.append(RecordSequence(
                name=name, frames=tuple(f"{where}:{split}#{start + i}" for i in range(n)),
                image_size=tuple(int(v) for v in meta["image_size"]),
                source=sources[split], first=start, **columns))
        except SequenceError as error:
            raise RecordsError(f"{where}: metadata of sequence {name!r} does not fit its "
                               f"frames ({error}); write the records again") from None
        first[split] = start + n
        total += n
    if total != sum(rec.splits.values()) or not out or any(
            first[k] != rec.splits[k] for k in first):
        raise RecordsError(f"{where}: the metadata lists {len(out)} sequences of {total} "
                           f"frames, the records hold {sum(rec.splits.values())} frames; "
                           "write the records again")
    return out


def generated_records(dest, spec, *, progress: bool = True, write: bool = True
                      ) -> tuple[Path, list[RecordSequence]]:
    """The generated split of `spec` as records at `dest` (its tfds dataset
    directory's parent), written once: the split is generated as GOT-10k folders
    beside it (`tracking.generate_tracking_split`, kept when it was there already),
    read and checked by `read_got10k`, written as records (atomically) and the folders
    it generated removed (also those a killed attempt generated). Existing records are checked against the spec's identity.
    `write=False` (a process that is not the writer) only reads."""
    from ebm_jax.data.sequences import read_got10k
    from ebm_jax.data.tracking import generate_tracking_split, spec_identity

    dest = Path(dest).expanduser()
    identity = spec_identity(spec)
    if write and not any(dest.glob("*/*/dataset_info.json")):
        folder = dest.with_name(dest.name + ".folders")
        # a marker beside the folders this function generates: an attempt killed before
        # it removed them leaves the marker, and the next attempt removes them too
        ours = dest.with_name(dest.name + ".folders.generated")
        existed = folder.exists() and not ours.exists()
        if not existed:
            dest.parent.mkdir(parents=True, exist_ok=True)
            ours.touch()
        generate_tracking_split(folder, spec, progress=progress)
        records_write.write_tracking_records(read_got10k(folder), dest,
                                             metadata={"generator": identity})
        if not existed:
            shutil.rmtree(folder)
            ours.unlink()
    sequences = read_tracking_records(dest, generator=identity)
    # every record read back once before any training (Riegeli's chunk hashes): a
    # flipped bit is found here, not when a stage first reads its chunk (about 0.2 s
    # for the 96 MB of the quick training split, a few seconds per GB)
    open_records(dest, "tracking").verify()
    return dest, sequences


__all__ = ["FORMAT", "RecordSequence", "generated_records", "read_tracking_records"]
