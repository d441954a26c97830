from __future__ import annotations

from snapshot_cli.readers.autotune import ParallelismTuner, PrefetchTuner


def simulate(tuner: ParallelismTuner, rate_of: dict[int, float], windows: int) -> list[int]:
    settings = []
    for _ in range(windows):
        settings.append(tuner.current)
        tuner.observe(rate_of[tuner.current])
    return settings


def test_climbs_to_the_fastest_setting_and_mostly_stays() -> None:
    rate = {1: 1.0, 2: 1.8, 3: 2.5, 4: 2.9, 5: 2.95, 6: 2.7, 7: 2.5, 8: 2.4}
    settings = simulate(ParallelismTuner(start=2, low=1, high=8), rate, 80)
    assert settings[0] == 2
    assert 4 in settings[:12]  # reached the knee quickly
    tail = settings[40:]
    assert tail.count(4) + tail.count(5) >= 0.8 * len(tail)  # explores rarely once settled


def test_follows_a_machine_that_got_slower() -> None:
    tuner = ParallelismTuner(start=4, low=1, high=8)
    simulate(tuner, {n: float(n) for n in range(1, 9)}, 30)
    assert tuner.best == 8
    later = simulate(tuner, {n: 10.0 - n for n in range(1, 9)}, 120)
    assert later[-30:].count(1) + later[-30:].count(2) >= 20


def test_fixed_and_bounds() -> None:
    fixed = ParallelismTuner(start=3, fixed=True)
    assert simulate(fixed, {3: 1.0}, 5) == [3] * 5
    bounded = ParallelismTuner(start=10, low=2, high=4)
    assert bounded.current == 4
    assert set(simulate(bounded, {2: 1.0, 3: 1.0, 4: 1.0}, 30)) <= {2, 3, 4}


def test_prefetch_grows_to_its_cap_only_when_starved() -> None:
    p = PrefetchTuner(start=2, high=5)
    assert [p.consumer_waited() for _ in range(6)] == [3, 4, 5, 5, 5, 5]
    assert PrefetchTuner(start=3, fixed=True).consumer_waited() == 3
