"""BOC refuses ``r`` with forced exploration, where it would be silently ignored."""

from __future__ import annotations

import pytest

from hierbandit.boc.explorers import BOC, BOCLE


@pytest.mark.parametrize("r", [0.5, 1.0, 0.0, "a"])
def test_r_with_forced_exploration_is_refused(r):
    with pytest.raises(ValueError, match=r"^r is used only by exploration='linear'"):
        BOC(11, 4, 3, r=r)
    with pytest.raises(ValueError, match=r"^r is used only"):
        BOC(11, 4, 3, exploration="forced", r=r)


def test_r_is_taken_where_it_is_used():
    assert BOC(11, 4, 3, exploration="linear", r=0.5).r == 0.5
    assert BOCLE(11, 4, 3, r=0.5).r == 0.5
    alg = BOC(11, 4, 3)
    assert alg.r is None
    assert alg.clone().r is None and alg.with_confidence(delta=0.1).r is None
