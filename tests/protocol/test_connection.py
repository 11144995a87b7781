"""Connection files refuse weak keys with a message naming the file; which addresses must be encrypted; how
addresses typed by hand become zmq endpoints."""

from __future__ import annotations

import json

import pytest
import zmq

from workbench.protocol import ConnectionInfo
from workbench.protocol.connection import MIN_KEY_CHARS, clean_address, is_loopback


def _write(tmp_path, **fields) -> str:
    path = tmp_path / "conn.json"
    data = {
        "key": "k" * 64,
        "ip": "127.0.0.1",
        "transport": "tcp",
        "shell_port": 0,
        "control_port": 0,
        "iopub_port": 0,
        "pid": 0,
        **fields,
    }
    path.write_text(json.dumps({k: v for k, v in data.items() if v is not ...}))
    return str(path)


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("", "the HMAC key is empty"),
        ("abc", "the HMAC key is 3 characters long; a session key needs at least 32"),
        ("x" * (MIN_KEY_CHARS - 1), f"is {MIN_KEY_CHARS - 1} characters long"),
        ("é" * 40, "non-ASCII"),
        (12345, "must be a string, not int"),
        (None, "must be a string, not NoneType"),
    ],
)
def test_a_weak_or_broken_key_is_refused_naming_the_file_and_the_fix(tmp_path, key, words):
    path = _write(tmp_path, key=key)
    with pytest.raises(ValueError) as caught:
        ConnectionInfo.read(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert words in message
    assert "secrets.token_hex(32)" in message  # how to make a good one


def test_a_file_without_a_key_is_not_a_connection_file(tmp_path):
    path = _write(tmp_path, key=...)
    with pytest.raises(ValueError, match=rf"^{path}: not a worker connection file"):
        ConnectionInfo.read(path)


def test_a_key_of_the_minimum_length_and_a_fresh_one_are_accepted(tmp_path):
    assert ConnectionInfo.read(_write(tmp_path, key="k" * MIN_KEY_CHARS)).key == "k" * MIN_KEY_CHARS
    fresh = ConnectionInfo.new()
    fresh.write(tmp_path / "fresh.json")
    assert ConnectionInfo.read(tmp_path / "fresh.json") == fresh


@pytest.mark.parametrize(
    ("field", "value"),
    [("shell_port", "5555"), ("iopub_port", -1), ("control_port", 70000), ("shell_port", True), ("ip", 127)],
)
def test_ports_and_addresses_of_the_wrong_kind_are_refused(tmp_path, field, value):
    path = _write(tmp_path, **{field: value})
    with pytest.raises(ValueError, match=rf"^{path}: .*{field}"):
        ConnectionInfo.read(path)


def test_a_curve_public_key_round_trips_and_a_mangled_one_is_refused(tmp_path):
    public, _ = zmq.curve_keypair()
    info = ConnectionInfo.new(ip="0.0.0.0")
    info.curve_public_key = public.decode()
    info.write(tmp_path / "c.json")
    assert ConnectionInfo.read(tmp_path / "c.json").curve_public_key == public.decode()
    path = _write(tmp_path, curve_public_key=public.decode()[:-1])
    with pytest.raises(ValueError, match=rf"^{path}: \"curve_public_key\" is not a Curve public key"):
        ConnectionInfo.read(path)


@pytest.mark.parametrize("ip", ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"])
def test_loopback_addresses_keep_hmac_only(ip):
    assert is_loopback(ip)
    assert not ConnectionInfo(key="k" * 64, ip=ip).needs_curve


@pytest.mark.parametrize(
    "ip", ["0.0.0.0", "*", "::", "192.0.2.7", "10.1.2.3", "fe80::1", "eth0", "gpu-box.local", ""]
)
def test_every_other_tcp_address_needs_curve(ip):
    assert not is_loopback(ip)
    assert ConnectionInfo(key="k" * 64, ip=ip).needs_curve


def test_ipc_never_leaves_the_machine():
    assert not ConnectionInfo(key="k" * 64, ip="/run/user/1000/wb", transport="ipc").needs_curve


@pytest.mark.parametrize(
    ("ip", "url"),
    [
        ("127.0.0.1", "tcp://127.0.0.1:5"),
        ("::1", "tcp://[::1]:5"),
        ("[::1]", "tcp://[::1]:5"),
        (" 127.0.0.1 ", "tcp://127.0.0.1:5"),
        ("localhost", "tcp://localhost:5"),
        ("::", "tcp://[::]:5"),
    ],
)
def test_urls_bracket_ipv6_literals_and_drop_stray_spaces(ip, url):
    assert ConnectionInfo(key="k" * 64, ip=ip, shell_port=5).url("shell") == url


@pytest.mark.parametrize(
    ("typed", "clean"),
    [
        ("::1", "::1"),
        ("[::1]", "::1"),
        (" [::1] ", "::1"),
        ("127.0.0.1 ", "127.0.0.1"),
        ("\tlocalhost", "localhost"),
    ],
)
def test_an_address_typed_by_hand_is_cleaned(typed, clean):
    assert clean_address(typed) == clean


@pytest.mark.parametrize(
    ("typed", "words"),
    [
        ("", "is empty"),
        (" ", "is empty"),
        ("[]", "is empty"),
        ("127.0.0.1:80", "looks like host:port"),
        ("127.0.0 .1", "has spaces"),
        ("a\x00b", "control characters"),
    ],
)
def test_an_address_that_cannot_be_listened_on_is_refused_in_words(typed, words):
    with pytest.raises(ValueError, match=words):
        clean_address(typed)


def test_a_connection_password_round_trips_and_a_mangled_one_is_refused(tmp_path):
    info = ConnectionInfo.new()
    info.plain_password = "p" * 64
    info.write(tmp_path / "c.json")
    assert ConnectionInfo.read(tmp_path / "c.json").plain_password == "p" * 64
    for bad in (12, "é" * 10, "p" * 256):
        path = _write(tmp_path, plain_password=bad)
        with pytest.raises(ValueError, match=rf"^{path}: \"plain_password\" is not a connection password"):
            ConnectionInfo.read(path)
