"""Eager PyTorch baseline for the 1D benchmark: the same network, losses and Adam step,
written from the paper's equations (Gustafsson et al. 2020, eqs. 5, 7, 9-10, 12-14, 16).

Standalone on purpose (imports only torch and numpy), so that it can run in a side
environment whose Python has a build of torch (CPU, or CUDA for `--device cuda`):

    python benchmarks/torch_regression1d.py --out torch.json [--threads 1] [--device cuda]
    python benchmarks/torch_regression1d.py --serve      # worker of benchmarks/regression1d.py

On a GPU every tensor lives on it; a timing waits for the GPU (torch.cuda.synchronize)
before it reads the clock.

Seconds per epoch = (best of 3 timings of 16 steps / 16) * ceil(2000 / 32), after
warm-up (ML-MCMC-256: best of 2 timings of 2 steps).
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np
import torch
from torch import nn

N_TRAIN, BATCH = 2000, 32
STEPS_PER_EPOCH = math.ceil(N_TRAIN / BATCH)


class Net(nn.Module):
    """f(x, y): the 591-parameter reference network; x is encoded once per example."""

    def __init__(self, hidden=10, y_dim=1):
        super().__init__()
        self.x1, self.x2 = nn.Linear(1, hidden), nn.Linear(hidden, hidden)
        self.y1 = nn.Linear(y_dim, hidden)
        self.joint = nn.Linear(2 * hidden, hidden)
        self.res1, self.res2 = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, 1)

    def forward(self, x, y):
        """x (n, 1), y (n, m, K) -> f (n, m)."""
        hx = torch.relu(self.x2(torch.relu(self.x1(x))))  # (n, H)
        hy = torch.tanh(self.y1(y))  # (n, m, H)
        w, b = self.joint.weight, self.joint.bias  # (H, 2H)
        hidden = hx.shape[-1]
        h = torch.tanh((hx @ w[:, :hidden].T)[:, None, :] + hy @ w[:, hidden:].T + b)
        h = torch.tanh(self.res1(h)) + h
        h = torch.tanh(self.res2(h)) + h
        return self.out(h)[..., 0]


def mixture_sample(y, sigmas, m):
    n, k = y.shape
    comp = torch.randint(len(sigmas), (n, m), device=y.device)
    return y[:, None, :] + sigmas[comp][..., None] * torch.randn(n, m, k, device=y.device)


def mixture_log_prob(ys, y, sigmas):
    k = y.shape[-1]
    sq = ((ys - y[:, None, :]) ** 2).sum(-1, keepdim=True)  # (n, m, 1)
    comp = -0.5 * sq / sigmas**2 - k * torch.log(sigmas) - 0.5 * k * math.log(2 * math.pi)
    return torch.logsumexp(comp, -1) - math.log(len(sigmas))


def ml_is(net, x, y, m, sigmas):
    ys = mixture_sample(y, sigmas, m)
    log_w = net(x, ys) - mixture_log_prob(ys, y, sigmas)
    return (torch.logsumexp(log_w, 1) - math.log(m) - net(x, y[:, None])[:, 0]).mean()


def kld_is(net, x, y, m, sigmas, label_sigma):
    ys = mixture_sample(y, sigmas, m)
    f = net(x, ys)
    log_q = mixture_log_prob(ys, y, sigmas)
    ratio = torch.exp(mixture_log_prob(ys, y, label_sigma) - log_q)
    return (torch.logsumexp(f - log_q, 1) - math.log(m) - (f * ratio).mean(1)).mean()


def nce(net, x, y, m, sigmas, beta=0.0):
    y0 = y
    if beta > 0:
        # p_beta with standard deviations beta * sigma_k (see ebm_jax nce_plus_loss)
        y0 = y + mixture_sample(torch.zeros_like(y), sigmas * beta, 1)[:, 0]
    ys = torch.cat([y0[:, None], mixture_sample(y, sigmas, m)], 1)
    s = net(x, ys) - mixture_log_prob(ys, y, sigmas)
    return (torch.logsumexp(s, 1) - s[:, 0]).mean()


def sm(net, x, y):
    y = y[:, None].clone().requires_grad_(True)  # (n, 1, K)
    f = net(x, y)
    (g,) = torch.autograd.grad(f.sum(), y, create_graph=True)
    trace = 0
    for k in range(y.shape[-1]):  # exact trace, one Hessian row per dimension
        (hk,) = torch.autograd.grad(g[..., k].sum(), y, create_graph=True)
        trace = trace + hk[..., k]
    return (trace + 0.5 * (g**2).sum(-1)).mean()


def dsm(net, x, y, m, sigma):
    noise = torch.randn(y.shape[0], m, y.shape[1], device=y.device)
    noisy = (y[:, None] + sigma * noise).requires_grad_(True)
    (g,) = torch.autograd.grad(net(x, noisy).sum(), noisy, create_graph=True)
    return ((g + (noisy - y[:, None]) / sigma**2) ** 2).sum(-1).mean()


def ml_mcmc(net, x, y, m, steps, alpha):
    ys = y[:, None].expand(-1, m, -1).clone()
    for _ in range(steps):  # eq. 9, the chains carry no gradient to the parameters
        ys.requires_grad_(True)
        (g,) = torch.autograd.grad(net(x, ys).sum(), ys)
        ys = (ys + 0.5 * alpha**2 * g + alpha * torch.randn_like(ys)).detach()
    return (net(x, ys).mean(1) - net(x, y[:, None])[:, 0]).mean()


def methods(m, device="cpu"):
    t = lambda *v: torch.tensor(v, device=device)  # noqa: E731
    return {
        "ml-is": lambda n, x, y: ml_is(n, x, y, m, t(0.2, 1.6)),
        "kld-is": lambda n, x, y: kld_is(n, x, y, m, t(0.2, 1.6), t(0.025)),
        "ml-mcmc-1": lambda n, x, y: ml_mcmc(n, x, y, m, 1, 0.05),
        "ml-mcmc-16": lambda n, x, y: ml_mcmc(n, x, y, m, 16, 0.05),
        "ml-mcmc-256": lambda n, x, y: ml_mcmc(n, x, y, m, 256, 0.05),
        "nce": lambda n, x, y: nce(n, x, y, m, t(0.1, 0.8)),
        "sm": lambda n, x, y: sm(n, x, y),
        "dsm": lambda n, x, y: dsm(n, x, y, m, 0.2),
        "nce+": lambda n, x, y: nce(n, x, y, m, t(0.1, 0.8), beta=0.025),
    }


def synchronize(device) -> None:
    """Waits for the GPU's queued work (nothing to wait for on the CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def time_method(loss_fn, data, steps, warmup, repeats):
    """Best of `repeats` timings of `steps` steps, scaled to an epoch."""
    torch.manual_seed(0)
    device = data[0].device
    net = Net().to(device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    for _ in range(warmup):
        train_step(net, opt, loss_fn, data)
    best = math.inf
    for _ in range(repeats):
        synchronize(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            loss = train_step(net, opt, loss_fn, data)
        synchronize(device)
        best = min(best, time.perf_counter() - t0)
        assert math.isfinite(float(loss))
    return best / steps * STEPS_PER_EPOCH


def serve_requests(prepare, key, count: str, device="cpu") -> None:
    """The worker loop of benchmarks/bench_protocol.py: prints {"torch", "threads",
    "device"}, then answers each JSON request line on stdin with {"wall", "cpu",
    "finite"} for `req[count]` calls of the runner `prepare(req)` made (and warmed up)
    for `key(req)` at its first request, the clock read after the device's queued work
    is done; {"quit": true} ends it. Without CUDA where `device` is "cuda", it prints
    {"error"} and returns."""
    import sys

    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"error": f"--torch-device cuda: this torch ({torch.__version__}) "
                                   "sees no CUDA GPU (a CPU build, or no GPU here); give "
                                   "--torch-python a Python whose torch is a CUDA build, on "
                                   "a machine with a GPU"}), flush=True)
        return
    name = torch.cuda.get_device_name() if torch.device(device).type == "cuda" else "cpu"
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                      "device": str(device), "device_name": name}), flush=True)
    runners = {}
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("quit"):
            break
        if key(req) not in runners:
            runners[key(req)] = prepare(req)
            runners[key(req)]()  # warm-up
        run = runners[key(req)]
        synchronize(device)
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(req[count]):
            value = run()
        synchronize(device)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(json.dumps({"wall": wall, "cpu": cpu, "finite": math.isfinite(float(value))}),
              flush=True)


