"""Made-up names in five made-up languages, for sequence classification: which language is this name from?

Each language is a set of spelling rules (the syllables it starts and continues words with, the endings it
favours), so a name is a string of characters whose n-grams give its language away, as real surnames do
("-ski", "-escu", "sch-"). Names are drawn with one seeded generator, so the data is the same on every
machine, needs no files and no download. Each sample is the name as int64 character ids (0 pads it to
`max_len`) and its language's index."""

import random

import torch
from torch.utils.data import Dataset

PAD = 0
VOCAB = ["<pad>", *"abcdefghijklmnopqrstuvwxyz"]

# Per language: starts (first syllables), middles (syllables after the first) and endings, each drawn
# uniformly. Some syllables are shared between languages, so a short name can be ambiguous and the task is not
# trivial.
LANGUAGES = {
    "Veltic": {
        "starts": ["br", "gw", "ll", "mor", "tal", "dew", "kar", "bel"],
        "middles": ["an", "wy", "ed", "ith", "ow", "yn", "ar"],
        "endings": ["wen", "dd", "ith", "yn", "og", "an"],
    },
    "Sorvan": {
        "starts": ["zv", "kr", "pol", "vol", "dobr", "mir", "sta", "bor"],
        "middles": ["ov", "ich", "ol", "ar", "en", "ik"],
        "endings": ["ski", "ova", "enko", "ich", "ak", "ov"],
    },
    "Lunaro": {
        "starts": ["bel", "cor", "fio", "lu", "mar", "ros", "vi", "ta"],
        "middles": ["ri", "ne", "lla", "ta", "cci", "ra", "an"],
        "endings": ["ini", "etto", "ella", "ano", "esco", "ia"],
    },
    "Hakumi": {
        "starts": ["ka", "to", "shi", "mi", "yo", "na", "ha", "ta"],
        "middles": ["ka", "mu", "ra", "shi", "no", "ku", "ri"],
        "endings": ["ko", "ru", "shi", "moto", "ta", "mi"],
    },
    "Grendt": {
        "starts": ["schw", "kl", "str", "gr", "hof", "wolf", "bra", "ber"],
        "middles": ["en", "ach", "ol", "ur", "er", "an"],
        "endings": ["mann", "stein", "berg", "dt", "hardt", "er"],
    },
}
CLASSES = list(LANGUAGES)


# the chance that a syllable comes from another language, as names travel; it keeps the task honest
BORROW = 0.2


def make_name(language: str, rng: random.Random, max_len: int) -> str:
    """One name: a start, zero to two middles and an ending, cut to `max_len` characters."""

    def pick(kind: str) -> str:
        source = rng.choice(CLASSES) if rng.random() < BORROW else language
        return rng.choice(LANGUAGES[source][kind])

    parts = [pick("starts"), *(pick("middles") for _ in range(rng.randint(0, 2))), pick("endings")]
    return "".join(parts)[:max_len]


def encode(name: str, max_len: int) -> torch.Tensor:
    ids = [VOCAB.index(ch) for ch in name[:max_len]]
    return torch.tensor(ids + [PAD] * (max_len - len(ids)), dtype=torch.int64)


class Names(Dataset):
    """`size` names, balanced over the languages, in a seeded shuffled order."""

    classes = CLASSES
    vocab = VOCAB

    def __init__(self, size: int = 4000, max_len: int = 16, seed: int = 0):
        self.max_len = max_len
        rng = random.Random(seed)
        labels = [i % len(CLASSES) for i in range(size)]
        rng.shuffle(labels)
        self.names = [make_name(CLASSES[label], rng, max_len) for label in labels]
        self.ids = torch.stack([encode(name, max_len) for name in self.names])
        self.labels = torch.tensor(labels, dtype=torch.int64)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        return self.ids[index], self.labels[index]

    def decode(self, ids) -> str:
        """The name a row of character ids spells (padding dropped)."""
        return "".join(VOCAB[int(i)] for i in ids if int(i) != PAD)
