"""`Episode`: the one home of "one WARNING when it starts failing, one when it recovers"."""

from __future__ import annotations

import threading

from dramatiq_cron_middleware.leader.reports import Episode


def test_a_fault_is_new_once_until_it_recovers() -> None:
    # Given a healthy episode, when the same fault is seen three times,
    # then only the first is new; recovering ends it once.
    episode: Episode[str] = Episode()
    assert episode.recovered() is None
    assert [episode.failing("unreachable") for _ in range(3)] == [True, False, False]
    assert episode.recovered() == "unreachable"
    assert episode.recovered() is None
    assert episode.failing("unreachable") is True


def test_another_kind_of_fault_is_a_new_one() -> None:
    # Given a failing episode, when the fault changes kind, then that is new
    # (one more WARNING), and recovering names the last kind.
    episode: Episode[str] = Episode()
    assert episode.failing("unreachable") is True
    assert episode.failing("refused:READONLY") is True
    assert episode.failing("refused:READONLY") is False
    assert episode.recovered() == "refused:READONLY"


def test_concurrent_failures_report_one_start() -> None:
    # Given many threads failing at once (the dedup claims of a worker's
    # threads), then exactly one of them sees the start.
    episode: Episode[str] = Episode()
    barrier = threading.Barrier(8)
    starts: list[bool] = []

    def fail() -> None:
        barrier.wait()
        starts.append(episode.failing("unreachable"))

    threads = [threading.Thread(target=fail) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(starts) == [False] * 7 + [True]
