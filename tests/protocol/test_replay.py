"""ReplayGuard: a signed message is accepted once, only while its date is near now, in bounded memory."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from workbench.protocol import ProtocolError, ReplayGuard, new_message

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


class Clock:
    def __init__(self):
        self.now = NOW.timestamp()

    def __call__(self) -> float:
        return self.now


def _msg(offset: float = 0.0, date: str | None = None):
    msg = new_message("job_request", {}, session="s")
    msg.header["date"] = date if date is not None else (NOW + timedelta(seconds=offset)).isoformat()
    return msg


def test_a_message_is_accepted_once():
    guard = ReplayGuard(clock=Clock())
    msg = _msg()
    guard.check(msg)
    with pytest.raises(ProtocolError, match=f"replayed message: msg_id {msg.msg_id}"):
        guard.check(msg)
    guard.check(_msg())  # another message of the same moment is fine


@pytest.mark.parametrize(("offset", "words"), [(-301, "behind"), (301, "ahead of"), (-86_400, "behind")])
def test_a_date_outside_the_window_is_refused_naming_the_clock(offset, words):
    guard = ReplayGuard(window=300, clock=Clock())
    with pytest.raises(ProtocolError, match=rf"{offset and abs(offset)} s {words} this machine's clock.*NTP"):
        guard.check(_msg(offset))
    assert len(guard) == 0  # refused messages are not remembered


@pytest.mark.parametrize("offset", [-300, -299.5, 0, 299.5, 300])
def test_dates_inside_the_window_either_way_are_accepted(offset):
    ReplayGuard(window=300, clock=Clock()).check(_msg(offset))


@pytest.mark.parametrize("date", ["yesterday", "", "2026-13-45T00:00:00+00:00", "2026-01-02T03:04:05"])
def test_a_date_that_is_not_an_aware_iso_date_is_refused(date):
    with pytest.raises(ProtocolError, match="header date"):
        ReplayGuard(clock=Clock()).check(_msg(date=date))


def test_other_time_zones_and_z_mean_the_same_instant():
    guard = ReplayGuard(window=300, clock=Clock())
    guard.check(_msg(date=NOW.astimezone(timezone(timedelta(hours=-7))).isoformat()))
    guard.check(_msg(date=NOW.strftime("%Y-%m-%dT%H:%M:%SZ")))


def test_ids_are_forgotten_only_when_their_date_has_left_the_window():
    clock = Clock()
    guard = ReplayGuard(window=300, clock=clock)
    early, late = _msg(-200), _msg(+200)
    guard.check(early)
    guard.check(late)
    clock.now += 150  # early is now 350 s old: forgotten, and its date alone refuses a replay
    with pytest.raises(ProtocolError, match="behind"):
        guard.check(early)
    assert len(guard) == 1
    with pytest.raises(ProtocolError, match="replayed"):
        guard.check(late)  # still inside the window, still remembered
    clock.now += 400
    with pytest.raises(ProtocolError, match="behind"):
        guard.check(late)
    assert len(guard) == 0


def test_memory_is_bounded_and_a_forgotten_id_still_cannot_come_back():
    clock = Clock()
    guard = ReplayGuard(window=300, capacity=100, clock=clock)
    messages = [_msg(offset=-250 + i / 2) for i in range(1000)]  # all inside the window, oldest first
    for msg in messages:
        guard.check(msg)
    assert len(guard) == 100
    # The first 900 were forgotten early (capacity), yet none of them is accepted again...
    for msg in messages[:900]:
        with pytest.raises(ProtocolError, match="possible replay"):
            guard.check(msg)
    # ...the remembered ones are refused as replays, and messages newer than the floor are still accepted.
    for msg in messages[900:]:
        with pytest.raises(ProtocolError, match="replayed"):
            guard.check(msg)
    guard.check(_msg(offset=260))
    assert len(guard) == 100


def test_a_replay_is_caught_even_when_ids_arrive_out_of_date_order():
    guard = ReplayGuard(window=300, capacity=3, clock=Clock())
    msgs = [_msg(offset) for offset in (50, -50, 10, -10, 30)]
    for msg in msgs:
        guard.check(msg)
    for msg in msgs:
        with pytest.raises(ProtocolError):
            guard.check(msg)
