"""Multi-label on scikit-learn's bundled digits (offline): for each 8x8 image, three yes/no attributes of the
digit it shows: even, greater than four, prime. A target is a 0/1 vector of the three."""

import torch
from sklearn.datasets import load_digits
from torch.utils.data import Dataset

LABELS = ["even", "greater than 4", "prime"]
PRIMES = {2, 3, 5, 7}


class DigitAttributes(Dataset):
    classes = LABELS

    def __init__(self):
        digits = load_digits()
        self.images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
        self.digits = digits.target.tolist()

    def __len__(self) -> int:
        return len(self.digits)

    def __getitem__(self, index: int):
        d = self.digits[index]
        target = torch.tensor([d % 2 == 0, d > 4, d in PRIMES], dtype=torch.float32)
        return self.images[index], target
