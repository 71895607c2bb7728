"""Every loss of `ebm_jax.energy` under `jax.jit(jax.value_and_grad(...))`, against the
same loss in eager PyTorch: compile time, steady-state time, XLA's buffer sizes.

    python benchmarks/losses.py --out results/bench                      # M 1..4096, K 1 and 4
    python benchmarks/losses.py --ms 1,16 --ks 1 --rounds 3 --out /tmp/b  # a quick look
    python benchmarks/losses.py --no-torch ...                           # JAX only

Energy: the paper's 1D network (`ToyEnergyMLP`, x of dimension 1, y of dimension K,
10 wide), a batch of 32 examples, M samples per example; the hyperparameters of Table 1
(dataset 1), ML-MCMC with 16 Langevin steps. Each call computes the loss and its
gradient with respect to the parameters (PyTorch: forward + backward, no optimiser).

Protocol: for each (loss, K, M) the JAX function is compiled (its first call: trace +
compile + run; `compile_s` is that minus the steady-state call time) and then the two
sides run interleaved, A B A B, `--rounds` rounds of about `--round-seconds` each;
PyTorch with `--torch-threads` threads (default 1) in a side process (`torch_losses.py`,
in the Python that `benchmarks/torch_env.sh` finds or makes). Per-call time: median of
the rounds with min and max, wall and process CPU time; the speed-up is PyTorch's median
over JAX's. The machine's load average is recorded at the start and the end. SM draws
no samples: it is timed once per K. The traced function is guarded by
`chex.assert_max_traces(n=1)`: a steady-state call that retraced would fail the run.

Writes <out>/losses.{json,md} and <out>/losses.png (time per call against M, one panel
per K).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
from flax import nnx

from ebm_jax.energy import batch_loss, make_loss
from ebm_jax.models import ToyEnergyMLP

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_protocol import BenchRun, TorchWorker, summary, torch_python  # noqa: E402

BATCH = 32
LOSSES = ("ml-is", "kld-is", "ml-mcmc-16", "nce", "nce+", "sm", "dsm")
HERE = Path(__file__).parent


def bound_loss(name: str, m: int):
    """The loss `name` with Table 1's hyperparameters (dataset 1) and M = m."""
    if name == "ml-is":
        return make_loss("ml-is", sigmas=(0.2, 1.6), num_samples=m)
    if name == "kld-is":
        return make_loss("kld-is", sigmas=(0.2, 1.6), label_sigma=0.025, num_samples=m)
    if name == "ml-mcmc-16":
        return make_loss("ml-mcmc", num_steps=16, step_size=0.05, num_samples=m)
    if name == "nce":
        return make_loss("nce", sigmas=(0.1, 0.8), num_samples=m)
    if name == "nce+":
        return make_loss("nce+", sigmas=(0.1, 0.8), beta=0.025, beta_scale="std",
                         num_samples=m)
    if name == "sm":
        return make_loss("sm")
    if name == "dsm":
        return make_loss("dsm", sigma=0.2, num_samples=m)
    raise ValueError(f"loss must be one of {LOSSES}, got {name!r}")


def jax_case(name: str, k: int, m: int):
    """(jitted value-and-grad guarded against retracing, its arguments, the raw
    function for the memory analysis)."""
    model = ToyEnergyMLP(rngs=nnx.Rngs(0), y_dim=k)
    graphdef, params = nnx.split(model)
    loss = bound_loss(name, m)
    key = jax.random.key(1)
    data = jax.random.fold_in(key, 0)  # purpose: the batch
    xs = jax.random.uniform(data, (BATCH, 1), minval=-3.0, maxval=3.0)
    ys = jax.random.normal(jax.random.fold_in(data, 1), (BATCH, k))
    sample_key = jax.random.fold_in(key, 1)  # purpose: the loss's samples

    def value(p, xs, ys, key):
        return batch_loss(loss, lambda x, y: nnx.merge(graphdef, p)(x, y), xs, ys, key)

    chex.clear_trace_counter()  # the counter is per code object: one case at a time
    guarded = jax.jit(jax.value_and_grad(chex.assert_max_traces(value, n=1)))
    return guarded, (params, xs, ys, sample_key), jax.value_and_grad(value)


def buffer_bytes(raw, args) -> dict | None:
    """XLA's buffer sizes of the compiled function (a separate compile)."""
    try:
        mem = jax.jit(raw).lower(*args).compile().memory_analysis()
    except Exception:  # noqa: BLE001 - not every backend reports it
        return None
    if mem is None:
        return None
    return {"temp": int(mem.temp_size_in_bytes), "arguments": int(
        mem.argument_size_in_bytes), "outputs": int(mem.output_size_in_bytes)}


