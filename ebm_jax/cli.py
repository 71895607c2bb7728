"""Command line: `ebm-jax run CONFIG[:variant] [--config.FIELD=VALUE ...]`.

    ebm-jax list                                     # every config, variant, wall time
    ebm-jax run table1_toy1d:quick                   # Table 1 of the EBM regression paper
    ebm-jax run table1_toy1d:paper --config.methods=nce,nce+
    ebm-jax run experiments/tracking/siamfc_box.py:quick   # a config by its path (a clone)
    ebm-jax show socl_table1_ablation:quick          # its fields and their values
    ebm-jax plot-metrics runs/regression1d           # loss curves to PNG
    ebm-jax compare results/moco_linear_eval/quick moco-m0.99-k1024 \\
        results/instdisc_linear_eval/quick instdisc  # paired by seed
    ebm-jax rerun docs/results/table1_toy1d-quick   # a stored table, again: the same?
    ebm-jax records images --data digits-on-photos --out data/dop16   # ArrayRecord
    ebm-jax run moco_linear_eval:quick --config.data=records \\
        --config.data_root=data/dop16 --config.loader=grain

`--workdir` (default `runs/<recipe>`) holds the stages' checkpoints: rerunning the
same command resumes them. `--out` (default `results/<config>/<variant>`) receives
results.json, results.md and the figures. Progress bars are drawn on a terminal only
(a log gets each stage's summary line); `--no-progress` turns them off there too.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from ebm_jax.recipes.records_command import add_records_parser
from ebm_jax.report.results_command import add_results_parsers

PROG = "ebm-jax"


def _version_text() -> str:
    """`ebm-jax 0.2.0 (commit abc123456789, modified)` from a clone, the version
    alone from an installed wheel."""
    from ebm_jax import __version__
    from ebm_jax.report.provenance import git_state

    git = git_state()
    if git is None:
        return f"{PROG} {__version__}"
    return f"{PROG} {__version__} (commit {git['commit'][:12]}" + (
        ", modified)" if git["dirty"] else ")")


def _positive_int(name):
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{name} must be an integer >= 1, got {text!r}") from None
        if v < 1:
            raise argparse.ArgumentTypeError(f"{name} must be an integer >= 1, got {v}")
        return v

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n", 2)[2])
    parser.add_argument("--version", action="version", version=_version_text())
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="run an experiment config",
                       description="Runs CONFIG (path/to/file.py[:variant]); without a "
                       "variant, the first the file lists (quick for the paper tables; "
                       "`ebm-jax list` gives each variant's measured wall time). "
                       "Any field of its config can be set with --config.FIELD=VALUE "
                       "(lists as comma-separated values; `ebm-jax show CONFIG` lists "
                       "them). Rerunning the same command resumes.")
    p.add_argument("config", metavar="CONFIG[:variant]")
    p.add_argument("--workdir", default=None,
                   help="checkpoints, records and cached evaluations (default "
                   "runs/<recipe>; local path or e.g. gs://bucket/run)")
    p.add_argument("--out", default=None,
                   help="results directory (default results/<config>/<variant>); "
                   "the results of an earlier run there are replaced whole")
    p.add_argument("--devices", type=_positive_int("--devices"), default=None,
                   help="data-parallel devices (default 1; all with --distributed)")
    p.add_argument("--distributed", action="store_true",
                   help="multi-host: call jax.distributed.initialize() first")
    p.add_argument("--restart", action="store_true",
                   help="start this config's stages over (other stages are kept)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--compile-cache", default=None, metavar="DIR",
                   help="JAX's persistent compilation cache: compiled programs kept for "
                   "reruns (default $JAX_COMPILATION_CACHE_DIR, else <workdir>/.jax-cache;"
                   " `none`: no cache)")
    p.set_defaults(func=_run)

    p = sub.add_parser("show", help="a config's fields, their values and defaults",
                       description="Prints every field of CONFIG (path/to/file.py"
                       "[:variant]; the default variant is the first the file lists) "
                       "by section, with its value, the dataclass default where they "
                       "differ, and a one-line description; sections the config does not "
                       "use are hidden (--all shows them); "
                       "--config.FIELD=VALUE overrides are applied first, as by `run`.")
    p.add_argument("config", metavar="CONFIG[:variant]")
    p.add_argument("--all", action="store_true",
                   help="also the sections this config does not use")
    p.set_defaults(func=_show)

    p = sub.add_parser("list", help="every experiment config, its variants and their "
                       "measured wall times (imports, i.e. runs, every .py file under "
                       "--root)",
                       description="Lists every config file under --root with its "
                       "variants and each variant's measured wall time, with the machine "
                       "(from --root's wall_times.json, written by "
                       "benchmarks/wall_times.py). A config file is Python, executed when "
                       "loaded: `list` imports every .py file it finds, so read a config from elsewhere "
                       "before listing or running it.")
    p.add_argument("--root", default=None, help="folder of config files (default "
                   "./experiments where it exists, else the configs shipped with the "
                   "package)")
    p.set_defaults(func=_list)

    p = sub.add_parser("plot-metrics", help="draw the loss curves of a run to PNG")
    p.add_argument("run_dir", metavar="WORKDIR",
                   help="a work (or stage) directory holding metrics.jsonl files")
    p.add_argument("--out", default=None, help="PNG to write (default WORKDIR/metrics.png)")
    p.set_defaults(func=_plot_metrics)

    add_results_parsers(sub, main)
    add_records_parser(sub, _positive_int)
    return parser


def _is_value(token: str) -> bool:
    """Whether the token after `--config.FIELD` is its value: anything but an option
    (`--workdir`, `-h`); a negative number (`-1`, `-1e-3`) is a value."""
    if not token.startswith("-"):
        return True
    try:
        float(token)
    except ValueError:
        return False
    return True


def _split_overrides(argv: list[str]) -> tuple[list[str], list[str]]:
    """Pulls `--config.FIELD=VALUE` (or `--config.FIELD VALUE`) out of argv; a
    `--config.FIELD` followed by another option or by nothing is a ValueError."""
    rest, overrides = [], []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--config."):
            if "=" in a:
                overrides.append(a)
            elif i + 1 < len(argv) and _is_value(argv[i + 1]):
                overrides.append(f"{a}={argv[i + 1]}")
                i += 1
            else:
                after = (f", got the option {argv[i + 1]} after it" if i + 1 < len(argv)
                         else "")
                raise ValueError(f"{a} needs a value ({a}=VALUE or {a} VALUE){after}")
        else:
            rest.append(a)
        i += 1
    return rest, overrides


def _headless() -> None:
    """Figures go to files: no window, no display (unless MPLBACKEND says otherwise).
    The library's plotting leaves the backend alone, for notebooks."""
    import os

    if not os.environ.get("MPLBACKEND"):
        import matplotlib

        matplotlib.use("Agg")


