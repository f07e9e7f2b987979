"""The eager-PyTorch twin of kiln's configs/fashion_convnet.toml, written only to time
a training step against kiln's (benchmarks/twins/run.sh): the same network, bf16
autocast, channels-last, fused AdamW, cosine schedule, flips and 2-pixel crops, on
the real Fashion-MNIST training images.

    python convnet_twin.py --batch-size 128 --steps 60 --warmup 20 --threads 2
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import common

CHANNELS, POOL_AFTER, HEAD, DROPOUT, CLASSES = [32, 32, 64, 64], {2, 4}, 256, 0.1, 10
LR, WEIGHT_DECAY, WARMUP_STEPS, EPOCHS, CROP = 2e-3, 5e-2, 200, 20, 2


class ConvNet(nn.Module):
    """kiln::nn::ConvNet (lib/nn/convnet.cpp), parameters and buffers under kiln's names."""

    def __init__(self, image=(1, 28, 28)):
        super().__init__()
        self.convs, self.norms = nn.ModuleList(), nn.ModuleList()
        c, h, w = image
        for i, out in enumerate(CHANNELS):
            self.convs.append(nn.Conv2d(c, out, 3, padding=1, bias=False))  # the norm's shift follows
            self.norms.append(nn.BatchNorm2d(out))
            c = out
            if i + 1 in POOL_AFTER:
                h, w = h // 2, w // 2
        self.hidden = nn.Linear(c * h * w, HEAD)
        self.output = nn.Linear(HEAD, CLASSES)

    def forward(self, x):  # x: (B, 1, 28, 28) channels-last
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms)):
            x = F.relu(norm(conv(x)))
            if i + 1 in POOL_AFTER:
                x = F.max_pool2d(x, 2)
        x = F.relu(self.hidden(x.flatten(1)))  # (B, 64·7·7) → (B, 256)
        return self.output(F.dropout(x, DROPOUT, self.training))  # (B, 10)


def augment(x, fill):
    """kiln's data.augment_flip and data.augment_crop = CROP (lib/data/augment.cpp): each
    image mirrored with probability 1/2 and cropped back from a CROP-pixel pad at a
    random offset, as one gather. x: (B, 1, H, W)."""
    b, _, h, w = x.shape
    padded = F.pad(x, (CROP, CROP, CROP, CROP), value=fill)[:, 0]  # (B, H+2p, W+2p)
    offsets = torch.randint(2 * CROP + 1, (b, 2))
    flip = torch.randint(2, (b, 1)).bool()
    rows = offsets[:, :1] + torch.arange(h)  # (B, H)
    cols = torch.where(flip, torch.arange(w - 1, -1, -1), torch.arange(w)) + offsets[:, 1:]  # (B, W)
    return padded[torch.arange(b)[:, None, None], rows[:, :, None], cols[:, None, :]].unsqueeze(1)


def main():
    args = common.parse_args(__doc__.splitlines()[0], batch_size=128)
    model = ConvNet().to(memory_format=torch.channels_last)
    if args.shapes:
        common.print_shapes(model)
        return
    images, labels, (mean, std) = common.fashion_mnist_train()  # (60000, 1, 28, 28)
    fill = (0.0 - mean) / std  # a black pixel
    batches = len(images) // args.batch_size
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, fused=True)
    schedule = common.cosine_schedule(optimizer, WARMUP_STEPS, EPOCHS * batches)
    model.train()
    state = {"order": torch.randperm(len(images)), "batch": 0}

    def step():
        if state["batch"] == batches:  # a new epoch
            state["order"], state["batch"] = torch.randperm(len(images)), 0
        i = state["order"][state["batch"] * args.batch_size:(state["batch"] + 1) * args.batch_size]
        state["batch"] += 1
        x = augment(images[i], fill).contiguous(memory_format=torch.channels_last)
        y = labels[i]
        optimizer.zero_grad()
        with common.autocast(args):  # the loss too, as kiln
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        loss.item()  # kiln reads each step's loss
        optimizer.step()
        schedule.step()

    step_ms = common.time_steps(step, args)
    common.report("convnet", args, step_ms, sum(p.numel() for p in model.parameters()))


if __name__ == "__main__":
    main()
