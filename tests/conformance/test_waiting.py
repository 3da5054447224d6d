""":func:`conformance.harness.waiting.consistently`: what must keep holding is checked over the whole
span it must hold, and the first time it does not the test fails at once saying what stopped
holding, when, and what was seen."""

from __future__ import annotations

import pytest

from conformance.harness import waiting
from conformance.harness.waiting import WaitFailed, consistently


class Clock:
    """Stands in for the ``time`` module of :mod:`~conformance.harness.waiting`: a sleep moves it."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(waiting, "time", fake)
    return fake


def test_a_condition_that_holds_is_checked_at_once_every_interval_and_at_the_end(clock: Clock) -> None:
    calls: list[float] = []

    def check() -> bool:
        calls.append(round(clock.now - 100.0, 3))
        return True

    consistently(check, 1.0, "the thing", interval=0.25)
    assert calls == [0.0, 0.25, 0.5, 0.75, 1.0]  # none of the span goes unchecked


def test_a_span_of_zero_checks_once(clock: Clock) -> None:
    calls: list[float] = []

    def check() -> bool:
        calls.append(clock.now)
        return True

    consistently(check, 0, "the thing")
    assert len(calls) == 1


def test_a_condition_that_stops_holding_fails_at_once_naming_what_when_and_what_was_seen(
    clock: Clock,
) -> None:
    answers = iter([True, True, False, True])
    seen: list[str] = []

    def check() -> bool:
        seen.append(f"answer {len(seen)}")
        return next(answers)

    with pytest.raises(WaitFailed) as caught:
        consistently(check, 60, "every CDI device defined", interval=0.5, describe=lambda: seen[-1])
    assert clock.now == 101.0  # the third look, not the 60 s it had to hold
    assert isinstance(caught.value, AssertionError)  # a test failure, not an error
    assert str(caught.value) == (
        "every CDI device defined stopped holding after 1.0 s (of the 60 s it had to hold); seen: answer 2"
    )


def test_a_falsy_answer_of_any_kind_is_a_failure_and_describe_is_optional(clock: Clock) -> None:
    with pytest.raises(
        WaitFailed, match=r"^the list empty stopped holding after 0\.0 s \(of the 0\.5 s it had to hold\)$"
    ):
        consistently(lambda: [], 0.5, "the list empty")
    consistently(lambda: ["x"], 0, "a list")


def test_an_answer_settles_once_it_stays_the_same_long_enough(clock: Clock) -> None:
    """:func:`~conformance.harness.waiting.settled_answer`: a policy enforced after a while; the
    answer counts once it held for ``stable`` seconds; a change starts the count again."""
    answers = iter(["allowed", "allowed", "refused", "refused", "refused", "refused", "refused", "x"])
    asked: list[float] = []

    def value() -> str:
        asked.append(clock.now)
        return next(answers)

    assert waiting.settled_answer(value, 1.5, 30.0) == "refused"
    assert asked == [100.0, 100.5, 101.0, 101.5, 102.0, 102.5]


def test_an_answer_that_never_settles_is_returned_as_it_is_when_the_time_is_up(clock: Clock) -> None:
    flips = iter(range(1000))
    last = waiting.settled_answer(lambda: next(flips), 2.0, 5.0, key=lambda n: n % 2)
    assert last == 10 and clock.now == 105.0