def time_jax(fn, args, calls: int) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(calls):
        jax.block_until_ready(fn(*args))
    return (time.perf_counter() - t0) / calls, (time.process_time() - c0) / calls


def run_case(name, k, m, worker, rounds, round_seconds, memory) -> dict:
    fn, args, raw = jax_case(name, k, m)
    t0 = time.perf_counter()
    value, grads = jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t0
    probe, _ = time_jax(fn, args, 3)
    calls = max(1, round(round_seconds / max(probe, 1e-7)))
    row = {"loss": name, "k": k, "m": None if name == "sm" else m, "calls": calls,
           "value": float(value), "finite": bool(jnp.isfinite(value))}
    if worker is not None:
        probe_t = worker.request(loss=name, k=k, m=m, calls=1)
        torch_calls = max(1, round(round_seconds / max(probe_t["wall"], 1e-7)))
        row["torch_calls"] = torch_calls
    jw, jc, tw, tc = [], [], [], []
    for _ in range(rounds):  # A B A B
        w, c = time_jax(fn, args, calls)
        jw.append(w)
        jc.append(c)
        if worker is not None:
            r = worker.request(loss=name, k=k, m=m, calls=torch_calls)
            tw.append(r["wall"] / torch_calls)
            tc.append(r["cpu"] / torch_calls)
            row["torch_finite"] = r["finite"]
    row["jax_wall"], row["jax_cpu"] = summary(jw), summary(jc)
    row["compile_s"] = first - row["jax_wall"]["median"]
    if worker is not None:
        row["torch_wall"], row["torch_cpu"] = summary(tw), summary(tc)
        row["speedup_wall"] = row["torch_wall"]["median"] / row["jax_wall"]["median"]
        row["speedup_cpu"] = row["torch_cpu"]["median"] / row["jax_cpu"]["median"]
    if memory:
        row["xla_bytes"] = buffer_bytes(raw, args)
    return row


def _ms(t: float) -> str:
    return f"{t * 1e3:.3g}"


