"""The eager-PyTorch twin of kiln's configs/gpt_char.toml, written only to time a
training step against kiln's (benchmarks/twins/run.sh): the same transformer (4
pre-norm blocks of width 192, 6 heads, block 128, tied embeddings, 1.83 M parameters),
bf16 autocast (--precision fp32: none), fused AdamW, gradient clipping at 1.0, cosine schedule, random windows of the
fortunes text with a character vocabulary.

    python gpt_twin.py --batch-size 32 --steps 30 --warmup 10 --threads 2
"""
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

import common

CORPUS = "/usr/share/games/fortunes"  # Debian's fortunes; files with a '.' (.dat, .u8) skipped
BLOCKS, WIDTH, HEADS, BLOCK_SIZE, MLP_RATIO = 4, 192, 6, 128, 4
LR, WEIGHT_DECAY, CLIP_NORM, WARMUP_STEPS, MIN_LR, EPOCHS, TEST_FRACTION = 3e-3, 0.1, 1.0, 100, 3e-4, 6, 0.1


class Block(nn.Module):
    """One pre-norm block of kiln::nn::Gpt: x + proj(attn(norm1(x))), then
    x + out(gelu_tanh(fc(norm2(x))))."""

    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(WIDTH, eps=1e-5)
        self.attn = nn.Linear(WIDTH, 3 * WIDTH)  # q, k, v of every head
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.norm2 = nn.LayerNorm(WIDTH, eps=1e-5)
        self.fc = nn.Linear(WIDTH, MLP_RATIO * WIDTH)
        self.out = nn.Linear(MLP_RATIO * WIDTH, WIDTH)

    def forward(self, x):  # x: (B, T, C)
        b, t, c = x.shape
        q, k, v = self.attn(self.norm1(x)).view(b, t, 3, HEADS, c // HEADS).permute(2, 0, 3, 1, 4)  # 3 × (B, H, T, D)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.norm2(x)), approximate="tanh"))


class Gpt(nn.Module):
    """kiln::nn::Gpt (lib/nn/gpt.cpp) with GPT-2's initialisation, parameters under kiln's names."""

    def __init__(self, vocab):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab, WIDTH)
        self.position_embedding = nn.Embedding(BLOCK_SIZE, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.norm = nn.LayerNorm(WIDTH, eps=1e-5)
        residual_std = 0.02 / math.sqrt(2 * BLOCKS)
        with torch.no_grad():
            self.token_embedding.weight.normal_(0.0, 0.02)
            self.position_embedding.weight.normal_(0.0, 0.02)
            for block in self.blocks:
                for layer in (block.attn, block.proj, block.fc, block.out):
                    layer.weight.normal_(0.0, residual_std if layer in (block.proj, block.out) else 0.02)
                    layer.bias.zero_()

    def forward(self, tokens):  # tokens: (B, T) → logits (B, T, V)
        x = self.token_embedding(tokens) + self.position_embedding(torch.arange(tokens.size(1)))
        for block in self.blocks:
            x = block(x)
        return F.linear(self.norm(x), self.token_embedding.weight)  # the head is the tied embedding


def read_corpus():
    """The files of CORPUS in sorted path order, joined, as kiln's text reader does."""
    paths = sorted(os.path.join(d, f) for d, _, files in os.walk(CORPUS) for f in files
                   if "." not in f and not f.startswith("."))
    return "".join(open(p, encoding="utf-8").read() for p in paths)


def main():
    args = common.parse_args(__doc__.splitlines()[0], batch_size=32)
    text = read_corpus()
    vocab = sorted(set(text))
    model = Gpt(len(vocab))
    if args.shapes:
        common.print_shapes(model)
        return
    index = {ch: i for i, ch in enumerate(vocab)}
    tokens = torch.tensor([index[ch] for ch in text], dtype=torch.long)
    train = tokens[:int(len(tokens) * (1 - TEST_FRACTION))]  # the tail is kiln's test set
    windows = torch.arange(BLOCK_SIZE + 1)
    batches = len(train) // BLOCK_SIZE // args.batch_size
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, fused=True)
    schedule = common.cosine_schedule(optimizer, WARMUP_STEPS, EPOCHS * batches, MIN_LR / LR)
    model.train()

    def step():
        starts = torch.randint(len(train) - BLOCK_SIZE, (args.batch_size, 1))
        w = train[starts + windows]  # (B, T + 1)
        x, y = w[:, :-1], w[:, 1:]  # every position predicts the next character
        optimizer.zero_grad()
        with common.autocast(args):  # bf16 as configs/gpt_char.toml; the loss too, as kiln
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
        loss.backward()
        loss.item()  # kiln reads each step's loss and gradient norm
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM).item()
        optimizer.step()
        schedule.step()

    step_ms = common.time_steps(step, args)
    common.report("gpt", args, step_ms, sum(p.numel() for p in model.parameters()),
                  tokens_per_step=args.batch_size * BLOCK_SIZE)


if __name__ == "__main__":
    main()
