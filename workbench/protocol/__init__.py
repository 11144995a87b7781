"""The wire protocol between the GUI (or CLI) and the worker: envelopes, signing, arrays, connection files.

Modelled on Jupyter's kernel protocol. No torch, no Qt, and no pickle anywhere: content is JSON and
arrays travel as raw buffers described by {dtype, shape, buffer}.
"""

from workbench.protocol.arrays import array_from_buffer, array_to_buffer, named_array
from workbench.protocol.connection import ConnectionInfo
from workbench.protocol.envelope import PROTOCOL_VERSION, Message, new_message
from workbench.protocol.rejections import RejectionLog
from workbench.protocol.replay import ReplayGuard
from workbench.protocol.wire import ProtocolError, Signer, decode, encode

__all__ = [
    "PROTOCOL_VERSION",
    "ConnectionInfo",
    "Message",
    "ProtocolError",
    "RejectionLog",
    "ReplayGuard",
    "Signer",
    "array_from_buffer",
    "array_to_buffer",
    "decode",
    "encode",
    "named_array",
    "new_message",
]
