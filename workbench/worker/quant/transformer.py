"""nn.TransformerEncoder/Decoder and their layers rebuilt from plain ops (eval mode), so torch.fx sees their
feed-forward Linear layers and their attention's projections (QuantizableAttention). Worker side; never
imports Qt.
"""

from __future__ import annotations

from torch import nn

from workbench.worker.quant.attention import QuantizableAttention, fx_keeps_whole, why_kept


def _attention(mha: nn.Module) -> nn.Module:
    """A QuantizableAttention of `mha` where it can be one; else `mha` itself (fx keeps it whole, it stays
    float)."""
    if isinstance(mha, nn.MultiheadAttention) and why_kept(mha) is None:
        return QuantizableAttention(mha)
    return mha


class QuantizableEncoderLayer(nn.Module):
    """An nn.TransformerEncoderLayer: self-attention and a feed-forward block, each with a residual and a
    LayerNorm (before, with norm_first, or after). Dropout is left out: quantization runs in eval mode."""

    def __init__(self, layer: nn.TransformerEncoderLayer):
        super().__init__()
        self.self_attn = _attention(layer.self_attn)
        self.linear1, self.linear2 = layer.linear1, layer.linear2
        self.norm1, self.norm2 = layer.norm1, layer.norm2
        self.norm_first = layer.norm_first
        # torch turned "relu"/"gelu" into F.relu/F.gelu: a function, which fx records as a call_function node;
        # an nn.GELU or other module stays a child (a call_module node).
        self.activation = layer.activation

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        return self.self_attn(
            x,
            x,
            x,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            need_weights=False,
            is_causal=is_causal,
        )[0]

    def _ff_block(self, x):
        return self.linear2(self.activation(self.linear1(x)))


class QuantizableDecoderLayer(nn.Module):
    """An nn.TransformerDecoderLayer: self-attention, cross-attention over the memory and a feed-forward
    block, each with a residual and a LayerNorm. Dropout is left out: quantization runs in eval mode."""

    def __init__(self, layer: nn.TransformerDecoderLayer):
        super().__init__()
        self.self_attn = _attention(layer.self_attn)
        self.multihead_attn = _attention(layer.multihead_attn)
        self.linear1, self.linear2 = layer.linear1, layer.linear2
        self.norm1, self.norm2, self.norm3 = layer.norm1, layer.norm2, layer.norm3
        self.norm_first = layer.norm_first
        self.activation = layer.activation

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal=False,
        memory_is_causal=False,
    ):
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(
                self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal
            )
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
            x = self.norm2(
                x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            )
            x = self.norm3(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        return self.self_attn(
            x,
            x,
            x,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            need_weights=False,
            is_causal=is_causal,
        )[0]

    def _mha_block(self, x, memory, attn_mask, key_padding_mask, is_causal):
        return self.multihead_attn(
            x,
            memory,
            memory,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            need_weights=False,
            is_causal=is_causal,
        )[0]

    def _ff_block(self, x):
        return self.linear2(self.activation(self.linear1(x)))


class QuantizableEncoder(nn.Module):
    """An nn.TransformerEncoder without its nested-tensor fast path: each layer in turn, then the final norm.
    Torch's causal-mask detection only decides whether a given mask may be replaced by the causal hint, which
    changes nothing here: attend() uses a mask whenever there is one."""

    def __init__(self, encoder: nn.TransformerEncoder):
        super().__init__()
        self.layers = nn.ModuleList(swap_one(layer) or layer for layer in encoder.layers)
        self.num_layers = encoder.num_layers
        self.norm = encoder.norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        output = src
        for layer in self.layers:
            output = layer(
                output, src_mask=mask, is_causal=is_causal, src_key_padding_mask=src_key_padding_mask
            )
        if self.norm is not None:
            output = self.norm(output)
        return output


class QuantizableDecoder(nn.Module):
    """An nn.TransformerDecoder: each layer in turn over the same memory, then the final norm."""

    def __init__(self, decoder: nn.TransformerDecoder):
        super().__init__()
        self.layers = nn.ModuleList(swap_one(layer) or layer for layer in decoder.layers)
        self.num_layers = decoder.num_layers
        self.norm = decoder.norm

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal=None,
        memory_is_causal=False,
    ):
        output = tgt
        for layer in self.layers:
            output = layer(
                output,
                memory,
                tgt_mask=tgt_mask,
                memory_mask=memory_mask,
                tgt_key_padding_mask=tgt_key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                tgt_is_causal=tgt_is_causal,
                memory_is_causal=memory_is_causal,
            )
        if self.norm is not None:
            output = self.norm(output)
        return output


class QuantizableTransformer(nn.Module):
    """An nn.Transformer: its encoder over the source, its decoder over the target and the encoder's memory.
    Its own forward() checks shapes in Python, which fx cannot trace; the checks are left out."""

    def __init__(self, transformer: nn.Transformer):
        super().__init__()
        self.encoder = swap_one(transformer.encoder) or transformer.encoder
        self.decoder = swap_one(transformer.decoder) or transformer.decoder
        self.d_model, self.nhead, self.batch_first = (
            transformer.d_model,
            transformer.nhead,
            transformer.batch_first,
        )

    def forward(
        self,
        src,
        tgt,
        src_mask=None,
        tgt_mask=None,
        memory_mask=None,
        src_key_padding_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        src_is_causal=None,
        tgt_is_causal=None,
        memory_is_causal=False,
    ):
        memory = self.encoder(
            src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal
        )
        return self.decoder(
            tgt,
            memory,
            tgt_mask=tgt_mask,
            memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask,
            tgt_is_causal=tgt_is_causal,
            memory_is_causal=memory_is_causal,
        )


# Exact types only: a subclass may override forward(), and its own code is what fx should trace.
SWAPS = {
    nn.TransformerEncoderLayer: QuantizableEncoderLayer,
    nn.TransformerDecoderLayer: QuantizableDecoderLayer,
    nn.TransformerEncoder: QuantizableEncoder,
    nn.TransformerDecoder: QuantizableDecoder,
    nn.Transformer: QuantizableTransformer,
}


def swap_one(module: nn.Module) -> nn.Module | None:
    """The quantizable equivalent of `module` (sharing its Linear and LayerNorm children), or None."""
    kind = SWAPS.get(type(module))
    return kind(module) if kind is not None else None


def swap_transformers(model: nn.Module) -> list[str]:
    """Replace (in place) every nn.Transformer, nn.TransformerEncoder/Decoder and their layers by their
    quantizable equivalents; the paths replaced (the outermost of each). Module names stay those of
    named_modules(): `enc.layers.0.linear1` is still there, its attention gains q_proj/k_proj/v_proj children
    as swap_attention's does."""
    swapped: list[str] = []

    def visit(parent: nn.Module, prefix: str) -> None:
        for name, child in parent.named_children():
            path = f"{prefix}{name}"
            replacement = swap_one(child)
            if replacement is not None:
                setattr(parent, name, replacement)
                swapped.append(path)
            elif not fx_keeps_whole(child, path):  # inside another torch.nn module fx would see none of it
                visit(child, f"{path}.")

    visit(model, "")
    return swapped
