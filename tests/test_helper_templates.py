"""The code NM244 writes into a file in place of torch_xla's test helpers behaves as torch_xla's did: the progress
line `test_utils.print_training_update` printed, the scalars it wrote, and `xm.RateTracker`'s rates (the numbers
below are worked out by hand from torch_xla 2.9's test_utils.py and xla_model.py)."""

import types

import pytest

from neuron_migrate.rules.misc import RATE_TRACKER_CLASS, TRAINING_UPDATE_HELPER


class Clock:
    """A `time` module whose clock the test moves."""

    def __init__(self, now=100.0):
        self.now = now

    def time(self):
        return self.now

    def strftime(self, fmt):
        assert fmt == "%H:%M:%S"
        return "12:00:00"


class Writer:
    def __init__(self):
        self.scalars = []

    def add_scalar(self, *args):
        self.scalars.append(args)


def load(template, **names):
    clock = Clock()
    namespace = {"clock": clock}
    exec(template.format(clock="clock", **names), namespace)
    return types.SimpleNamespace(clock=clock, **{k: namespace[v] for k, v in names.items()})


@pytest.mark.parametrize("epoch, shown", [(None, ""), (0, " Epoch=0"), (3, " Epoch=3")])
def test_progress_line_is_torch_xlas(capsys, epoch, shown):
    helper = load(TRAINING_UPDATE_HELPER, update="update").update
    writer = Writer()
    helper("neuron:0", 7, 0.123456, 12.345, 6.789, epoch=epoch, summary_writer=writer)
    assert capsys.readouterr().out == (
        f"| Training Device=neuron:0{shown} Step=7 Loss=0.12346 Rate=12.35 GlobalRate=6.79 Time=12:00:00\n")
    # torch_xla wrote both rates through write_to_summary, without a step
    assert writer.scalars == [("examples/sec", 12.345), ("average_examples/sec", 6.789)]
    helper("neuron:0", 7, 0.5, 1.0, 2.0)  # no writer: only the line
    assert capsys.readouterr().out.startswith("| Training Device=neuron:0 Step=7 Loss=0.50000 ")


def test_rate_tracker_smooths_like_torch_xla():
    loaded = load(RATE_TRACKER_CLASS, name="RateTracker")
    clock, tracker = loaded.clock, loaded.name()
    tracker.add(10)
    clock.now = 102.0
    assert tracker.rate() == 5.0  # 10 items in 2 s, nothing to smooth with yet
    tracker.add(30)
    clock.now = 104.0
    assert tracker.rate() == pytest.approx(0.6 * 15 + 0.4 * 5)  # smoothed with the previous rate
    assert tracker.rate() == 0.0  # no time has passed: 0, and the state is kept
    assert tracker.global_rate() == 10.0  # 40 items since the start, 4 s ago
    tracker.add(5)
    clock.now = 105.0
    assert tracker.global_rate() == 9.0  # items not yet rated count too
    assert loaded.name(smooth_factor=0.0).smooth_factor == 0.0  # a given factor is kept, 0 included


def test_rate_tracker_global_rate_at_its_start_is_zero():
    loaded = load(RATE_TRACKER_CLASS, name="RateTracker")
    tracker = loaded.name()
    tracker.add(3)
    assert tracker.global_rate() == 0.0 and tracker.rate() == 0.0
