#!/usr/bin/env python3
"""Trains a small CNN for a few epochs on random data and saves a training checkpoint after each,
as a real training script does: {'epoch', 'model', 'optimizer', 'args'}.

Usage: make_example.py OUTDIR [EPOCHS]
"""
import argparse
import os
import sys

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.classifier = nn.Linear(32, 10)

    def forward(self, x):
        return self.classifier(self.features(x))


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    outdir = sys.argv[1]
    epochs = int(sys.argv[2]) if len(sys.argv) == 3 else 5
    os.makedirs(outdir, exist_ok=True)
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = torch.randn(256, 3, 16, 16)
    labels = torch.randint(0, 10, (256,))
    args = argparse.Namespace(lr=0.05, epochs=epochs, batch_size=32)
    for epoch in range(epochs):
        for i in range(0, len(data), 32):
            opt.zero_grad()
            nn.functional.cross_entropy(model(data[i:i + 32]), labels[i:i + 32]).backward()
            opt.step()
        path = os.path.join(outdir, "ckpt_%d.pt" % epoch)
        torch.save({"epoch": epoch, "model": model.state_dict(), "optimizer": opt.state_dict(),
                    "args": args}, path)
        print(path)
    torch.jit.script(model.eval()).save(os.path.join(outdir, "net.ts"))
    torch.save(data[:128], os.path.join(outdir, "train.pt"))


if __name__ == "__main__":
    main()
