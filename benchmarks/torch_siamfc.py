"""Eager PyTorch SiamFC: the baseline of the tracking benchmark (benchmarks/tracking.py).

Written from the paper (Bertinetto et al. 2016, "Fully-Convolutional Siamese Networks
for Object Tracking", sec. 2) and the conventions of the widely used PyTorch port
(crops with OpenCV, 3 scales in one batch, bicubic x16 upsampling, scale penalty, Hann
window, scale damping). Standalone on purpose (imports only torch, numpy and cv2), so
that it runs in a side environment whose Python has a build of torch (CPU, or CUDA
for `--device cuda`).

It runs as a server so that the harness can interleave its timings with the JAX ones
(A B A B): one JSON command per line on stdin, one JSON reply per line on stdout.

    python benchmarks/torch_siamfc.py serve --threads 1 [--device cuda]

Commands (arrays travel as .npz files named in the command):
  {"cmd": "load", "weights": W.npz, "data": D.npz, "width": 1.0, "settings": {...}}
  {"cmd": "response", "data": C.npz, "out": R.npz}  responses of C's `z_crop` (1, 127,
      127, 3) and `x_crops` (S, 255, 255, 3) float32 crops
  {"cmd": "loss", "data": L.npz, "out": O.npz}  labels and balanced loss of L's
      `logits` (B, n, n) and target `offsets` (B, 2) in response cells
  {"cmd": "track", "frames": n, "crop": "port"}  track D's first n frames from
      `first_box`; boxes, wall / CPU seconds of the updates (init apart)
  {"cmd": "train", "steps": n}  n SGD steps on D's pair batch; losses, wall / CPU seconds
  {"cmd": "quit"}
Settings use the field names of `ebm_jax.tracking.SiamFCSettings` (plus lr, momentum,
weight_decay); missing ones take the port's defaults (DEFAULTS).
Weights are the torch `state_dict` names of `SiamFCAlexNet` (conv weights OIHW).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time

import cv2
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

DEFAULTS = {  # the port's defaults; field names of ebm_jax.tracking.SiamFCSettings
    "exemplar_size": 127, "search_size": 255, "context": 0.5, "stride": 8,
    "response_scale": 0.001, "r_pos": 16.0, "scale_num": 3, "scale_step": 1.0375,
    "scale_penalty": 0.9745, "scale_lr": 0.59, "window_influence": 0.176,
    "response_up": 16, "stretch": 0.05, "shift": 8.0,
    "lr": 1e-2, "momentum": 0.9, "weight_decay": 5e-4,
}
BN_EPS, BN_MOMENTUM = 1e-6, 0.05  # SiamFC port's BatchNorm2d(eps=1e-6, momentum=0.05)


def scaled_channels(width: float, channels: int) -> int:
    """The width multiplier's channel count: round(width * channels) to an even number
    (at least 2), so that the two-group convolutions split evenly."""
    return max(2, 2 * int(round(width * channels / 2)))


class SiamFCAlexNet(nn.Module):
    """SiamFC's AlexNet (Bertinetto et al. 2016, Table 1; the port's `AlexNetV1`):
    conv 11/2 96, BN, ReLU, maxpool 3/2; conv 5 256 (2 groups), BN, ReLU, maxpool 3/2;
    conv 3 384, BN, ReLU; conv 3 384 (2 groups), BN, ReLU; conv 3 256 (2 groups).
    Input: raw 0-255 RGB, NCHW. Total stride 8."""

    def __init__(self, width: float = 1.0):
        super().__init__()
        c1, c2, c3, c4, c5 = (scaled_channels(width, c) for c in (96, 256, 384, 384, 256))
        self.conv1 = nn.Conv2d(3, c1, 11, 2)
        self.bn1 = nn.BatchNorm2d(c1, eps=BN_EPS, momentum=BN_MOMENTUM)
        self.conv2 = nn.Conv2d(c1, c2, 5, 1, groups=2)
        self.bn2 = nn.BatchNorm2d(c2, eps=BN_EPS, momentum=BN_MOMENTUM)
        self.conv3 = nn.Conv2d(c2, c3, 3, 1)
        self.bn3 = nn.BatchNorm2d(c3, eps=BN_EPS, momentum=BN_MOMENTUM)
        self.conv4 = nn.Conv2d(c3, c4, 3, 1, groups=2)
        self.bn4 = nn.BatchNorm2d(c4, eps=BN_EPS, momentum=BN_MOMENTUM)
        self.conv5 = nn.Conv2d(c4, c5, 3, 1, groups=2)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 3, 2)
        x = F.relu(self.bn3(self.conv3(x)))
        x = F.relu(self.bn4(self.conv4(x)))
        return self.conv5(x)


def xcorr(z, x, out_scale: float):
    """Cross-correlation of each search feature map with its exemplar's (Bertinetto et
    al. 2016, eq. 2), as one grouped convolution; z (nz, C, h, w), x (nx, C, H, W) with
    nx a multiple of nz -> (nx, 1, H - h + 1, W - w + 1), times `out_scale`."""
    nz = z.shape[0]
    nx, c, h, w = x.shape
    out = F.conv2d(x.reshape(-1, nz * c, h, w), z, groups=nz)
    return out.reshape(nx, -1, out.shape[-2], out.shape[-1]) * out_scale


def crop_and_resize(img, center_yx, size, out_size, border_value):
    """The port's crop: a square of side round(size) centred on `center_yx` (0-indexed
    (row, col)), corners rounded to pixels, padded with `border_value` where it leaves
    the image, resized to out_size x out_size (bilinear)."""
    size = round(size)
    corners = np.round(np.concatenate((np.round(center_yx - (size - 1) / 2),
                                       np.round(center_yx - (size - 1) / 2) + size)))
    corners = corners.astype(int)
    pads = np.concatenate((-corners[:2], corners[2:] - np.array(img.shape[:2])))
    npad = max(0, int(pads.max()))
    if npad > 0:
        img = cv2.copyMakeBorder(img, npad, npad, npad, npad, cv2.BORDER_CONSTANT,
                                 value=tuple(float(v) for v in border_value))
    corners = corners + npad
    patch = img[corners[0]:corners[2], corners[1]:corners[3]]
    return cv2.resize(patch, (out_size, out_size), interpolation=cv2.INTER_LINEAR)


def crop_continuous(img, center_yx, size, out_size, border_value):
    """A crop without the port's rounding: output pixel i samples the frame at
    c + (i - (out - 1) / 2) * size / out along each axis (OpenCV's resize convention),
    bilinear, `border_value` outside (cv2.warpAffine); the convention of
    `ebm_jax.ops.crops`. Float32 output."""
    scale = size / out_size
    half = (out_size - 1) / 2
    matrix = np.array([[scale, 0.0, center_yx[1] - half * scale],
                       [0.0, scale, center_yx[0] - half * scale]])
    return cv2.warpAffine(np.asarray(img, np.float32), matrix, (out_size, out_size),
                          flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                          borderMode=cv2.BORDER_CONSTANT,
                          borderValue=tuple(float(v) for v in border_value))


CROPS = {"port": crop_and_resize, "continuous": crop_continuous}


def box_to_center(box):
    """(x, y, w, h), 1-indexed -> centre (row, col) 0-indexed and size (h, w)."""
    x, y, w, h = (float(v) for v in box)
    return np.array([y - 1 + (h - 1) / 2, x - 1 + (w - 1) / 2]), np.array([h, w])


def exemplar_side(size_hw, context: float) -> float:
    """sqrt((w + c)(h + c)), c = context * (w + h) (Bertinetto et al. 2016, sec. 2.4)."""
    return float(np.sqrt(np.prod(size_hw + context * np.sum(size_hw))))


class Tracker:
    """The port's tracking procedure (Bertinetto et al. 2016, sec. 2.4), eager, float32
    on the network's device (crops and the response's upsampling on the CPU, as the
    port does). `crop`: "port" (rounded corners, the port's crop) or "continuous"."""

    def __init__(self, net: SiamFCAlexNet, settings: dict, crop: str = "port"):
        self.net = net.eval()
        self.device = next(net.parameters()).device
        self.s = dict(DEFAULTS, **settings)
        self.crop = CROPS[crop]
        s = self.s
        self.upscale = s["response_up"] * ((s["search_size"] - s["exemplar_size"])
                                           // s["stride"] + 1)
        hann = np.outer(np.hanning(self.upscale), np.hanning(self.upscale))
        self.hann = hann / hann.sum()
        n = s["scale_num"]
        self.scale_factors = s["scale_step"] ** np.linspace(-(n // 2), n // 2, n)

    @torch.no_grad()
    def init(self, img, box):
        s = self.s
        self.center, self.target_sz = box_to_center(box)
        self.z_sz = exemplar_side(self.target_sz, s["context"])
        self.x_sz = self.z_sz * s["search_size"] / s["exemplar_size"]
        self.avg_color = np.mean(img, axis=(0, 1))
        z = self.crop(img, self.center, self.z_sz, s["exemplar_size"], self.avg_color)
        z = torch.from_numpy(np.asarray(z)).permute(2, 0, 1)[None].float()
        self.kernel = self.net(z.to(self.device))

    @torch.no_grad()
    def update(self, img):
        s = self.s
        x = np.stack([self.crop(img, self.center, self.x_sz * f, s["search_size"],
                                self.avg_color) for f in self.scale_factors])
        x = torch.from_numpy(x).permute(0, 3, 1, 2).float().to(self.device)
        responses = xcorr(self.kernel, self.net(x), s["response_scale"])[:, 0].cpu().numpy()
        return self.locate(responses)

    def locate(self, responses):
        """Response maps (scales, 17, 17) -> new xywh box; moves the state (the port's
        `update` after the forward pass)."""
        s = self.s
        n = s["scale_num"]
        up = np.stack([cv2.resize(r, (self.upscale, self.upscale),
                                  interpolation=cv2.INTER_CUBIC) for r in responses])
        up[:n // 2] *= s["scale_penalty"]
        up[n // 2 + 1:] *= s["scale_penalty"]
        scale_id = int(np.argmax(np.amax(up, axis=(1, 2))))
        r = up[scale_id]
        r -= r.min()
        r /= r.sum() + 1e-16
        r = (1 - s["window_influence"]) * r + s["window_influence"] * self.hann
        loc = np.unravel_index(r.argmax(), r.shape)
        disp = (np.array(loc) - (self.upscale - 1) / 2) * s["stride"] / s["response_up"]
        disp = disp * self.x_sz * self.scale_factors[scale_id] / s["search_size"]
        self.center = self.center + disp
        scale = (1 - s["scale_lr"]) + s["scale_lr"] * self.scale_factors[scale_id]
        self.target_sz = self.target_sz * scale
        self.z_sz *= scale
        self.x_sz *= scale
        (cy, cx), (h, w) = self.center, self.target_sz
        return np.array([cx + 1 - (w - 1) / 2, cy + 1 - (h - 1) / 2, w, h])


def l1_labels(size: int, r_pos: float, offset_yx) -> np.ndarray:
    """SiamFC training labels (Bertinetto et al. 2016, sec. 2.2; the port's
    `_create_labels` with r_neg = 0): 1 where the L1 distance of a cell to the target
    (the map centre moved by `offset_yx` cells) is <= r_pos cells, else 0."""
    grid = np.arange(size) - (size - 1) / 2
    dist = np.abs(grid - offset_yx[0])[:, None] + np.abs(grid - offset_yx[1])[None, :]
    return (dist <= r_pos).astype(np.float32)


def balanced_bce(logits, labels):
    """Balanced logistic loss (sec. 2.2, eq. 1-2; the port's `BalancedLoss`): per
    example, positives and negatives each weighted 1/count, weights normalised to sum
    1, weighted BCE summed; averaged over the batch. logits, labels (B, h, w)."""
    pos = labels.sum((1, 2), keepdim=True).clamp(min=1)
    neg = (1 - labels).sum((1, 2), keepdim=True).clamp(min=1)
    weight = labels / pos + (1 - labels) / neg
    weight = weight / weight.sum((1, 2), keepdim=True)
    bce = F.binary_cross_entropy_with_logits(logits, labels, reduction="none")
    return (weight * bce).sum((1, 2)).mean()


def training_crops(rng, z_frames, z_boxes, x_frames, x_boxes, s):
    """Exemplar and search crops from whole frames (the port's crops, Bertinetto et al.
    2016, sec. 2.3): side exemplar_side (x search_size / exemplar_size for the search
    crop), each stretched by U[1 - stretch, 1 + stretch], the search centre moved by
    U[-shift, shift] crop pixels per axis, each frame's mean colour as padding.
    Returns NCHW float tensors and the target offsets (B, 2) in response cells."""
    zs, xs, offsets = [], [], []
    lo, hi = 1 - s["stretch"], 1 + s["stretch"]
    for zf, zb, xf, xb in zip(z_frames, z_boxes, x_frames, x_boxes):
        center, size = box_to_center(zb)
        side = exemplar_side(size, s["context"]) * rng.uniform(lo, hi)
        zs.append(crop_and_resize(zf, center, side, s["exemplar_size"],
                                  np.mean(zf, axis=(0, 1))))
        center, size = box_to_center(xb)
        side = (exemplar_side(size, s["context"]) * s["search_size"] / s["exemplar_size"]
                * rng.uniform(lo, hi))
        shift = rng.uniform(-s["shift"], s["shift"], 2)
        xs.append(crop_and_resize(xf, center + shift * side / s["search_size"], side,
                                  s["search_size"], np.mean(xf, axis=(0, 1))))
        offsets.append(-shift / s["stride"])
    to = lambda a: torch.from_numpy(np.stack(a)).permute(0, 3, 1, 2).float()  # noqa: E731
    return to(zs), to(xs), np.stack(offsets)


class Trainer:
    """One SGD step (momentum, coupled weight decay) of the balanced BCE on a batch of
    frame pairs, crops included (sec. 2.2-2.3)."""

    def __init__(self, net: SiamFCAlexNet, settings: dict, seed: int = 0):
        self.net = net
        self.device = next(net.parameters()).device
        self.s = dict(DEFAULTS, **settings)
        self.rng = np.random.default_rng(seed)
        self.opt = torch.optim.SGD(net.parameters(), lr=self.s["lr"],
                                   momentum=self.s["momentum"],
                                   weight_decay=self.s["weight_decay"])

    def step(self, batch) -> float:
        s = self.s
        self.net.train()
        z, x, offsets = training_crops(self.rng, batch["z_frames"], batch["z_boxes"],
                                       batch["x_frames"], batch["x_boxes"], s)
        z, x = z.to(self.device), x.to(self.device)
        responses = xcorr(self.net(z), self.net(x), s["response_scale"])[:, 0]
        labels = torch.from_numpy(np.stack([
            l1_labels(responses.shape[-1], s["r_pos"] / s["stride"], o) for o in offsets]))
        labels = labels.to(self.device)
        loss = balanced_bce(responses, labels)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.item()


def load_weights(net: SiamFCAlexNet, path: str) -> None:
    with np.load(path) as f:
        state = {k: torch.from_numpy(np.asarray(f[k])) for k in f.files}
    own = net.state_dict()
    missing = sorted(set(own) - set(state) - {k for k in own if "num_batches" in k})
    if missing:
        raise ValueError(f"{path}: missing weights {missing}")
    for k, v in state.items():
        if k not in own or own[k].shape != v.shape:
            raise ValueError(f"{path}: weight {k} of shape {tuple(v.shape)} does not fit "
                             f"{tuple(own[k].shape) if k in own else 'no such weight'}")
    net.load_state_dict(state, strict=False)


def serve(threads: int, device: str = "cpu") -> None:
    torch.set_num_threads(threads)
    cv2.setNumThreads(1)
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but replies on the reply channel
    net = data = trainer = None
    settings: dict = {}

    def reply(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    if device == "cuda" and not torch.cuda.is_available():
        reply({"error": f"--torch-device cuda: this torch ({torch.__version__}) sees no "
                        "CUDA GPU (a CPU build, or no GPU here); give --torch-python a "
                        "Python whose torch is a CUDA build, on a machine with a GPU"})
        return
    reply({"ready": True, "torch": torch.__version__, "threads": torch.get_num_threads(),
           "interop_threads": torch.get_num_interop_threads(), "device": device,
           "device_name": (torch.cuda.get_device_name() if device == "cuda" else "cpu"),
           "cv2": cv2.__version__, "numpy": np.__version__})
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            if cmd["cmd"] == "quit":
                reply({"ok": True})
                return
            if cmd["cmd"] == "load":
                settings = dict(cmd.get("settings", {}))
                net = SiamFCAlexNet(cmd.get("width", 1.0))
                load_weights(net, cmd["weights"])
                net = net.to(device)
                trainer = Trainer(copy.deepcopy(net), settings)  # tracking keeps `net`
                with np.load(cmd["data"]) as f:
                    data = {k: f[k] for k in f.files}
                reply({"ok": True})
            elif cmd["cmd"] == "response":
                net.eval()
                with np.load(cmd["data"]) as f, torch.no_grad():
                    z = torch.from_numpy(f["z_crop"]).permute(0, 3, 1, 2).float()
                    x = torch.from_numpy(f["x_crops"]).permute(0, 3, 1, 2).float()
                    r = xcorr(net(z.to(device)), net(x.to(device)),
                              dict(DEFAULTS, **settings)["response_scale"])
                np.savez(cmd["out"], responses=r[:, 0].cpu().numpy())
                reply({"ok": True})
            elif cmd["cmd"] == "loss":
                s = dict(DEFAULTS, **settings)
                with np.load(cmd["data"]) as f:
                    logits, offsets = f["logits"], f["offsets"]
                labels = np.stack([l1_labels(logits.shape[-1], s["r_pos"] / s["stride"], o)
                                   for o in offsets])
                loss = balanced_bce(torch.from_numpy(logits), torch.from_numpy(labels))
                np.savez(cmd["out"], labels=labels, loss=loss.item())
                reply({"ok": True})
            elif cmd["cmd"] == "track":
                n = int(cmd["frames"])
                frames = data["frames"][:n]
                tracker = Tracker(net, settings, cmd.get("crop", "port"))
                w0, c0 = time.perf_counter(), time.process_time()
                tracker.init(frames[0], data["first_box"])
                w1, c1 = time.perf_counter(), time.process_time()
                boxes = [np.asarray(data["first_box"], np.float64)]
                for frame in frames[1:]:
                    boxes.append(tracker.update(frame))
                w2, c2 = time.perf_counter(), time.process_time()
                reply({"ok": True, "boxes": np.stack(boxes).tolist(),
                       "init_wall": w1 - w0, "init_cpu": c1 - c0,
                       "wall": w2 - w1, "cpu": c2 - c1, "updates": n - 1})
            elif cmd["cmd"] == "train":
                n = int(cmd["steps"])
                batch = {k: data[k] for k in ("z_frames", "z_boxes", "x_frames", "x_boxes")}
                w0, c0 = time.perf_counter(), time.process_time()
                losses = [trainer.step(batch) for _ in range(n)]
                if device == "cuda":
                    torch.cuda.synchronize()  # the last step's update too
                w1, c1 = time.perf_counter(), time.process_time()
                reply({"ok": True, "losses": losses, "wall": w1 - w0, "cpu": c1 - c0,
                       "steps": n})
            else:
                reply({"ok": False, "error": f"unknown command {cmd['cmd']!r}"})
        except Exception as err:  # the harness reports it and stops
            reply({"ok": False, "error": f"{type(err).__name__}: {err}"})
    return


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("serve", help="answer JSON commands on stdin (see the docstring)")
    s.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    s.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = p.parse_args(argv)
    if args.threads < 1:
        p.error(f"--threads must be >= 1, got {args.threads}")
    serve(args.threads, args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
