"""engine/crypto/two_cores.py (issue 32): a bulk sign or seal split over two threads gives the
same list, in the same order, as the plain loop, and a failure in either half is raised."""

from __future__ import annotations

import threading

import pytest

from engine.crypto.keys import new_identity, sign, sign_many
from engine.crypto.two_cores import map_in_two_halves


def test_results_keep_their_order_and_the_second_half_runs_on_the_named_thread() -> None:
    seen: dict[int, str] = {}

    def step(i: int, item: str) -> str:
        seen[i] = threading.current_thread().name
        return f"{i}:{item}"

    items = [chr(ord("a") + n % 26) for n in range(101)]
    assert map_in_two_halves(step, items, minimum=10, name="two-cores-test") == [f"{i}:{c}" for i, c in enumerate(items)]
    assert {seen[i] for i in range(50)} == {threading.current_thread().name}
    assert {seen[i] for i in range(50, 101)} == {"two-cores-test"}


def test_below_the_minimum_everything_runs_on_the_calling_thread() -> None:
    names = map_in_two_halves(lambda i, _: threading.current_thread().name, list(range(9)), minimum=10, name="x")
    assert set(names) == {threading.current_thread().name}


@pytest.mark.parametrize("failing", [3, 97])
def test_a_failure_in_either_half_is_raised_after_both_stopped(failing: int) -> None:
    def step(i: int, item: int) -> int:
        if i == failing:
            raise ValueError(f"item {i}")
        return item

    with pytest.raises(ValueError, match=f"item {failing}"):
        map_in_two_halves(step, list(range(100)), minimum=10, name="two-cores-test")
    assert not any(t.name == "two-cores-test" for t in threading.enumerate())


def test_sign_many_equals_signing_one_by_one() -> None:
    identity = new_identity()
    messages = [f"revision {n}".encode() for n in range(200)]
    assert sign_many(identity.device_key, messages) == [sign(identity.device_key, m) for m in messages]
