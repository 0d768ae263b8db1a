"""``hierbandit fit-prior``: its warnings as lines of its output, in the command's terms."""

from __future__ import annotations

import numpy as np
from typer.testing import CliRunner

from hierbandit import load_prior
from hierbandit.cli.main import app
from tests.bayes.test_fit import EB_FEATURES, _rank_deficient_log

FEATURES = [arg for f in EB_FEATURES for arg in ("--feature", f)]


def _fit(path, out, *args: str):
    return CliRunner().invoke(
        app, ["fit-prior", str(path), "--instance", "user", *args, "--out", str(out)]
    )


def test_an_eb_fit_that_falls_back_says_so(tmp_path):
    path = tmp_path / "log.csv"
    _rank_deficient_log().to_csv(path, index=False)
    out = tmp_path / "eb.nc"
    res = _fit(path, out, "--method", "eb", *FEATURES)
    assert res.exit_code == 0, res.output
    text = res.stdout.replace("\n", " ")
    assert "warning: empirical Bayes could not estimate Σ for 2 arms" in text
    assert "arm 10: 0 instances with a full-rank design, 2 needed" in text
    assert "(--method ml) does not need per-instance full-rank designs" in text
    assert "UserWarning" not in res.output
    assert load_prior(out).method == "eb"


def test_the_default_method_is_type2_ml(tmp_path):
    path = tmp_path / "log.csv"
    df = _rank_deficient_log()
    df.to_csv(path, index=False)
    out = tmp_path / "default.nc"
    res = _fit(path, out, *FEATURES)
    assert res.exit_code == 0, res.output
    assert "warning" not in res.stdout  # features named, and ML needs no full-rank designs
    prior = load_prior(out)
    assert prior.method == "ml"
    explicit = tmp_path / "ml.nc"
    assert _fit(path, explicit, "--method", "ml", *FEATURES).exit_code == 0
    again = load_prior(explicit)
    for name in ("Sigma", "sigma2", "shared_mean"):
        np.testing.assert_array_equal(getattr(again, name), getattr(prior, name), err_msg=name)
    help_text = CliRunner().invoke(app, ["fit-prior", "--help"]).output
    assert "<ml|eb|mcmc>" in help_text and "[default: ml]" in help_text
