"""The eager-PyTorch twin of kiln's default run (configs/fashion_mlp.toml), written only
to time a training step against kiln's (build/bin/kiln_bench_train runs it): the same
784-512-256-10 MLP with relu, cross-entropy, AdamW with fused=True (PyTorch's fastest
eager optimizer), constant learning rate, on the real Fashion-MNIST training images in
a fresh random order each epoch (with --device cuda: the model, the data set and the
order on the GPU, as kiln's train.data_on_device keeps them). Like kiln, it reads the loss and the gradient norm to
the host on log steps only (every --log-every steps), and autocasts forward and loss
to bf16 when --precision bf16. --compile wraps the model in torch.compile.

    python mlp_twin.py --batch-size 128 --steps 200 --warmup 50 --threads 2 --precision fp32
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import common


class Mlp(nn.Module):
    """kiln::nn::Mlp (lib/nn/mlp.cpp): parameters under kiln's names (layers.i.weight, layers.i.bias)."""

    def __init__(self, sizes):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))

    def forward(self, x):  # x: (B, 1, 28, 28)
        x = x.flatten(1)
        for layer in self.layers[:-1]:
            x = F.relu(layer(x))
        return self.layers[-1](x)


def main():
    def more(p):
        p.add_argument("--hidden", default="512,256", help="hidden widths as kiln's model.hidden (default 512,256)")
        p.add_argument("--lr", type=float, default=1e-3)
        p.add_argument("--weight-decay", type=float, default=1e-2)
        p.add_argument("--log-every", type=int, default=50, help="steps between host reads (kiln's train.log_every)")
        p.add_argument("--compile", action="store_true", help="torch.compile the model (inductor, C++ on the CPU)")
        p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where to train (default cpu)")

    args = common.parse_args(__doc__.splitlines()[0], batch_size=128, extend=more, precision="fp32")
    model = Mlp([784] + [int(h) for h in args.hidden.split(",") if h] + [10])
    if args.shapes:
        common.print_shapes(model)
        return
    images, labels, _ = common.fashion_mnist_train()
    model, images, labels = model.to(args.device), images.to(args.device), labels.to(args.device)
    batches = len(images) // args.batch_size
    if args.warmup + args.steps > batches:
        sys.exit(f"mlp_twin.py: {args.warmup + args.steps} steps cross an epoch's end ({batches} batches of {args.batch_size})")
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay, fused=True)
    forward = torch.compile(model) if args.compile else model
    model.train()
    state = {"order": torch.randperm(len(images), device=args.device), "batch": 0, "step": 0, "logged": []}

    def step():
        i = state["order"][state["batch"] * args.batch_size:(state["batch"] + 1) * args.batch_size]
        state["batch"] += 1
        state["step"] += 1
        x, y = images[i], labels[i]
        optimizer.zero_grad()
        with common.autocast(args):
            loss = F.cross_entropy(forward(x), y)
        loss.backward()
        if state["step"] % args.log_every == 0:  # what kiln's log line reads
            norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
            state["logged"].append((state["step"], loss.item(), norm.item()))
        optimizer.step()

    step_ms = common.time_steps(step, args)
    common.report("mlp", args, step_ms, sum(p.numel() for p in model.parameters()),
                  extra={"compile": args.compile, "last_logged": state["logged"][-1] if state["logged"] else None})


if __name__ == "__main__":
    main()