def serve(data, num_samples: int, device="cpu") -> None:
    """Worker mode (`--serve`): requests {"method", "steps"}, `steps` train steps of
    that method's model (built at its first request)."""
    table = methods(num_samples, device)

    def prepare(req):
        torch.manual_seed(0)
        net = Net().to(device)
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        return lambda: train_step(net, opt, table[req["method"]], data)

    serve_requests(prepare, key=lambda req: req["method"], count="steps", device=device)


def train_step(net, opt, loss_fn, data) -> torch.Tensor:
    """One Adam step on a random batch; the loss, left on its device (reading it would
    wait for the GPU at every step)."""
    x_all, y_all = data
    idx = torch.randint(N_TRAIN, (BATCH,), device=x_all.device)
    loss = loss_fn(net, x_all[idx], y_all[idx])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.detach()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=None)
    p.add_argument("--serve", action="store_true", help="worker mode (see serve())")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--num-samples", type=int, default=1024)
    p.add_argument("--methods", nargs="+", default=None)
    p.add_argument("--repeats", type=int, default=3, help="timings per method (best)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, (N_TRAIN, 1)).astype(np.float32)
    y = (np.sin(x) + 0.1 * rng.normal(size=x.shape)).astype(np.float32)
    if args.device == "cuda" and not torch.cuda.is_available():
        if args.serve:  # the harness reads the worker's error line
            serve_requests(None, None, "steps", device="cuda")
            return
        p.error(f"--device cuda: this torch ({torch.__version__}) sees no CUDA GPU")
    data = (torch.from_numpy(x).to(args.device), torch.from_numpy(y).to(args.device))
    if args.serve:
        serve(data, args.num_samples, args.device)
        return
    if args.out is None:
        p.error("--out is required (or --serve)")
    table = methods(args.num_samples, args.device)
    results = {}
    for name in args.methods or table:
        heavy = name == "ml-mcmc-256"
        spe = time_method(table[name], data, steps=2 if heavy else 16,
                          warmup=1 if heavy else 3, repeats=2 if heavy else args.repeats)
        results[name] = spe
        print(f"torch {name}: {spe:.3f} s/epoch", flush=True)
    payload = {"torch": torch.__version__, "threads": args.threads, "device": args.device,
               "num_samples": args.num_samples, "seconds_per_epoch": results}
    with open(args.out, "w") as f:
        json.dump(payload, f, indent=2)


if __name__ == "__main__":
    main()
