"""Demo package for `make demo`: the same three blocks on both sides, except
that head's MLP block busy-waits in its forward (a planted slowdown)."""

import time

import torch.nn as nn

EXTRA_WORK_US = 100  # the planted slowdown: 100 us per forward


def _busy_wait(us: float) -> None:
    end = time.thread_time_ns() + int(us * 1000)
    while time.thread_time_ns() < end:
        pass


class MLP(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        if EXTRA_WORK_US:
            _busy_wait(EXTRA_WORK_US)
        return self.fc2(self.act(self.fc1(self.norm(x))))


def make_linear(hidden: int = 256):
    return nn.Linear(hidden, hidden)


def make_norm_linear(hidden: int = 256):
    return nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, 3 * hidden))


def make_mlp(hidden: int = 256):
    return MLP(hidden)
