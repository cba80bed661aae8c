"""Pool: warm acquire, reset between users, replacement of dead sandboxes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from agentgym.sandboxes import Pool

from agentgym import sandboxes
from tests.sandboxes.conftest import IMAGE, SMALL


@pytest.fixture
def pool(backend: str) -> Iterator[Pool]:
    with Pool(IMAGE, size=1, limits=SMALL, backend=backend) as p:
        yield p


def test_warm_pool_is_ready(pool: Pool) -> None:
    assert pool.live == 1 and pool.idle == 1
    with pool.lease() as sb:
        assert sb.exec("echo hi").stdout == "hi\n"


def test_reset_leaves_nothing_of_the_previous_user(pool: Pool) -> None:
    first = pool.acquire()
    first.exec("echo secret > /work/notes && mkdir -p /work/d && touch /work/d/.hidden /tmp/cache && sleep 600 &")
    first.write_files({"answer.txt": "42"})
    pool.release(first)
    second = pool.acquire(timeout=60)
    assert second is first  # size 1: the same sandbox, reset
    assert second.exec("find /work /tmp -mindepth 1").stdout == ""
    assert "sleep 600" not in second.exec("ps -eo args").stdout
    pool.release(second)
    assert pool.stats.resets >= 1


def test_dead_sandbox_is_replaced(pool: Pool) -> None:
    sb = pool.acquire()
    assert sb.exec("kill -9 $PPID").sandbox_died
    pool.release(sb)
    fresh = pool.acquire(timeout=60)
    assert fresh is not sb and fresh.exec("echo new").stdout == "new\n"
    assert pool.stats.replaced == 1 and pool.live == 1
    pool.release(fresh)


def test_acquire_waits_then_times_out(pool: Pool) -> None:
    held = pool.acquire()
    with pytest.raises(TimeoutError, match="pool size 1"):
        pool.acquire(timeout=0.5)
    pool.release(held)
    pool.release(pool.acquire(timeout=60))


def test_release_of_a_foreign_sandbox_is_refused(pool: Pool, backend: str) -> None:
    with sandboxes.open(IMAGE, backend=backend, limits=SMALL) as stranger:
        with pytest.raises(ValueError, match="does not belong"):
            pool.release(stranger)


def test_closed_pool_stops_everything(backend: str) -> None:
    pool = Pool(IMAGE, size=2, limits=SMALL, backend=backend)
    leased = pool.acquire()
    pool.close()
    assert not leased.alive
    with pytest.raises(sandboxes.SandboxClosed):
        pool.acquire()
