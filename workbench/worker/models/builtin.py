"""The built-in networks: `mlp` and `cnn`, both sized from the input shape and class count.

Worker side; never imports Qt.
"""

from __future__ import annotations

import math

from torch import nn

from workbench.errors import JobError
from workbench.worker.models.registry import register_model

MLP_HIDDEN = (256, 128)
CNN_WIDTHS = (32, 64, 128)


def _no_weights(name: str, weights: str) -> None:
    if weights:
        raise JobError(
            f"model.weights: {name} has no pretrained weights to download ({weights!r} was asked for); "
            "leave model.weights empty, or pass a trained state_dict as model.checkpoint instead"
        )


def _image_shape(name: str, input_shape: tuple[int, ...]) -> tuple[int, int, int]:
    if len(input_shape) == 2:  # a single-channel image given as height,width
        input_shape = (1, *input_shape)
    if len(input_shape) != 3:
        raise JobError(
            f"model.input_shape: {name} needs channels,height,width (e.g. 1,28,28), "
            f"not {','.join(map(str, input_shape)) or 'nothing'}"
        )
    return input_shape  # type: ignore[return-value]


class MLP(nn.Sequential):
    """Flatten, then two hidden ReLU layers and a linear classifier (the last Linear is the head)."""

    def __init__(self, in_features: int, num_classes: int, hidden: tuple[int, ...] = MLP_HIDDEN):
        layers: list[nn.Module] = [nn.Flatten()]
        width = in_features
        for size in hidden:
            layers += [nn.Linear(width, size), nn.ReLU(inplace=True)]
            width = size
        layers.append(nn.Linear(width, num_classes))
        super().__init__(*layers)


class SmallCNN(nn.Module):
    """Conv-BN-ReLU stages that halve the image while it is at least 8 pixels, then global pooling and a
    Linear.

    Two stages below 16 pixels (8x8 digits), three from there (28x28 MNIST, 32x32 CIFAR); any channel count.
    """

    def __init__(self, in_channels: int, size: tuple[int, int], num_classes: int):
        super().__init__()
        side = min(size)
        widths = CNN_WIDTHS[:2] if side < 16 else CNN_WIDTHS
        layers: list[nn.Module] = []
        channels = in_channels
        for width in widths:
            # No conv bias: the BatchNorm right after it has its own shift.
            layers += [
                nn.Conv2d(channels, width, 3, padding=1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
            ]
            if side >= 8:
                layers.append(nn.MaxPool2d(2))
                side //= 2
            channels = width
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(channels, num_classes)

    def forward(self, x):
        return self.classifier(self.pool(self.features(x)).flatten(1))


@register_model("mlp", description="A two-hidden-layer perceptron over the flattened input.")
def build_mlp(arg: str, *, num_classes: int, input_shape: tuple[int, ...], weights: str, log) -> nn.Module:
    _no_weights("mlp", weights)
    if not input_shape:
        raise JobError("model.input_shape: mlp needs the input shape, e.g. 1,28,28")
    return MLP(math.prod(input_shape), num_classes)


@register_model("cnn", description="A small conv net with BatchNorm, sized from the input shape.")
def build_cnn(arg: str, *, num_classes: int, input_shape: tuple[int, ...], weights: str, log) -> nn.Module:
    _no_weights("cnn", weights)
    channels, height, width = _image_shape("cnn", input_shape)
    return SmallCNN(channels, (height, width), num_classes)
