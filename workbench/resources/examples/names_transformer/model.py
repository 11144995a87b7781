"""A small transformer encoder for character sequences: character and position embeddings, two encoder layers
that attend only to real characters, the mean over those characters, and one linear layer to the classes."""

import torch
from torch import nn

PAD = 0


class NameTransformer(nn.Module):
    def __init__(
        self,
        num_classes: int = 5,
        vocab_size: int = 27,
        max_len: int = 16,
        dim: int = 48,
        heads: int = 4,
        layers: int = 2,
        dropout: float = 0.1,
    ):
        super().__init__()
        self.chars = nn.Embedding(vocab_size, dim, padding_idx=PAD)
        self.positions = nn.Embedding(max_len, dim)
        layer = nn.TransformerEncoderLayer(
            dim, heads, dim_feedforward=2 * dim, dropout=dropout, batch_first=True
        )
        # No nested tensors: eval then computes what training does, and export and quantization see plain
        # tensors.
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        padding = ids == PAD
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.chars(ids) + self.positions(positions)
        x = self.encoder(x, src_key_padding_mask=padding)
        # Average only the real characters: a short name is not diluted by its padding.
        keep = (~padding).unsqueeze(-1).to(x.dtype)
        pooled = (x * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        return self.head(pooled)
