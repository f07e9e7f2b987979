"""Where the default training step's floor goes: the pieces of the 784-512-256-10 MLP's
step timed one by one in the torch wheel's Python (the same libtorch, MKL and threads as
kiln), to tell which levers are worth pulling (docs/performance.md, "The EPYC again:
the step's floor, piece by piece"). Nothing here is kiln's code: it measures the libraries under it.

    python benchmarks/step_probe.py --threads 2 --batches 128,32

Prints, per batch size and in medians of --reps calls after a warm-up:
  gemm      each of the step's eight matrix products alone (µs), as kiln::linear
            issues them (forward x·wᵀ with the bias, weight gradient gᵀ·x, input
            gradient g·w), and their sum;
  adamw     at::_fused_adamw_ over the model's six tensors: alone in a loop (its 8.6 MB
            of state hot in the caches), right after the step's GEMMs (as in a step),
            and after a 128 MB copy (cold, from memory);
  order     the GEMMs and the optimizer as one step, the optimizer after the whole
            backward (a step as kiln and PyTorch run it) and per layer inside it
            (each layer updated as soon as its gradient is made);
  beta      the weight gradients written with beta 0 (MKL zeroes the output first)
            against accumulated with beta 1 into a kept buffer;
  pieces    what a fused linear+relu would save: addmm against mm, relu, relu in place,
            relu's backward and the bias gradient's column sum.
"""
import argparse
import time

import torch

WIDTHS = [784, 512, 256, 10]


def median_us(fn, reps, before=None, warmup=20):
    for _ in range(warmup):
        if before:
            before()
        fn()
    times = []
    for _ in range(reps):
        if before:
            before()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2] * 1e6


def probe(batch, reps):
    w = WIDTHS
    act = [torch.randn(batch, w[0])] + [torch.empty(batch, k) for k in w[1:]]
    gact = [torch.randn(batch, k) for k in w]
    weights = [torch.randn(w[i + 1], w[i]) * 0.05 for i in range(3)]
    biases = [torch.randn(w[i + 1]) * 0.05 for i in range(3)]
    dweights = [torch.randn(w[i + 1], w[i]) * 1e-3 for i in range(3)]
    dbiases = [torch.randn(w[i + 1]) * 1e-3 for i in range(3)]

    def state(params):
        return dict(p=params, m=[torch.zeros_like(t) for t in params], v=[torch.zeros_like(t) for t in params],
                    steps=[torch.tensor(1.0) for _ in params])

    layers = [dict(state([weights[i], biases[i]]), g=[dweights[i], dbiases[i]]) for i in range(3)]
    whole = dict(p=sum((l["p"] for l in layers), []), g=sum((l["g"] for l in layers), []),
                 m=sum((l["m"] for l in layers), []), v=sum((l["v"] for l in layers), []),
                 steps=sum((l["steps"] for l in layers), []))

    def adamw(s):
        torch._fused_adamw_(s["p"], s["g"], s["m"], s["v"], [], s["steps"], lr=1e-3, beta1=0.9, beta2=0.999,
                            weight_decay=1e-2, eps=1e-8, amsgrad=False, maximize=False)

    def forward(i):
        torch.addmm(biases[i], act[i], weights[i].t(), out=act[i + 1])

    def weight_grad(i):
        torch.mm(gact[i + 1].t(), act[i], out=dweights[i])

    def input_grad(i):
        torch.mm(gact[i + 1], weights[i], out=gact[i])

    def gemms(after_layer=None):
        for i in range(3):
            forward(i)
        for i in (2, 1, 0):
            weight_grad(i)
            if i > 0:
                input_grad(i)
            if after_layer:
                after_layer(i)

    def step(in_backward):
        gemms(lambda i: adamw(layers[i]) if in_backward else None)
        if not in_backward:
            adamw(whole)

    parts = []
    for i in range(3):
        parts.append((f"fwd{i + 1}", median_us(lambda: forward(i), reps)))
        parts.append((f"dw{i + 1}", median_us(lambda: weight_grad(i), reps)))
        if i > 0:
            parts.append((f"dx{i + 1}", median_us(lambda: input_grad(i), reps)))
    print(f"batch {batch} gemm   " + "  ".join(f"{n} {us:.0f}" for n, us in parts)
          + f"  sum {sum(us for _, us in parts):.0f} µs; all eight back to back {median_us(gemms, reps):.0f} µs")

    big = torch.randn(16 << 20)
    big_out = torch.empty_like(big)
    print(f"batch {batch} adamw  alone {median_us(lambda: adamw(whole), reps):.0f} µs, after the GEMMs "
          f"{median_us(lambda: adamw(whole), reps, before=gemms):.0f}, after a 128 MB copy "
          f"{median_us(lambda: adamw(whole), reps, before=lambda: big_out.copy_(big)):.0f}; the GEMMs alone "
          f"{median_us(gemms, reps):.0f}, after the optimizer {median_us(gemms, reps, before=lambda: adamw(whole)):.0f}")
    after, inside = [], []
    for _ in range(3):  # alternated: this machine's speed drifts
        after.append(median_us(lambda: step(False), reps))
        inside.append(median_us(lambda: step(True), reps))
    print(f"batch {batch} order  optimizer after the backward " + " ".join(f"{us / 1e3:.3f}" for us in after)
          + " ms; per layer inside it " + " ".join(f"{us / 1e3:.3f}" for us in inside) + " ms")

    # MKL zeroes a beta-0 output in a pass of its own (sgemm_mscale) before adding into
    # it; a beta-1 product into a kept, zeroed gradient has no such pass.
    kept = [torch.zeros_like(d) for d in dweights[:2]]
    cells = []
    for i in range(2):
        cells.append(f"dw{i + 1} {median_us(lambda: weight_grad(i), reps):.0f} against "
                     f"{median_us(lambda: kept[i].addmm_(gact[i + 1].t(), act[i]), reps):.0f}")
    print(f"batch {batch} beta   weight gradient written with beta 0 against accumulated with beta 1: "
          + ", ".join(cells) + " µs")

    z, g = act[1], gact[1]
    print(f"batch {batch} pieces addmm {median_us(lambda: forward(0), reps):.0f} µs against mm "
          f"{median_us(lambda: torch.mm(act[0], weights[0].t(), out=act[1]), reps):.0f} (layer 1); relu "
          f"{median_us(lambda: torch.relu(z), reps):.1f}, in place {median_us(lambda: z.relu_(), reps):.1f}, backward "
          f"{median_us(lambda: torch.ops.aten.threshold_backward(g, z, 0), reps):.1f}, bias gradient (sum over rows) "
          f"{median_us(lambda: g.sum(0), reps):.1f} µs, each on ({batch}, {z.size(1)})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batches", default="128,32")
    parser.add_argument("--reps", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"step_probe: torch {torch.__version__}, {args.threads} threads, {args.reps} calls each, medians")
    for b in (int(s) for s in args.batches.split(",")):
        probe(b, args.reps)


if __name__ == "__main__":
    main()