def _run(args, overrides) -> int:
    _headless()
    from ebm_jax.config import load_config, split_spec
    from ebm_jax.recipes import run_experiment
    from ebm_jax.recipes.runner import default_workdir
    from ebm_jax.report.provenance import config_source
    from ebm_jax.train.compilation import cache_dir, persistent_cache

    cfg = load_config(args.config, overrides)
    path, variant = split_spec(args.config)
    if variant is None:
        from ebm_jax.config import load_module

        variant = tuple(load_module(path).VARIANTS)[0]
    out = args.out or str(Path("results") / path.stem / variant)
    command = " ".join([PROG, *sys.argv[1:]]) if sys.argv and sys.argv[0].endswith(
        PROG) else None
    cache = cache_dir(args.workdir or default_workdir(cfg), args.compile_cache)
    # bars on a terminal only: carriage returns would fill a log line by line
    progress = not args.no_progress and sys.stderr.isatty()
    before = os.environ.get("TQDM_DISABLE")
    if not progress:  # also the bars that take no flag (data, TOP maps)
        os.environ["TQDM_DISABLE"] = "1"
    try:
        with persistent_cache(cache):
            report = run_experiment(cfg, workdir=args.workdir, out=out,
                                    devices=args.devices, distributed=args.distributed,
                                    restart=args.restart, progress=progress,
                                    command=command,
                                    source=config_source(path, variant, overrides))
    finally:
        if before is None:
            os.environ.pop("TQDM_DISABLE", None)
        else:
            os.environ["TQDM_DISABLE"] = before
    import jax

    if jax.process_index() == 0:  # one report for a multi-process run
        print(report.markdown)
        print(f"wrote {out}/results.json, results.md and {len(report.figures)} figure(s)")
    return 0


def _show(args, overrides) -> int:
    from ebm_jax.config import load_config, split_spec
    from ebm_jax.config_show import show_lines

    cfg = load_config(args.config, overrides)
    path, variant = split_spec(args.config)
    print(f"{path}:{variant or '(first variant)'}  {type(cfg).__module__}."
          f"{type(cfg).__name__}")
    print("\n".join(show_lines(cfg, everything=args.all)))
    return 0


