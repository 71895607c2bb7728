"""Training batches as a `grain` pipeline: deterministic, sharded per host,
checkpointable, and the same batches as the in-memory path.

    ds = step_batches(source, batch_size=64, seed=s, num_steps=n)   # grain.MapDataset
    ds[s]                    # this host's rows of the batch of step s (random access)
    it = iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=2)))  # read ahead;
    it.get_state() / it.set_state(...)                                # checkpointable

The batch of step s is a pure function of (seed, s): epoch e = s // steps_per_epoch
takes a permutation of the n items drawn from (seed, e) alone and step s its
(s mod steps_per_epoch)-th slice of `batch_size` (the last partial batch of an epoch is
dropped). The in-memory recipes index their arrays with the same `batch_indices`, so
the two paths train on the same batches, and a stopped run resumes at the step it
stopped at whichever path it uses.

Per host: with P processes (`HostShard`, by default `jax.process_index()` of
`jax.process_count()`), process p reads only rows [p b / P, (p + 1) b / P) of each
global batch of b rows, which is the order `jax.make_array_from_process_local_data`
assembles; the P hosts together read each item of an epoch exactly once.

`source` is anything with `len` and `[i]` returning a dict of arrays (e.g. an
ArrayRecord split from `data.records.open_records(path).source(split)`), or
`ArraySource(images=..., labels=...)` over in-memory arrays.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Sequence

import numpy as np

from ebm_jax.data.records import open_records, read_rows

# Read-ahead threads of `StepReader` by default: one per usable CPU, at least 2 and at
# most this many. The pair samplers spend most of their time in OpenCV, NumPy and JPEG
# decoding, which release the GIL, so threads scale with cores (2 threads left a GPU
# waiting 63-68% of each tracking stage on a 16-core machine).
MAX_READ_THREADS = 16


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def default_read_options():
    """grain.ReadOptions of `StepReader`: `usable_cpus()` threads (in [2,
    MAX_READ_THREADS]) and a prefetch buffer of two batches per thread."""
    import grain

    threads = min(MAX_READ_THREADS, max(2, usable_cpus()))
    return grain.ReadOptions(num_threads=threads, prefetch_buffer_size=2 * threads)


@functools.lru_cache(maxsize=4)  # one permutation per epoch, not per step
def _epoch_order(seed: int, epoch: int, num_items: int) -> np.ndarray:
    """The order of the items in epoch `epoch`: a permutation drawn from (seed, epoch)
    alone (NumPy's PCG64), so any epoch can be recomputed without the ones before."""
    return np.random.default_rng([seed, epoch]).permutation(num_items)


def batch_indices(seed: int, step: int, num_items: int, batch_size: int) -> np.ndarray:
    """The positions (into the n items) of the global batch of step `step`."""
    if batch_size < 1 or num_items < batch_size:
        raise ValueError(f"batch_size must be in [1, {num_items}] (the number of items), "
                         f"got {batch_size}")
    epoch, i = divmod(int(step), num_items // batch_size)
    return _epoch_order(int(seed), epoch, int(num_items))[
        i * batch_size:(i + 1) * batch_size]


@dataclasses.dataclass(frozen=True)
class HostShard:
    """Process `index` of `count`: which rows of each global batch this host reads."""

    index: int = 0
    count: int = 1

    def __post_init__(self):
        if not (isinstance(self.count, int) and self.count >= 1
                and isinstance(self.index, int) and 0 <= self.index < self.count):
            raise ValueError(f"HostShard needs count >= 1 and 0 <= index < count, got "
                             f"index={self.index!r} count={self.count!r}")

    @classmethod
    def of_jax_process(cls) -> HostShard:
        import jax

        return cls(jax.process_index(), jax.process_count())

    def rows(self, batch_size: int) -> slice:
        if batch_size % self.count:
            raise ValueError(f"batch_size {batch_size} must be divisible by the number of "
                             f"processes ({self.count})")
        per = batch_size // self.count
        return slice(self.index * per, (self.index + 1) * per)


class ArraySource:
    """In-memory arrays as a random-access source: `[i]` is {name: array[i]}."""

    def __init__(self, **arrays):
        lengths = {len(a) for a in arrays.values()}
        if len(lengths) != 1:
            raise ValueError(f"the arrays must have one length, got {sorted(lengths)}")
        self.arrays = {k: np.asarray(v) for k, v in arrays.items()}
        self._len = lengths.pop()

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, i) -> dict:
        return {k: v[i] for k, v in self.arrays.items()}

    def read_rows(self, idx: np.ndarray, fields=None) -> dict[str, np.ndarray]:
        return {k: v[idx] for k, v in self.arrays.items() if fields is None or k in fields}


def step_batches(source, *, batch_size: int, seed: int, num_steps: int,
                 items: np.ndarray | None = None, fields: Sequence[str] | None = None,
                 shard: HostShard | None = None):
    """A `grain.MapDataset` of `num_steps` elements: element s is this host's rows of
    the global batch of step s, a dict of the `fields` of `source` stacked, plus
    "index": the items' positions (0..n-1; e.g. memory-bank slots).

    `items` (default: every record) are the record indices of the n items, when they
    are a subset of `source` in another order (a validation split held out)."""
    import grain

    items = np.arange(len(source)) if items is None else np.asarray(items, np.int64)
    n, shard = len(items), shard or HostShard.of_jax_process()
    rows = shard.rows(batch_size)
    batch_indices(seed, 0, n, batch_size)  # checks batch_size against n now

    def read(step: int) -> dict[str, np.ndarray]:
        positions = batch_indices(seed, step, n, batch_size)[rows]
        return {**read_rows(source, items[positions], fields),
                "index": positions.astype(np.int32)}

    return grain.MapDataset.range(int(num_steps)).map(read)


class StepReader:
    """`batches(s)` for `train.loop.fit` over a `step_batches` dataset, read ahead by a
    grain iterator (threads and a prefetch buffer, `read_options`, by default
    `default_read_options()`); a step out of sequence (the first call, a resumed run)
    starts a new iterator at that step.
    `convert` maps each element to what the train step takes. `wait_seconds` sums the
    time the caller waited for batches (after the first): near 0 when reading keeps up
    with training."""

    def __init__(self, dataset, *, convert=None, read_options=None):
        self.dataset, self.convert = dataset, convert or (lambda batch: batch)
        self.read_options = read_options or default_read_options()
        self._it, self._next = None, None
        self.wait_seconds, self.batches_read = 0.0, 0

    def __call__(self, step: int):
        import time

        started = self._it is None or step != self._next
        if started:
            self._it = iter(self.dataset[int(step):].to_iter_dataset(self.read_options))
        self._next = int(step) + 1
        t0 = time.perf_counter()
        batch = next(self._it)
        if not started:  # a new iterator's first batch is read at once, not ahead
            self.wait_seconds += time.perf_counter() - t0
        self.batches_read += 1
        return self.convert(batch)


def stream_steps(batches, num_steps: int, *, read_options=None) -> StepReader:
    """A pure step-batch function `batches(step) -> dict` (the tracking pair samplers:
    a batch is a function of (seed, step) alone) as a grain dataset of `num_steps`
    elements read ahead on threads: the same batches, cut while the previous steps
    train. Attributes of `batches` (e.g. `num_sequences`) stay readable."""
    import grain

    reader = StepReader(grain.MapDataset.range(int(num_steps)).map(batches),
                        read_options=read_options)
    for name, value in vars(batches).items():
        setattr(reader, name, value)
    return reader


def image_batches(data, *, batch_size: int, seed: int, num_steps: int,
                  with_labels: bool = False, shard: HostShard | None = None):
    """`step_batches` over an `ImageData`'s training images: from its ArrayRecord
    records (`data.records`, uint8 images / 255 on the fly) where it has them, else
    from its arrays. Elements: {"image": float32 (b/P, H, W, C), "index", ["label"]}."""
    fields = ("image", "label") if with_labels else ("image",)
    if getattr(data, "records", None):
        source = _ImageRecordSource(open_records(data.records, "images").source("train"))
        items = data.train_index
    else:
        source = ArraySource(image=data.train_images, label=data.train_labels)
        items = None
    return step_batches(source, batch_size=batch_size, seed=seed, num_steps=num_steps,
                        items=items, fields=fields, shard=shard)


class _ImageRecordSource:
    """An "images" records split whose images read as float32 in [0, 1] (x / 255, the
    values `image_data_from_records` holds) and labels as int32."""

    def __init__(self, source):
        self.source = source

    def __len__(self) -> int:
        return len(self.source)

    def read_rows(self, idx, fields=None) -> dict[str, np.ndarray]:
        out = read_rows(self.source, idx, fields)
        if "image" in out:
            out["image"] = out["image"].astype(np.float32) / np.float32(255.0)
        if "label" in out:
            out["label"] = out["label"].astype(np.int32)
        return out


__all__ = [
    "ArraySource",
    "HostShard",
    "StepReader",
    "batch_indices",
    "default_read_options",
    "image_batches",
    "read_rows",
    "step_batches",
    "stream_steps",
    "usable_cpus",
]
