"""The tracking recipes' data (`ebm_jax.recipes.tracking`, SoCL): the real sets read
and identified by content, and the generated benchmark written once (as records by
default, `ebm_jax.data.tracking_records`) and identified by its spec. Every `cfg` is
the recipe's Config."""

from __future__ import annotations

import dataclasses

from etils import epath


@dataclasses.dataclass(frozen=True)
class TrackingData:
    """Training sequences and the evaluation sets, each with the identity of its
    content (no paths)."""

    train: list
    eval_sets: dict  # name -> list of Sequence
    identity: dict  # "train" and each eval set -> JSON-able identity


def generated_specs(cfg, ctx) -> dict:
    """The `TrackingSpec` of each generated split (its seed is the run's "data" seed;
    scene groups in the training split alone)."""
    from ebm_jax.data.tracking import TrackingSpec

    common = dict(num_frames=cfg.num_frames, height=cfg.frame_height,
                  width=cfg.frame_width, point_shift=cfg.point_shift,
                  box_every=cfg.box_every)
    sizes = {"train": cfg.num_train_sequences, "test": cfg.num_test_sequences}
    groups = {"train": dict(scene_group=cfg.scene_group, scene_path=cfg.scene_path),
              "test": {}}
    return {split: TrackingSpec(split=split, num_sequences=n,
                                seed=ctx.seed_of("data", split) % 2**31,
                                **groups[split], **common)
            for split, n in sizes.items()}


def annotation_identity(sequences, ctx=None) -> dict:
    """The content identity of a real dataset (`ebm_jax.data.sequences.fingerprint`):
    its annotations and the bytes of its frames, never its path, so that a moved
    dataset keeps its stages and an edited one (a frame replaced, groundtruth.txt or
    points.txt fixed) gets new ones. With `ctx`, the frames' digests are cached in
    `<workdir>/data/file-digests.json` (a frame is read again only when its size or
    modification time changed)."""
    from ebm_jax.data.sequences import fingerprint

    return fingerprint(sequences, digest_cache=None if ctx is None else ctx.digest_cache)


def generated_split(cfg, ctx, spec) -> tuple[list, dict]:
    """(sequences, identity) of the generated split of `spec`, written once under the
    data root (`cfg.data_root`, else `<workdir>/data`) as `cfg.data_format` and
    identified by its spec (`spec_identity`)."""
    from ebm_jax.data.sequences import read_got10k
    from ebm_jax.data.tracking import generate_tracking_split, spec_identity
    from ebm_jax.data.tracking_records import generated_records
    from ebm_jax.io import content_hash

    root = epath.Path(cfg.data_root) if cfg.data_root else ctx.workdir / "data"
    ident = spec_identity(spec)
    dest = root / f"{spec.split}-{content_hash(ident, 8)}"
    if cfg.data_format == "records":
        dest, sequences = generated_records(dest.with_name(dest.name + ".records"), spec,
                                            progress=ctx.progress, write=ctx.writer)
    else:
        if ctx.writer:
            generate_tracking_split(dest, spec, progress=ctx.progress)
        sequences = read_got10k(dest)
    ctx.log(f"generated {spec.split} split: {len(sequences)} sequences x "
            f"{spec.num_frames} frames of {spec.width}x{spec.height} at {dest}"
            f" ({cfg.data_format})")
    return sequences, ident


def open_data(cfg, ctx) -> TrackingData:
    """Opens the data, the real sets (GOT-10k, OTB) first, then generates (once) the
    benchmark: a root that cannot be used is refused before anything is generated;
    every reader check runs here, before any training. With `train_data="got10k"` the
    generated training split, which no arm would use, is not generated."""
    from ebm_jax.data.sequences import read_got10k, read_otb

    real, identity = {}, {}  # the real sets, read (and checked) before any generation
    train = train_identity = None
    if cfg.got10k_root is not None:
        if cfg.train_data == "got10k":
            train = read_got10k(cfg.got10k_root, split="train")
            train_identity = {"got10k-train": annotation_identity(train, ctx)}
            ctx.log(f"GOT-10k train: {len(train)} sequences")
        real["got10k-val"] = read_got10k(cfg.got10k_root, split="val")
        identity["got10k-val"] = annotation_identity(real["got10k-val"], ctx)
    if cfg.otb_root is not None:
        real["otb"] = read_otb(cfg.otb_root)
        identity["otb"] = annotation_identity(real["otb"], ctx)
    root = epath.Path(cfg.data_root) if cfg.data_root else ctx.workdir / "data"
    if cfg.data_root and ctx.writer:  # where the generated splits are written
        from ebm_jax import checks

        checks.writable_dir("--config.data_root", root)
    generated = {}
    for split, spec in generated_specs(cfg, ctx).items():
        if split == "train" and train is not None:
            continue  # GOT-10k's train split trains: the generated one is not made
        generated[split], identity[f"generated-{split}"] = generated_split(cfg, ctx, spec)
    eval_sets = {"generated-test": generated["test"], **real}
    if train is None:
        train, train_identity = generated["train"], identity["generated-train"]
    identity["train"] = train_identity
    return TrackingData(train=train, eval_sets=eval_sets, identity=identity)


__all__ = ["TrackingData", "annotation_identity", "generated_specs", "generated_split",
           "open_data"]
