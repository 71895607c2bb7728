"""Eager PyTorch side of benchmarks/losses.py: a worker that times one loss's value and
parameter gradient (forward + backward, no optimiser step) on request.

Standalone (torch and numpy only, plus the losses of torch_regression1d.py beside it),
so that it runs in a side environment with a CPU build of torch. It reads one JSON
request per line on stdin, {"loss", "k", "m", "calls"}, and answers one JSON line:
{"wall": seconds, "cpu": seconds} for `calls` calls (after one untimed call the first
time a configuration is seen). {"quit": true} ends it.

    python benchmarks/torch_losses.py --threads 1
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import torch_regression1d as t1d  # noqa: E402

BATCH = 32


def loss_fn(name: str, m: int):
    t = lambda *v: torch.tensor(v)  # noqa: E731
    return {
        "ml-is": lambda n, x, y: t1d.ml_is(n, x, y, m, t(0.2, 1.6)),
        "kld-is": lambda n, x, y: t1d.kld_is(n, x, y, m, t(0.2, 1.6), t(0.025)),
        "ml-mcmc-16": lambda n, x, y: t1d.ml_mcmc(n, x, y, m, 16, 0.05),
        "nce": lambda n, x, y: t1d.nce(n, x, y, m, t(0.1, 0.8)),
        "nce+": lambda n, x, y: t1d.nce(n, x, y, m, t(0.1, 0.8), beta=0.025),
        "sm": lambda n, x, y: t1d.sm(n, x, y),
        "dsm": lambda n, x, y: t1d.dsm(n, x, y, m, 0.2),
    }[name]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    def prepare(req):
        net = t1d.Net(y_dim=req["k"])
        x = torch.rand(BATCH, 1) * 6 - 3
        y = torch.randn(BATCH, req["k"])
        fn = loss_fn(req["loss"], req["m"])
        return lambda: run(net, x, y, fn)

    t1d.serve_requests(prepare, key=lambda req: (req["loss"], req["k"], req["m"]),
                       count="calls")
    return 0


def run(net, x, y, fn) -> float:
    net.zero_grad(set_to_none=True)
    loss = fn(net, x, y)
    loss.backward()
    return float(loss.detach())


if __name__ == "__main__":
    raise SystemExit(main())