def _list(args, overrides) -> int:
    from pathlib import Path

    from ebm_jax.config import shipped_root
    from ebm_jax.config_catalog import describe, find_configs, wall_time_text, wall_times

    here = args.root is None and Path("experiments").is_dir()  # a clone's own folder
    root = args.root or ("experiments" if here else shipped_root())
    paths = find_configs(root)
    if not paths:
        raise ValueError(f"no config files under {root} (run from the repository "
                         "root, or give --root)")
    measured = wall_times(root)
    shipped = not here and Path(root).resolve() == shipped_root().resolve()
    if shipped:  # the package's own configs: named as `run` takes them
        print("the configs shipped with ebm_jax; run one with `ebm-jax run NAME:VARIANT`")
        paths = [p.relative_to(root) for p in paths]
    width = max(len(str(p)) for p in paths)
    for p in paths:
        purpose, variants = describe(Path(root) / p if shipped else p)
        print(f"{str(p):<{width}}  [{', '.join(variants)}]  {purpose}")
        times = measured.get((p if shipped else Path(p).relative_to(root)).as_posix(), {})
        print(" " * (width + 2) + "wall time: " + "; ".join(
            f"{v} {wall_time_text(times[v])}" if times.get(v) else f"{v} not measured"
            for v in variants))
    return 0


def _plot_metrics(args, overrides) -> int:
    _headless()
    from ebm_jax.train.records import plot_metrics

    print(plot_metrics(args.run_dir, args.out))
    return 0


def _expected_errors() -> tuple[type[BaseException], ...]:
    from ebm_jax.report.output import OutChangedError
    from ebm_jax.train import CheckpointError, ConfigMismatchError
    from ebm_jax.train.stages import RunLockedError

    return (ValueError, FileNotFoundError, NotADirectoryError, PermissionError,
            CheckpointError, ConfigMismatchError, RunLockedError, FloatingPointError,
            OutChangedError)


_NOTICES = ("Metadata file does not exist",)  # orbax, reading a step's item folder


class _DropRethrown(logging.Filter):
    """Orbax logs an exception of its background threads with a traceback (a failed
    save, a failed read) and then re-raises it in the caller, where the one-line
    handler below reports it (as CheckpointError, naming the checkpoint). Its notices
    that a user cannot act on (a checkpoint without orbax's optional metadata file,
    which restores all the same) are dropped too; its errors are kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "raised an exception" in record.getMessage():
            return False
        if record.levelno < logging.ERROR and str(record.msg).startswith(_NOTICES):
            return False
        return not (record.exc_info and _through_orbax(record.exc_info[2]))


def _through_orbax(tb) -> bool:
    """Whether a traceback passes through orbax (its absl records name absl's file)."""
    marker = f"{os.sep}orbax{os.sep}"
    while tb is not None:
        if marker in tb.tb_frame.f_code.co_filename:
            return True
        tb = tb.tb_next
    return False


def _quiet_background_failures() -> None:
    """After a failed checkpoint save or read, orbax leaves coroutines that never ran
    and TensorStore callbacks into its closed event loop: Python would print each as
    a warning or a traceback around the one line that says what failed."""
    import warnings

    warnings.filterwarnings("ignore", message=r"coroutine .* was never awaited",
                            category=RuntimeWarning)
    hook, unraisable = sys.excepthook, sys.unraisablehook
    if getattr(hook, "drops_closed_loop", False):
        return

    def closed_loop(kind, value) -> bool:
        return kind is RuntimeError and str(value) == "Event loop is closed"

    def excepthook(kind, value, tb):
        if not closed_loop(kind, value):
            hook(kind, value, tb)

    def unraisablehook(info):
        if not closed_loop(info.exc_type, info.exc_value):
            unraisable(info)

    excepthook.drops_closed_loop = True
    sys.excepthook, sys.unraisablehook = excepthook, unraisablehook


def _nothing_after_the_error_line() -> None:
    """Once the program has printed its one-line error, what its exit would still
    print goes nowhere: TensorStore reads that a failed checkpoint read left running
    call back into orbax's closed event loop while Python shuts down, past every
    hook, each a traceback."""
    import atexit

    def silence():
        sys.stderr.flush()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)

    atexit.register(silence)


def main(argv=None) -> int:
    program = argv is None  # the `ebm-jax` command itself, not a caller in Python
    logging.getLogger("absl").addFilter(_DropRethrown())
    _quiet_background_failures()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        argv, overrides = _split_overrides(argv)
    except ValueError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    if overrides and args.command not in ("run", "show"):
        print(f"{PROG} {args.command}: error: --config.* overrides belong to `run`",
              file=sys.stderr)
        return 2
    try:
        return args.func(args, overrides)
    except BrokenPipeError:  # `ebm-jax ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        from ebm_jax.train.stages import interrupted_message, last_context

        print(f"\n{PROG}: {interrupted_message(last_context())}", file=sys.stderr)
        return 130
    except _expected_errors() as e:
        print(f"{PROG} {args.command}: error: {e}", file=sys.stderr)
        if program:
            _nothing_after_the_error_line()
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
