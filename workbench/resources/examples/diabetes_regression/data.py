"""Regression on scikit-learn's bundled diabetes data (442 patients, 10 features, offline): predict the
disease progression a year later. Features and target are standardised, so a loss of 1.0 is guessing the
mean."""

import torch
from sklearn.datasets import load_diabetes
from torch.utils.data import TensorDataset


def diabetes():
    x, y = load_diabetes(return_X_y=True)
    x = torch.tensor(x, dtype=torch.float32)
    y = torch.tensor(y, dtype=torch.float32)
    x = (x - x.mean(0)) / x.std(0)
    y = (y - y.mean()) / y.std()
    return TensorDataset(x, y)
