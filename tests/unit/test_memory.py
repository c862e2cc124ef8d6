"""gc_paused: the collector pause around unlock and index builds nests and always restores."""

from __future__ import annotations

import gc
import threading

import pytest

from engine.service.memory import gc_paused


def test_pause_nests_across_threads_and_restores() -> None:
    assert gc.isenabled()
    inside = threading.Event()
    release = threading.Event()

    def other() -> None:
        with gc_paused():
            inside.set()
            release.wait(10)

    worker = threading.Thread(target=other)
    with gc_paused():
        assert not gc.isenabled()
        worker.start()
        assert inside.wait(10)
    assert not gc.isenabled()  # the other thread is still inside
    release.set()
    worker.join(10)
    assert gc.isenabled()


def test_pause_restores_after_an_error_and_keeps_a_disabled_collector_disabled() -> None:
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
