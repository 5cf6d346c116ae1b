"""The interleaved benchmark rounds (bench/benchlib.py) on a fake clock: sides of known cost on a machine whose speed
drops during a burst of other work. Per-round ratios recover the true ratio where one run per side does not, the
medians and ranges are what the rounds say, and a round the burst falls into is flagged busy."""
import pytest

from benchlib import SideRun, format_summary, run_interleaved, step_seconds, summarize


class FakeMachine:
    """A clock that advances by each step's work times the machine's slowdown at that moment: `slow` × inside the
    time windows of `bursts` ((start, end) seconds), 1 elsewhere."""

    def __init__(self, bursts=(), slow=2.0):
        self.now, self.bursts, self.slow = 0.0, bursts, slow

    def step(self, work):
        t0 = self.now
        factor = self.slow if any(a <= t0 < b for a, b in self.bursts) else 1.0
        self.now += work * factor
        return self.now - t0

    def side(self, work, steps=4, tokens=1000):
        return lambda: SideRun([self.step(work) for _ in range(steps)], tokens)


def test_rounds_run_the_sides_in_turn():
    order = []
    sides = {n: (lambda n=n: order.append(n) or SideRun([1.0, 1.0], 10)) for n in "ABC"}
    rounds = run_interleaved(sides, 3)
    assert order == list("ABCABCABC") and len(rounds) == 3 and list(rounds[0]) == list("ABC")


def test_a_quiet_machine_gives_the_true_ratio_and_no_busy_round():
    m = FakeMachine()
    s = summarize(run_interleaved({"fast": m.side(1.0), "slow": m.side(2.0)}, 5), [("fast", "slow")])
    assert s.sides["fast"] == pytest.approx((1000.0, 1000.0, 1000.0))
    assert s.sides["slow"] == pytest.approx((500.0, 500.0, 500.0))
    assert s.ratios[("fast", "slow")] == pytest.approx((2.0, 2.0, 2.0))
    assert s.busy_rounds == [] and s.spreads == pytest.approx([1.0] * 5)


def test_a_burst_inside_one_round_is_flagged_and_the_median_ratio_holds():
    # Each round takes 4·1 + 4·2 = 12 s; the burst (3× slower) covers the last two steps of round 2's fast side,
    # so that round's ratio is off and its fast run swings step to step.
    m = FakeMachine(bursts=[(14.0, 20.0)], slow=3.0)
    s = summarize(run_interleaved({"fast": m.side(1.0), "slow": m.side(2.0)}, 5), [("fast", "slow")])
    med, lo, hi = s.ratios[("fast", "slow")]
    assert (med, lo, hi) == pytest.approx((2.0, 1.0, 2.0))
    assert s.busy_rounds == [1]
    assert s.spreads[1] == pytest.approx(3.0)
    # Medians over rounds ignore the one slow round; the range shows it.
    assert s.sides["fast"][0] == pytest.approx(1000.0) and s.sides["fast"][1] < 1000.0


def test_interleaving_cancels_a_slow_phase_that_one_run_per_side_turns_into_a_false_ratio():
    # The machine is 2× slower during the first 40 s (another job finishing). One long run per side puts all of it
    # on the first side; interleaved short rounds share it, and the per-round ratio stays at the truth.
    sequential = FakeMachine(bursts=[(0.0, 40.0)])
    a = sequential.side(1.0, steps=20)()
    b = sequential.side(1.0, steps=20)()
    assert a.tokens_per_s / b.tokens_per_s == pytest.approx(0.5)

    m = FakeMachine(bursts=[(0.0, 40.0)])
    s = summarize(run_interleaved({"a": m.side(1.0, steps=2), "b": m.side(1.0, steps=2)}, 25), [("a", "b")])
    assert s.ratios[("a", "b")][0] == pytest.approx(1.0)


def test_a_steady_slowdown_of_whole_rounds_is_not_busy_but_shows_in_the_range():
    # Round 2 runs 2× slower throughout (every step alike): no swing inside a run, so not flagged; the
    # ratio is unaffected and the side's range shows the slow rounds.
    m = FakeMachine(bursts=[(6.0, 18.0)])
    s = summarize(run_interleaved({"a": m.side(1.0, steps=3), "b": m.side(1.0, steps=3)}, 5), [("a", "b")])
    assert s.ratios[("a", "b")] == pytest.approx((1.0, 1.0, 1.0))
    assert s.busy_rounds == []
    assert s.sides["a"] == pytest.approx((1000.0, 500.0, 1000.0))


def test_the_report_names_medians_ranges_and_busy_rounds():
    m = FakeMachine(bursts=[(14.0, 20.0)], slow=3.0)
    s = summarize(run_interleaved({"fast": m.side(1.0), "slow": m.side(2.0)}, 3), [("fast", "slow")])
    text = format_summary(s)
    assert "| fast | 1000 | 500–1000 |" in text
    assert "| fast / slow | 2.00× |" in text
    assert "busy rounds: 2" in text


def test_step_seconds_from_a_training_log():
    log = [{"step": s, "elapsed_s": e, "tokens": 10 * s} for s, e in [(1, 5.0), (2, 6.0), (3, 7.5), (4, 8.0)]]
    log.insert(2, {"step": 2, "val_loss": 1.0})
    assert step_seconds(log, 1, 4) == pytest.approx([1.0, 1.5, 0.5])
