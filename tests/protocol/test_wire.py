"""The wire format: signed multipart frames, raw array buffers and connection files, against hostile input."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.protocol import (
    ConnectionInfo,
    Message,
    ProtocolError,
    Signer,
    array_from_buffer,
    array_to_buffer,
    decode,
    encode,
    named_array,
    new_message,
)
from workbench.protocol.wire import DELIM

KEY = "0123456789abcdef" * 4
SIGNER = Signer(KEY)


def _message(**kw) -> Message:
    return new_message("job_request", {"task": "debug.count", "spec": {"steps": 3}}, session="sess", **kw)


def _signed(json_parts: list[bytes], buffers: list[bytes] = (), identities: list[bytes] = ()) -> list[bytes]:
    """Frames carrying arbitrary JSON parts with a valid signature: reaches the checks after the HMAC."""
    parts = [*json_parts, *buffers]
    return [*identities, DELIM, SIGNER.sign(parts), *parts]


def _valid_json_parts() -> list[bytes]:
    return encode(_message(), SIGNER)[2:6]


# -- round trips -----------------------------------------------------------------------------------


def test_round_trip_with_identities_and_buffers():
    parent = new_message("job_request", {}, session="other")
    msg = _message(
        parent=parent,
        buffers=[b"\x00\x01\x02", b"", bytearray(b"xyz"), memoryview(b"mv")],
        metadata={"origin": "test"},
    )
    identities = [b"router-id-1", b"\x00\xffid"]
    frames = encode(msg, SIGNER, identities)
    assert all(isinstance(f, bytes) for f in frames)
    assert frames[:2] == identities and frames[2] == DELIM

    got_ids, got = decode(frames, SIGNER)
    assert got_ids == identities
    assert got.header == msg.header
    assert got.parent_header == parent.header
    assert got.parent_id == parent.msg_id
    assert got.content == msg.content
    assert got.metadata == {"origin": "test"}
    assert got.buffers == [b"\x00\x01\x02", b"", b"xyz", b"mv"]
    assert got.msg_type == "job_request" and got.msg_id == msg.msg_id


def test_round_trip_without_identities_accepts_zmq_style_frames():
    frames = encode(_message(), SIGNER)
    ids, got = decode([memoryview(f) for f in frames], SIGNER)  # zmq may hand back buffer objects
    assert ids == [] and got.content["spec"] == {"steps": 3}


def test_encode_refuses_nan_and_unserialisable_content():
    with pytest.raises(ProtocolError, match="metrics"):
        encode(new_message("metrics", {"v": float("nan")}, session="s"), SIGNER)
    with pytest.raises(ProtocolError, match="not JSON serialisable"):
        encode(new_message("metrics", {"v": object()}, session="s"), SIGNER)


def test_encode_converts_numpy_scalars_and_paths(tmp_path):
    msg = new_message("artifact", {"n": np.int64(7), "x": np.float32(0.5), "path": tmp_path}, session="s")
    _, got = decode(encode(msg, SIGNER), SIGNER)
    assert got.content == {"n": 7, "x": 0.5, "path": str(tmp_path)}


def test_empty_key_is_refused():
    with pytest.raises(ValueError, match="empty"):
        Signer("")


ARRAYS = [
    np.array(3.5, dtype=np.float64),  # 0-d: must stay 0-d (np.ascontiguousarray would make it 1-d)
    np.array(True),
    np.arange(6, dtype=np.float32).reshape(2, 3)[:, 1],  # a non-contiguous column view
    np.zeros((0,), dtype=np.float32),  # empty
    np.zeros((3, 0, 2), dtype=np.int16),
    np.arange(12, dtype=np.uint8).reshape(3, 4),
    np.arange(24, dtype=np.int64).reshape(2, 3, 4) - 10,
    np.linspace(-1, 1, 7, dtype=np.float16),
    np.array([1, -2, 3], dtype=">i4"),  # big-endian must keep its byte order
    np.arange(20, dtype=np.float32).reshape(4, 5).T,  # non-contiguous
    np.arange(10, dtype=np.uint32)[::3],
    np.array([[True, False], [False, True]]),
]


@pytest.mark.parametrize("arr", ARRAYS, ids=lambda a: f"{a.dtype.str}{list(a.shape)}")
def test_array_round_trip_through_a_message(arr):
    buffers: list[bytes] = []
    desc = array_to_buffer(arr, buffers)
    json.dumps(desc)  # the descriptor is plain JSON
    msg = new_message("array", {"name": "a", "array": desc}, session="s", buffers=buffers)
    _, got = decode(encode(msg, SIGNER), SIGNER)
    back = array_from_buffer(got.content["array"], got.buffers)
    assert back.shape == arr.shape
    assert back.dtype == arr.dtype
    np.testing.assert_array_equal(back, arr)


def test_several_arrays_share_one_buffer_list():
    buffers: list[bytes] = []
    a = array_to_buffer(np.arange(3, dtype=np.int8), buffers)
    b = array_to_buffer(np.ones((2, 2), dtype=np.float64), buffers)
    assert (a["buffer"], b["buffer"]) == (0, 1)
    np.testing.assert_array_equal(array_from_buffer(b, buffers), np.ones((2, 2)))
    np.testing.assert_array_equal(array_from_buffer(a, buffers), [0, 1, 2])


def test_named_array_gives_name_array_and_metadata_and_none_for_a_malformed_message():
    buffers: list[bytes] = []
    content = {
        "name": "quant/hist",
        "array": array_to_buffer(np.arange(4, dtype=np.float32), buffers),
        "layer": "fc",
    }
    name, array, meta = named_array(content, buffers)
    assert (name, meta) == ("quant/hist", {"layer": "fc"})
    np.testing.assert_array_equal(array, [0, 1, 2, 3])
    assert named_array({"name": "x"}, buffers) is None  # no descriptor
    assert named_array({"name": "x", "array": {**content["array"], "buffer": 5}}, buffers) is None
    assert named_array(None, []) is None


@pytest.mark.parametrize(
    "arr", [np.array([object()]), np.array(["text"]), np.array([1 + 2j])], ids=["object", "str", "complex"]
)
def test_array_to_buffer_refuses_non_numeric(arr):
    with pytest.raises(TypeError, match="cannot travel"):
        array_to_buffer(arr, [])


# -- connection files -------------------------------------------------------------------------------


def test_connection_file_is_private_and_round_trips(tmp_path):
    info = ConnectionInfo.new()
    info.shell_port, info.control_port, info.iopub_port, info.pid = 5001, 5002, 5003, 42
    path = tmp_path / "sub" / "conn.json"
    info.write(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert ConnectionInfo.read(path) == info
    assert [p.name for p in path.parent.iterdir()] == ["conn.json"]  # no temp file left behind
    assert info.bound and info.url("control") == "tcp://127.0.0.1:5002"

    # Rewriting (as the worker does with its ports) keeps the mode, even over a world-readable file.
    os.chmod(path, 0o644)
    info.shell_port = 6001
    info.write(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert ConnectionInfo.read(path).shell_port == 6001


def test_new_connection_has_a_fresh_key_and_no_ports():
    a, b = ConnectionInfo.new(), ConnectionInfo.new()
    assert a.key != b.key and len(a.key) >= 32
    assert not a.bound and a.ip == "127.0.0.1"


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '{"ip": "127.0.0.1"}'])
def test_reading_a_bad_connection_file_says_so(tmp_path, text):
    path = tmp_path / "conn.json"
    path.write_text(text)
    with pytest.raises(ValueError, match="not a worker connection file"):
        ConnectionInfo.read(path)


def test_reading_a_missing_connection_file_says_so(tmp_path):
    with pytest.raises(ValueError, match="no such connection file"):
        ConnectionInfo.read(tmp_path / "absent.json")


# -- decode rejects ---------------------------------------------------------------------------------


def test_decode_rejects_wrong_key():
    frames = encode(_message(), Signer("another key"))
    with pytest.raises(ProtocolError, match="signature"):
        decode(frames, SIGNER)


def test_decode_rejects_missing_delimiter():
    frames = encode(_message(), SIGNER, [b"id"])
    frames.remove(DELIM)
    with pytest.raises(ProtocolError, match="delimiter"):
        decode(frames, SIGNER)
    with pytest.raises(ProtocolError, match="delimiter"):
        decode([], SIGNER)


@pytest.mark.parametrize("keep", [0, 1, 2, 4])
def test_decode_rejects_truncated_frames(keep):
    frames = encode(_message(), SIGNER)
    with pytest.raises(ProtocolError, match="truncated"):
        decode(frames[: 1 + keep], SIGNER)  # DELIM plus fewer than 5 parts


def test_decode_rejects_a_dropped_buffer():
    frames = encode(_message(buffers=[b"a", b"b"]), SIGNER)
    with pytest.raises(ProtocolError, match="signature"):
        decode(frames[:-1], SIGNER)


@pytest.mark.parametrize("header", [b"not json", b"\xff\xfe\x00", b'{"msg_id": ', b""])
def test_decode_rejects_non_json_header(header):
    parts = _valid_json_parts()
    parts[0] = header
    with pytest.raises(ProtocolError, match="header frame is not valid JSON"):
        decode(_signed(parts), SIGNER)


@pytest.mark.parametrize("index,name", [(0, "header"), (1, "parent header"), (2, "metadata"), (3, "content")])
@pytest.mark.parametrize("payload", [b"[1, 2]", b'"text"', b"3", b"null"])
def test_decode_rejects_json_that_is_not_an_object(index, name, payload):
    parts = _valid_json_parts()
    parts[index] = payload
    with pytest.raises(ProtocolError, match=f"{name} frame must be a JSON object"):
        decode(_signed(parts), SIGNER)


def test_decode_rejects_header_missing_fields():
    parts = _valid_json_parts()
    header = json.loads(parts[0])
    del header["session"], header["date"]
    header["msg_type"] = 5  # present but not a string
    parts[0] = json.dumps(header).encode()
    with pytest.raises(ProtocolError, match="msg_type, session, date"):
        decode(_signed(parts), SIGNER)
    parts[0] = b"{}"
    with pytest.raises(ProtocolError, match="msg_id, msg_type, session, date, version"):
        decode(_signed(parts), SIGNER)


def test_decode_rejects_an_oversized_json_frame(monkeypatch):
    import workbench.protocol.wire as wire

    parts = _valid_json_parts()  # before the limit drops: encode refuses what decode would
    monkeypatch.setattr(wire, "MAX_JSON_FRAME", 64)
    parts[3] = json.dumps({"pad": "x" * 100}).encode()
    with pytest.raises(ProtocolError, match="over the 64 byte limit"):
        decode(_signed(parts), SIGNER)


@pytest.mark.parametrize("index", [0, 3])
def test_decode_rejects_deeply_nested_json_with_protocol_error(index):
    parts = _valid_json_parts()
    parts[index] = b"[" * 200_000 + b"]" * 200_000  # json.loads would raise RecursionError
    with pytest.raises(ProtocolError, match="too deeply"):
        decode(_signed(parts), SIGNER)
    parts[index] = b'{"a":' * 200_000 + b"1" + b"}" * 200_000
    with pytest.raises(ProtocolError, match="too deeply"):
        decode(_signed(parts), SIGNER)


def test_decode_rejects_tampered_buffer_and_content():
    frames = encode(_message(buffers=[b"\x00" * 16]), SIGNER)
    tampered = list(frames)
    tampered[-1] = b"\x00" * 15 + b"\x01"
    with pytest.raises(ProtocolError, match="signature"):
        decode(tampered, SIGNER)
    tampered = list(frames)
    tampered[5] = tampered[5].replace(b"debug.count", b"debug.crash")
    with pytest.raises(ProtocolError, match="signature"):
        decode(tampered, SIGNER)
    tampered = list(frames)
    tampered.append(b"extra buffer")
    with pytest.raises(ProtocolError, match="signature"):
        decode(tampered, SIGNER)


def test_signature_covers_frame_boundaries_only_as_documented():
    # Moving bytes between the header and the parent header keeps the concatenation: the JSON checks
    # must still refuse the result (neither piece is a JSON object any more).
    frames = encode(_message(), SIGNER)
    header, parent = frames[2], frames[3]
    moved = [frames[0], frames[1], header[:-1], header[-1:] + parent, *frames[4:]]
    with pytest.raises(ProtocolError):
        decode(moved, SIGNER)


# -- array_from_buffer rejects ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["|O", "O", "V8", "<U4", "|S3", "<c16", "M8[s]"])
def test_array_from_buffer_rejects_non_numeric_dtypes(dtype):
    with pytest.raises(ProtocolError, match="not allowed"):
        array_from_buffer({"dtype": dtype, "shape": [1], "buffer": 0}, [b"\x00" * 64])


@pytest.mark.parametrize("shape,size", [([2, 2], 15), ([2, 2], 17), ([], 0), ([0], 4), ([3], 0)])
def test_array_from_buffer_rejects_size_mismatch(shape, size):
    with pytest.raises(ProtocolError, match="bytes"):
        array_from_buffer({"dtype": "<f4", "shape": shape, "buffer": 0}, [b"\x00" * size])


@pytest.mark.parametrize("index", [1, 5, -1, -2])
def test_array_from_buffer_rejects_bad_buffer_index(index):
    with pytest.raises(ProtocolError, match="refers to buffer"):
        array_from_buffer({"dtype": "<f4", "shape": [1], "buffer": index}, [b"\x00" * 4])


@pytest.mark.parametrize(
    "desc",
    [
        {"shape": [1], "buffer": 0},
        {"dtype": "<f4", "buffer": 0},
        {"dtype": "<f4", "shape": [1]},
        {"dtype": "not-a-dtype", "shape": [1], "buffer": 0},
        {"dtype": "<f4", "shape": "ab", "buffer": 0},
        {"dtype": "<f4", "shape": 3, "buffer": 0},
        {"dtype": "<f4", "shape": [1], "buffer": "zero"},
        {"dtype": "<f4", "shape": [1], "buffer": None},
        "not a dict",
    ],
)
def test_array_from_buffer_rejects_malformed_descriptors(desc):
    with pytest.raises(ProtocolError):
        array_from_buffer(desc, [b"\x00" * 4])


def test_array_from_buffer_rejects_negative_dimensions():
    with pytest.raises(ProtocolError, match="negative"):
        array_from_buffer({"dtype": "<f4", "shape": [-1, -4], "buffer": 0}, [b"\x00" * 16])


# -- fuzz -----------------------------------------------------------------------------------------


def _decode_or_protocol_error(frames: list[bytes]) -> Message | None:
    try:
        ids, msg = decode(frames, SIGNER)
    except ProtocolError as exc:
        assert str(exc)  # always says what was wrong
        return None
    assert isinstance(msg, Message) and isinstance(ids, list)
    return msg


_FRAME = st.one_of(
    st.binary(max_size=80),
    st.just(DELIM),
    st.sampled_from([b"{}", b"[]", b"null", b'{"msg_id": "x"}', b"\xff" * 64, b"0" * 64]),
    st.text(max_size=40).map(str.encode),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_FRAME, max_size=12))
def test_fuzz_arbitrary_frames_decode_or_raise_protocol_error(frames):
    _decode_or_protocol_error(frames)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_single_byte_corruptions_of_a_valid_message(data):
    msg = _message(buffers=[b"\x01\x02\x03\x04", bytes(range(32))])
    identities = [b"peer"]
    frames = encode(msg, SIGNER, identities)
    index = data.draw(st.integers(0, len(frames) - 1), label="frame")
    frame = frames[index]
    if not frame:
        return
    pos = data.draw(st.integers(0, len(frame) - 1), label="byte")
    flip = data.draw(st.integers(1, 255), label="xor")
    corrupted = list(frames)
    corrupted[index] = frame[:pos] + bytes([frame[pos] ^ flip]) + frame[pos + 1 :]
    got = _decode_or_protocol_error(corrupted)
    if index == 0:  # routing identities are not signed: only they may change and still decode
        assert got is not None and got.content == msg.content
    else:
        assert got is None


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_fuzz_dropped_duplicated_or_reordered_frames(data):
    frames = encode(_message(buffers=[b"buf"]), SIGNER, [b"peer"])
    op = data.draw(st.sampled_from(["drop", "duplicate", "swap"]))
    i = data.draw(st.integers(1, len(frames) - 1))
    changed = list(frames)
    if op == "drop":
        del changed[i]
    elif op == "duplicate":
        changed.insert(i, changed[i])
    else:
        j = data.draw(st.integers(1, len(frames) - 1).filter(lambda j: frames[j] != frames[i]))
        changed[i], changed[j] = changed[j], changed[i]
    assert _decode_or_protocol_error(changed) is None


def test_zero_d_descriptor_is_accepted_on_the_way_in():
    back = array_from_buffer({"dtype": "<f8", "shape": [], "buffer": 0}, [np.float64(2.5).tobytes()])
    assert back.shape == () and back == 2.5


# -- frame caps: refused by the sender, where it can still say why ------------------------------------


def test_encode_refuses_a_buffer_over_the_receivers_frame_cap():
    at_cap = encode(_message(buffers=[b"x" * 1000]), SIGNER, max_frame=1000)
    assert decode(at_cap, SIGNER)[1].buffers == [b"x" * 1000]
    with pytest.raises(ProtocolError, match="a buffer of 1,001 bytes is over the 1,000 byte frame limit"):
        encode(_message(buffers=[b"x" * 1001]), SIGNER, max_frame=1000)


def test_encode_refuses_a_json_part_the_receiver_would_refuse(monkeypatch):
    import workbench.protocol.wire as wire

    monkeypatch.setattr(wire, "MAX_JSON_FRAME", 200)
    with pytest.raises(ProtocolError, match="cannot send 'job_request': a JSON part of .* over the 200 byte"):
        encode(new_message("job_request", {"pad": "x" * 300}, session="s"), SIGNER)
