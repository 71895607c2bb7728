"""`ebm-jax compare` and `ebm-jax rerun`: two results side by side, paired by seed, and
a run made again from its results.json's provenance. The parsers and handlers of the
CLI's subcommands (`ebm_jax.cli`); the comparisons are `ebm_jax.report.tracking`,
`ebm_jax.report.contrastive` and `ebm_jax.report.rerun`."""

from __future__ import annotations

from pathlib import Path


def add_results_parsers(sub, main) -> None:
    """The `compare` and `rerun` subcommands on the CLI's subparsers `sub`; `main` is
    the CLI's entry point, which `rerun` calls with the stored run's `run` arguments."""
    p = sub.add_parser("compare", help="two runs, paired by seed (contrastive; tracking "
                       "and SoCL also by sequence)",
                       description="RUN_A of RESULTS_A minus RUN_B of RESULTS_B (two "
                       "results.json, or the folders holding them, of one kind and of "
                       "the same data and seeds), seed by seed: mean +- standard error, * "
                       "beyond 2 se. Contrastive results compare runs (by name); tracking "
                       "and SoCL results compare arms (by label, e.g. Box-Siam) on each "
                       "evaluation set, paired by seed and by test sequence. Results of "
                       "other recipes are refused.")
    p.add_argument("results_a", metavar="RESULTS_A")
    p.add_argument("run_a", metavar="RUN_A")
    p.add_argument("results_b", metavar="RESULTS_B")
    p.add_argument("run_b", metavar="RUN_B")
    p.set_defaults(func=compare_command)

    p = sub.add_parser("rerun", help="rerun a run from its results.json and compare the "
                       "figures",
                       description="Reruns the run of RESULTS (a results.json or its "
                       "folder, e.g. a stored run docs/results/NAME) with the command of "
                       "its provenance, in a fresh work directory, and compares: the "
                       "results.md tables as printed, timings masked (exit status 0 when "
                       "every line reads the same, 1 when one does not), and the "
                       "results.json figures bit for bit, measured times left out (each "
                       "that differs listed, with the largest relative difference). A run "
                       "whose config now resolves otherwise is refused.")
    p.add_argument("results", metavar="RESULTS")
    p.add_argument("--workdir", default=None, help="the rerun's work directory (default: a "
                   "fresh one, removed at the end); an existing one's stages are reused")
    p.add_argument("--out", default=None,
                   help="where the rerun's results go (default results/rerun/CONFIG-VARIANT)")
    p.add_argument("--against", default=None, metavar="OTHER",
                   help="compare with OTHER (a results.json or its folder) instead of "
                   "rerunning")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.set_defaults(func=lambda args, overrides: rerun_command(args, main))


def compare_command(args, overrides) -> int:
    from ebm_jax.io import read_json
    from ebm_jax.report import contrastive, tracking

    def read(path, arg):
        p = Path(path)
        if p.is_dir():  # a results folder: its results.json
            if not (p / "results.json").is_file():
                raise ValueError(f"{arg} {p} is a directory without a results.json; give "
                                 "a results.json")
            p = p / "results.json"
        return read_json(p, what="results file", fix="give a results.json")

    a, b = read(args.results_a, "RESULTS_A"), read(args.results_b, "RESULTS_B")
    meta = a.get("ebm_jax") if isinstance(a, dict) else None
    recipe = meta.get("recipe") if isinstance(meta, dict) else None
    compare = (tracking.compare_results if recipe in ("tracking", "socl")
               else contrastive.compare_results)
    print(compare(a, args.run_a, b, args.run_b,
                  names=(f"RESULTS_A {args.results_a}", f"RESULTS_B {args.results_b}")))
    return 0


def rerun_command(args, main) -> int:
    from ebm_jax.report.rerun import rerun

    opt = (lambda v: None if v is None else Path(v))
    return rerun(Path(args.results), out=opt(args.out), workdir=opt(args.workdir),
                 progress=args.progress, against=opt(args.against), run=main)
