"""A small CNN with one logit per attribute (sigmoid, not softmax: the attributes are independent)."""

from torch import nn


def attribute_net(num_classes: int = 3) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 64),
        nn.ReLU(),
        nn.Linear(64, num_classes),
    )
