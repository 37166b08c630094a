"""Named locks against a fake store: taken once, re-entered, released at the end."""

from __future__ import annotations

import pytest

from acta_sqla import LockUnavailable
from acta_sqla.worker.inflight import Registry
from acta_sqla.worker.locks import Locker

from .fakes import FakeClock, job


class LockTable:
    def __init__(self) -> None:
        self.holders: dict[str, tuple[int, int]] = {}
        self.calls: list[str] = []

    async def take_lock(self, name: str, job_id: int, execution_id: int) -> bool:
        self.calls.append(f"take {name}")
        holder = self.holders.setdefault(name, (job_id, execution_id))
        return holder == (job_id, execution_id)

    async def release_lock(self, name: str, job_id: int, execution_id: int) -> None:
        self.calls.append(f"release {name}")
        if self.holders.get(name) == (job_id, execution_id):
            del self.holders[name]


async def test_a_lock_is_taken_once_reentered_and_released_when_the_outer_block_ends() -> None:
    table = LockTable()
    entry = Registry().add(job(1), 1e9)
    locker = Locker(table, entry, FakeClock())
    async with locker.hold("acct", wait=0):
        assert entry.locks == {"acct": 1}
        async with locker.hold("acct", wait=0):
            assert entry.locks == {"acct": 2}
        assert table.holders == {"acct": (1, 1001)}
    assert entry.locks == {}
    assert table.holders == {}
    assert table.calls == ["take acct", "release acct"]


async def test_a_lock_held_elsewhere_raises_after_waiting() -> None:
    table = LockTable()
    table.holders["acct"] = (99, 99)
    clock = FakeClock()
    entry = Registry().add(job(1), 1e9)
    with pytest.raises(LockUnavailable) as raised:
        async with Locker(table, entry, clock).hold("acct", wait=1.0):
            pass
    assert raised.value.after == 1.0 and "acct" in str(raised.value)
    assert 0.99 <= sum(clock.sleeps) <= 1.01  # waited with back-off, then gave up
    assert entry.locks == {}


async def test_a_lock_is_released_when_the_handler_fails() -> None:
    table = LockTable()
    entry = Registry().add(job(1), 1e9)
    with pytest.raises(RuntimeError):
        async with Locker(table, entry, FakeClock()).hold("acct", wait=0):
            raise RuntimeError("boom")
    assert table.holders == {} and entry.locks == {}
