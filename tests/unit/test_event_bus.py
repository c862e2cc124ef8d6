"""DT-7: the engine's change feed is bounded whatever its readers do (engine/service/events.py)."""

from __future__ import annotations

import threading

import pytest

from engine.service.events import EventBus, NoWaitingSlot


def test_dt7_reader_gets_events_after_its_cursor() -> None:
    bus = EventBus()
    start = bus.read(None, None, 0)
    assert (start.seq, start.events, start.resync) == (0, [], False)
    bus.publish({"type": "item", "id": "aa"})
    bus.publish({"type": "item", "id": "bb"})
    feed = bus.read(start.seq, start.stream, 0)
    assert [e["id"] for e in feed.events] == ["aa", "bb"]
    assert [e["seq"] for e in feed.events] == [1, 2]
    assert bus.read(feed.seq, feed.stream, 0).events == []


def test_dt7_a_reader_behind_the_ring_is_told_to_resync() -> None:
    """A stalled window costs the engine nothing: the ring keeps its size, the reader resyncs."""
    bus = EventBus(size=8)
    start = bus.read(None, None, 0)
    for n in range(50):
        bus.publish({"type": "item", "id": f"{n:02x}"})
    assert len(bus._ring) == 8
    feed = bus.read(start.seq, start.stream, 0)
    assert feed.resync and feed.events == [] and feed.seq == 50
    # From the position the resync gave, it reads normally again.
    bus.publish({"type": "item", "id": "ff"})
    assert [e["id"] for e in bus.read(feed.seq, feed.stream, 0).events] == ["ff"]


def test_dt7_another_engine_process_means_resync() -> None:
    old, new = EventBus(), EventBus()
    old.publish({"type": "x"})
    cursor = old.read(0, None, 0)
    assert new.read(cursor.seq, cursor.stream, 0).resync
    assert new.read(5, new.stream, 0).resync  # a cursor ahead of this engine's feed


def test_dt7_progress_coalesces_while_still_newest() -> None:
    bus = EventBus()
    for done in range(100):
        bus.publish({"type": "job", "job": "search-build", "done": done}, coalesce="job:search-build")
    feed = bus.read(0, None, 0)
    assert [e["done"] for e in feed.events] == [99]
    bus.publish({"type": "item", "id": "aa"})
    bus.publish({"type": "job", "job": "search-build", "done": 100}, coalesce="job:search-build")
    assert [e.get("done") for e in bus.read(feed.seq, None, 0).events] == [None, 100]


def test_dt7_a_waiting_reader_wakes_on_publish_and_on_close() -> None:
    bus = EventBus()
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(bus.read(0, None, 60)))
    reader.start()
    bus.publish({"type": "session", "state": "locked"})
    reader.join(30)
    assert not reader.is_alive() and got[0].events[0]["state"] == "locked"  # type: ignore[attr-defined]
    reader = threading.Thread(target=lambda: got.append(bus.read(1, None, 60)))
    reader.start()
    bus.close()
    reader.join(30)
    assert not reader.is_alive() and got[1].events == []  # type: ignore[attr-defined]


def test_dt7_waiting_slots_are_bounded() -> None:
    bus = EventBus(max_waiters=1)
    reader = threading.Thread(target=lambda: bus.read(0, None, 60))
    reader.start()
    deadline = threading.Event()
    for _ in range(400):  # wait (bounded) until the first reader holds its slot
        if bus._waiters == 1:
            break
        deadline.wait(0.05)
    with pytest.raises(NoWaitingSlot):
        bus.read(0, None, 5)
    assert bus.read(0, None, 0).events == []  # not waiting: always answered
    bus.close()
    reader.join(30)
