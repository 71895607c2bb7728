"""`ebm-jax records`: writes a dataset of the project as ArrayRecord records, drawn as
its recipe draws it (the 1D pairs by the run seed's key, the image split by the run
seed's split seed), or describes one (`records info`). The parser and the handler of
the CLI's subcommand (`ebm_jax.cli`); the writers are `ebm_jax.data.records_write`."""

from __future__ import annotations

from pathlib import Path


def add_records_parser(sub, positive_int) -> None:
    """The `records` subcommand on the CLI's subparsers `sub`; `positive_int(name)` is
    the CLI's argparse type of an integer >= 1."""
    p = sub.add_parser("records", help="write a dataset as ArrayRecord records",
                       description="Writes a dataset of the project as a "
                       "tensorflow-datasets ArrayRecord dataset under --out (read back "
                       "by grain; see ebm_jax.data.records), or describes one.")
    kinds = p.add_subparsers(dest="kind", required=True)
    k = kinds.add_parser("toy1d", help="a 1D regression set, as the 1D recipe draws it")
    k.add_argument("--dataset", type=int, choices=(1, 2), required=True)
    k.add_argument("--num", type=positive_int("--num"), default=2000)
    k.add_argument("--seed", default="0", help="the run seed of the recipe, in [0, 2^31)")
    k = kinds.add_parser("images", help="an image set of the contrastive recipe")
    k.add_argument("--data", required=True, help="embedded, digits, opencv-digits, "
                   "digits-on-photos, cifar10 or folder")
    k.add_argument("--image-size", type=positive_int("--image-size"), default=16)
    k.add_argument("--seed", default="0", help="the run seed whose train/test split the "
                   "recipe would draw, in [0, 2^31)")
    k.add_argument("--split", choices=("test", "val"), default="test")
    k.add_argument("--data-root", default=None)
    k = kinds.add_parser("detection", help="a COCO-format detection set, or a generated one")
    k.add_argument("--annotations", default=None, help="COCO json (else --generate)")
    k.add_argument("--noisy-annotations", default=None)
    k.add_argument("--image-dir", default=None)
    k.add_argument("--generate", type=positive_int("--generate"), default=None,
                   metavar="N", help="generate N images of the detection benchmark")
    k.add_argument("--image-size", type=positive_int("--image-size"), default=128)
    k.add_argument("--seed", default="0", help="the seed of --generate, in [0, 2^31)")
    k = kinds.add_parser("tracking", help="tracking sequences in the GOT-10k layout")
    k.add_argument("--root", required=True, help="a GOT-10k root (e.g. the generated "
                   "benchmark's split directory)")
    for k in kinds.choices.values():
        k.add_argument("--out", required=True, help="directory to write the dataset into")
    k = kinds.add_parser("info", help="kind, splits and metadata of a records directory")
    k.add_argument("path")
    p.set_defaults(func=records_command)


def _seed(text: str) -> int:
    """`--seed` of `records`: an integer in the run seed's range, else a ValueError."""
    from ebm_jax.config import SEED_RANGE

    low, high = SEED_RANGE
    try:
        v = int(text)
    except ValueError:
        v = None
    if v is None or not low <= v <= high:
        raise ValueError(f"--seed must be an integer in [{low}, {high}] (the run seed's "
                         f"range), got {text!r}")
    return v


def records_command(args, overrides) -> int:
    """`ebm-jax records KIND ...`: writes the dataset (or, `info`, describes one)."""
    import json

    from ebm_jax.checks import require_extras

    require_extras("`ebm-jax records`", ("data",))  # tensorflow-datasets' ArrayRecord
    from ebm_jax.data import records as rec
    from ebm_jax.data import records_write as rw

    if args.kind == "info":
        r = rec.open_records(args.path)
        r.verify()  # every record of every split read back: the counts are true
        meta = {k: v for k, v in r.metadata.items()
                if not isinstance(v, list) or len(v) <= 12}
        print(json.dumps({"path": str(r.path), "kind": r.kind, "splits": r.splits,
                          "verified": "every record of every split read back, checksums "
                          "match", "metadata": meta}, indent=1))
        return 0
    if hasattr(args, "seed"):
        args.seed = _seed(args.seed)
    if args.kind == "toy1d":
        import jax

        from ebm_jax.data import toy1d
        from ebm_jax.train.stages import RunContext

        key = RunContext.key_of(args.seed, f"toy1d-d{args.dataset}", "data")
        x, y = toy1d.sample(key, args.dataset, args.num)
        path = rw.write_toy1d_records(jax.device_get(x), jax.device_get(y), args.out,
                                       metadata={"dataset": args.dataset, "seed": args.seed,
                                                 "drawn_as": "the 1D recipe's data"})
    elif args.kind == "images":
        from ebm_jax.data import images as image_data
        from ebm_jax.train.stages import stable_hash

        split_seed = stable_hash(f"{args.seed}/data/split")
        data = image_data.load_image_data(
            args.data, args.image_size, data_root=args.data_root,
            seed=split_seed, split=args.split)
        path = rw.write_image_records(data, args.out, metadata={
            "data": args.data, "image_size": args.image_size, "seed": args.seed,
            "split_seed": split_seed, "eval_split": args.split,
            "data_root": None if args.data_root is None else
            str(Path(args.data_root).resolve())})
    elif args.kind == "detection":
        if (args.generate is None) == (args.annotations is None):
            raise ValueError("give either --annotations (with --image-dir) or --generate N")
        if args.generate is not None:
            import tempfile

            from ebm_jax.data.detection import generate_dataset

            with tempfile.TemporaryDirectory() as tmp:
                d = generate_dataset(tmp, num_images=args.generate,
                                     image_size=args.image_size, seed=args.seed)
                path = rw.write_detection_records(
                    d.annotations, d.image_dir, args.out,
                    noisy_annotations=d.noisy_annotations, metadata={
                        "generated": args.generate, "image_size": args.image_size,
                        "seed": args.seed})
        else:
            if args.image_dir is None:
                raise ValueError("--annotations needs --image-dir")
            path = rw.write_detection_records(
                args.annotations, args.image_dir, args.out,
                noisy_annotations=args.noisy_annotations, metadata={
                    "annotations": str(Path(args.annotations).resolve()),
                    "image_dir": str(Path(args.image_dir).resolve()),
                    "noisy_annotations": None if args.noisy_annotations is None else
                    str(Path(args.noisy_annotations).resolve())})
    else:
        from ebm_jax.data.sequences import read_got10k

        path = rw.write_tracking_records(read_got10k(args.root), args.out, metadata={
            "root": str(Path(args.root).resolve())})
    r = rec.open_records(path)
    print(f"wrote {r.kind} records to {path}: " + ", ".join(
        f"{split} {n}" for split, n in r.splits.items()))
    return 0


__all__ = ["add_records_parser", "records_command"]
