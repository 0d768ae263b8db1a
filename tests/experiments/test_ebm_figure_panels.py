"""The ebm figures' second row without RMBandit (``plot_regret_panels(..., without=...)``)."""

from __future__ import annotations

import matplotlib
import pytest

from hierbandit.experiments import plot_regret_panels
from hierbandit.experiments.ebm import FIGURE_POLICY_NAMES, run_setting, write_results

matplotlib.use("Agg")

import matplotlib.pyplot as plt

RM = ["RMBandit", "RMBandit-global"]


@pytest.fixture(scope="module")
def ds():
    return run_setting("fig1-data-poor", n_seeds=2, horizon=300, policies=FIGURE_POLICY_NAMES)


def _legend(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def _colours(ax):
    return {line.get_label(): line.get_color() for line in ax.get_lines()}


def test_default_is_one_row(ds):
    fig = plot_regret_panels(ds, instance=0)
    assert len(fig.axes) == 2
    assert _legend(fig.axes[0]) == list(FIGURE_POLICY_NAMES)
    plt.close(fig)
    for empty in (None, [], ()):
        fig = plot_regret_panels(ds, instance=0, without=empty)
        assert len(fig.axes) == 2
        plt.close(fig)


def test_second_row_leaves_the_policies_out_and_keeps_colours(ds):
    fig = plot_regret_panels(ds, instance=0, without=RM)
    top_left, _top_right, bottom_left, bottom_right = fig.axes
    kept = [p for p in FIGURE_POLICY_NAMES if p not in RM]
    assert _legend(top_left) == list(FIGURE_POLICY_NAMES)
    assert _legend(bottom_left) == kept and _legend(bottom_right) == kept
    assert "instance 0" in bottom_right.get_title() and "all instances" in bottom_left.get_title()
    for ax in (bottom_left, bottom_right):
        assert "without RMBandit, RMBandit-global" in ax.get_title()
    top = _colours(top_left)
    assert {p: top[p] for p in kept} == _colours(bottom_left) == _colours(bottom_right)
    # the second row has its own y-axis, below the RMBandit curves that set the first one
    rm_top = max(ln.get_ydata().max() for ln in top_left.get_lines() if ln.get_label() in RM)
    assert bottom_left.get_ylim()[1] < rm_top <= top_left.get_ylim()[1]
    # the same curves: the kept policies' lines are drawn from the same data
    for p in kept:
        (a,) = [ln for ln in top_left.get_lines() if ln.get_label() == p]
        (b,) = [ln for ln in bottom_left.get_lines() if ln.get_label() == p]
        assert (a.get_ydata() == b.get_ydata()).all()
    plt.close(fig)


def test_a_policy_in_the_middle_keeps_the_others_colours(ds):
    fig = plot_regret_panels(ds, instance=0, without=["LinTS"])
    top, bottom = fig.axes[0], fig.axes[2]
    assert "LinTS" not in _legend(bottom)
    assert {p: c for p, c in _colours(top).items() if p != "LinTS"} == _colours(bottom)
    plt.close(fig)


def test_bad_without_raises_before_drawing(ds):
    before = plt.get_fignums()
    with pytest.raises(ValueError, match="unknown policies"):
        plot_regret_panels(ds, without=["NoSuchPolicy"])
    with pytest.raises(ValueError, match="no policy"):
        plot_regret_panels(ds, without=list(FIGURE_POLICY_NAMES))
    with pytest.raises(TypeError, match="sequence"):
        plot_regret_panels(ds, without="RMBandit")
    assert plt.get_fignums() == before


def test_write_results_draws_the_second_row_only_with_rmbandit_and_others(ds, tmp_path):
    from matplotlib.image import imread

    def shape(path):
        h, w = imread(path).shape[:2]
        return h / w

    two_rows = shape(write_results(ds, tmp_path, "all")["plot"])
    one_row = shape(write_results(ds.sel(policy=["EbmTS", "LinUCB"]), tmp_path, "no-rm")["plot"])
    only_rm = shape(write_results(ds.sel(policy=RM), tmp_path, "only-rm")["plot"])
    assert two_rows > 0.6 and one_row < 0.5 and only_rm < 0.5
