"""A two-layer perceptron with one output: the predicted (standardised) progression."""

from torch import nn


def mlp(num_classes: int = 1, hidden: int = 32) -> nn.Module:
    return nn.Sequential(nn.Linear(10, hidden), nn.ReLU(), nn.Dropout(0.1), nn.Linear(hidden, num_classes))