def markdown(payload) -> str:
    torch_on = payload["torch"] is not None
    head = ("| loss | K | M | JAX ms (min-max) | compile s | XLA temp MB |"
            + (" torch ms (min-max) | speed-up wall | speed-up CPU |" if torch_on else ""))
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in payload["rows"]:
        jw = r["jax_wall"]
        mem = r.get("xla_bytes")
        cells = [r["loss"], str(r["k"]), "-" if r["m"] is None else str(r["m"]),
                 f"{_ms(jw['median'])} ({_ms(jw['min'])}-{_ms(jw['max'])})",
                 f"{r['compile_s']:.2f}",
                 "-" if not mem else f"{mem['temp'] / 1e6:.2f}"]
        if torch_on:
            tw = r["torch_wall"]
            cells += [f"{_ms(tw['median'])} ({_ms(tw['min'])}-{_ms(tw['max'])})",
                      f"{r['speedup_wall']:.1f}x", f"{r['speedup_cpu']:.1f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    t = payload["torch"]
    note = (f"PyTorch {t['torch']} eager, {t['threads']} thread(s); " if t else "")
    summary = summary_table(payload["rows"]) if torch_on else []
    return (f"Losses under jit(value_and_grad), batch {BATCH}, the 1D network; "
            f"{note}median of {payload['rounds']} interleaved rounds; load average "
            f"{payload['load_average_start'][0]:.1f} at the start, "
            f"{payload['load_average_end'][0]:.1f} at the end.\n\n"
            + "\n".join(summary + ["## Every loss, K and M", ""] + lines) + "\n")


def summary_table(rows) -> list[str]:
    """One line a loss: JAX and PyTorch at M = 1024, K = 1, the speed-ups there, at
    K = 4 and at M = 4096, the compile times and XLA's buffers (losses without
    samples, M = '-', give their one setting at K = 1 and K = 4)."""
    at = {(r["loss"], r["k"], r["m"]): r for r in rows}

    def pick(loss, k, m):
        return at.get((loss, k, m)) or at.get((loss, k, None))

    def ratio(r):
        return "-" if r is None else f"{r['speedup_wall']:.1f}x / {r['speedup_cpu']:.1f}x"

    out = ["## Summary", "",
           "| loss | M = 1024, K = 1: JAX ms (min-max) | PyTorch ms | speed-up wall / CPU "
           "| K = 4, wall / CPU | M = 4096, K = 1, wall / CPU | compile s | XLA temp MB, "
           "M = 1024 |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for loss in dict.fromkeys(r["loss"] for r in rows):
        base = pick(loss, 1, 1024)
        if base is None:
            continue
        jw, tw, mem = base["jax_wall"], base["torch_wall"], base.get("xla_bytes")
        comp = [r["compile_s"] for r in rows if r["loss"] == loss]
        m4096 = at.get((loss, 1, 4096))
        out.append(f"| {loss} | {_ms(jw['median'])} ({_ms(jw['min'])}-{_ms(jw['max'])}) | "
                   f"{_ms(tw['median'])} | {ratio(base)} | {ratio(pick(loss, 4, 1024))} | "
                   f"{ratio(m4096) if base['m'] is not None else '-'} | "
                   f"{min(comp):.1f}-{max(comp):.1f} | "
                   f"{'-' if not mem else format(mem['temp'] / 1e6, '.1f')} |")
    return out + [""]


def plot(payload, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = sorted({r["k"] for r in payload["rows"]})
    fig, axes = plt.subplots(1, len(ks), figsize=(6 * len(ks), 4.5), squeeze=False)
    colours = dict(zip(LOSSES, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    ms = sorted({r["m"] for r in payload["rows"] if r["m"] is not None})
    for ax, k in zip(axes[0], ks):
        for name in LOSSES:
            rows = [r for r in payload["rows"] if r["loss"] == name and r["k"] == k]
            if not rows:
                continue
            xs = ms if rows[0]["m"] is None else [r["m"] for r in rows]
            jy = [rows[0]["jax_wall"]["median"]] * len(xs) if rows[0]["m"] is None else \
                [r["jax_wall"]["median"] for r in rows]
            ax.plot(xs, [v * 1e3 for v in jy], "o-", color=colours[name], label=name)
            if "torch_wall" in rows[0]:
                ty = [rows[0]["torch_wall"]["median"]] * len(xs) if rows[0]["m"] is None \
                    else [r["torch_wall"]["median"] for r in rows]
                ax.plot(xs, [v * 1e3 for v in ty], "x--", color=colours[name], alpha=0.6)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("M (samples per example)")
        ax.set_ylabel("ms per value-and-grad call")
        ax.set_title(f"K = {k}: JAX jit (solid) vs eager PyTorch (dashed)")
        ax.grid(alpha=0.3, which="both")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ms", default="1,16,128,1024,4096")
    p.add_argument("--ks", default="1,4")
    p.add_argument("--losses", default=",".join(LOSSES))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--round-seconds", type=float, default=0.2)
    p.add_argument("--torch-threads", type=int, default=1)
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--no-memory", action="store_true")
    p.add_argument("--out", default="results/bench")
    args = p.parse_args(argv)
    bench_run = BenchRun(__file__, argv)
    ms = [int(v) for v in args.ms.split(",")]
    ks = [int(v) for v in args.ks.split(",")]
    losses = args.losses.split(",")
    for name in losses:
        bound_loss(name, 1)  # unknown names fail before anything runs
    worker = None if args.no_torch else TorchWorker(
        torch_python(), "torch_losses.py", "--threads", str(args.torch_threads))
    load_start = os.getloadavg()
    rows = []
    from tqdm.auto import tqdm

    cases = [(n, k, m) for n in losses for k in ks for m in (ms[:1] if n == "sm" else ms)]
    try:
        for name, k, m in tqdm(cases, desc="losses"):
            rows.append(run_case(name, k, m, worker, args.rounds, args.round_seconds,
                                 not args.no_memory))
    finally:
        if worker is not None:
            worker.close()
    payload = {"rows": rows, "rounds": args.rounds, "batch": BATCH,
               "torch": None if worker is None else worker.info,
               "jax": jax.__version__, "backend": jax.default_backend(),
               "devices": [str(d) for d in jax.devices()],
               "load_average_start": load_start, "load_average_end": os.getloadavg(),
               "machine": platform.platform(), "cpus": os.cpu_count(),
               "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])}
    md = markdown(payload)
    print(md)
    out = Path(args.out)
    bench_run.write(out, "losses", payload, md, files=("losses.png",))
    plot(payload, out / "losses.png")
    print(f"wrote {out}/losses.json, losses.md, losses.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
