"""What both Python twins share: the command line, kiln's cosine schedule, the timed
loop and the one JSON line each prints (benchmarks/twins/run.sh reads it)."""
import argparse
import gzip
import json
import math
import os
import time

import numpy as np
import torch

# Debian's dataset-fashion-mnist (kiln's default); KILN_FASHION_MNIST names another copy
FASHION_MNIST = os.environ.get("KILN_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")


def read_idx(name, root=FASHION_MNIST):
    """An IDX file (gzip) of Fashion-MNIST as a numpy array of its shape."""
    with gzip.open(os.path.join(root, name), "rb") as f:
        data = f.read()
    dims = data[3]  # IDX: 0, 0, dtype, number of dimensions, then big-endian sizes
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def fashion_mnist_train():
    """The 60,000 training images standardised as kiln's reader does (pixels/255, then
    the set's mean and standard deviation), (60000, 1, 28, 28) float32, and their labels."""
    images = torch.from_numpy(read_idx("train-images-idx3-ubyte.gz").astype(np.float32) / 255.0)
    labels = torch.from_numpy(read_idx("train-labels-idx1-ubyte.gz").astype(np.int64))
    mean, std = images.double().mean().item(), images.double().std().item()
    return ((images - mean) / std).unsqueeze(1), labels, (mean, std)


def parse_args(description, batch_size, extend=None, precision="bf16"):
    """The twins' shared options; extend(parser) adds a twin's own."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--batch-size", type=int, default=batch_size, help=f"examples per step (default {batch_size})")
    p.add_argument("--steps", type=int, default=40, help="timed steps (default 40)")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first, as kiln's first log window (default 10)")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2, kiln's train.threads)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--precision", choices=("fp32", "bf16"), default=precision,
                   help=f"fp32, or bf16 autocast around forward and loss as kiln's train.precision (default {precision}, the config's)")
    p.add_argument("--shapes", action="store_true",
                   help="print the state dict's {name: shape} as JSON and exit (run.sh checks it against kiln's checkpoint)")
    if extend:
        extend(p)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    return args


def device(args):
    """Where the twin trains: args.device for a twin that has the option (mlp_twin.py), else the CPU."""
    return getattr(args, "device", "cpu")


def autocast(args):
    """The forward and loss's precision context: bf16 autocast on the twin's device, or none."""
    return torch.autocast(device(args), dtype=torch.bfloat16, enabled=args.precision == "bf16")


def cosine_schedule(optimizer, warmup_steps, total_steps, min_ratio=0.0):
    """kiln's `schedule.name = "cosine"`: linear warm-up to lr over warmup_steps, then
    half a cosine down to min_ratio·lr at total_steps."""
    def factor(step):
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def print_shapes(model):
    print(json.dumps({name: list(t.shape) for name, t in model.state_dict().items()}))


def time_steps(step, args):
    """Runs step() args.warmup times untimed, then args.steps times, each timed; returns
    each timed step's milliseconds. step() must do all a kiln training step does: fetch
    the batch, zero_grad, forward, loss, backward, (clip), optimizer and schedule step.
    On CUDA each step ends with a device synchronisation inside its time, as
    kiln_bench_train times kiln's steps there: a step is done when its kernels are."""
    sync = torch.cuda.synchronize if device(args) == "cuda" else (lambda: None)
    for _ in range(args.warmup):
        step()
    sync()
    step_ms = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        sync()
        step_ms.append((time.perf_counter() - start) * 1000.0)
    return step_ms


def report(model_name, args, step_ms, parameters, tokens_per_step=None, extra=None):
    """Prints the run's JSON line: ms_per_step (the mean of step_ms: the window's steps
    per second) and every step's ms (kiln_bench_train takes its own statistics of them)."""
    ms = sum(step_ms) / len(step_ms)
    line = {"model": model_name, "batch_size": args.batch_size, "steps": args.steps, "warmup": args.warmup,
            "threads": torch.get_num_threads(), "precision": args.precision, "parameters": parameters, "torch": torch.__version__,
            "ms_per_step": ms, "steps_per_s": 1000.0 / ms, "step_ms": [round(v, 4) for v in step_ms]}
    if tokens_per_step is not None:
        line["tokens_per_s"] = tokens_per_step * 1000.0 / ms
    line.update(extra or {})
    print(json.dumps(line))
