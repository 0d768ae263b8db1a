"""Logs that ``fit-prior`` and the log reader must refuse (or report) rather than fit quietly.

A text cell in a column of numbers, a CSV header naming a column twice and rewards that do not
vary each end in one clear line on stderr, exit code 2 and no output file; the same data given
to :func:`read_log` / :func:`fit_prior` from Python raise a ValueError or TypeError that names
the column (and, for a bad cell, its row and value).
"""

from __future__ import annotations

import gzip

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from hierbandit import load_prior
from hierbandit.bayes import fit_prior
from hierbandit.cli.main import app
from hierbandit.data import read_log

# These logs are read with inferred features on purpose (the refusals and notes of inference):
# the warning that inference issues is tested in test_log.py and, for the command, below.
pytestmark = pytest.mark.filterwarnings("ignore:features not given:UserWarning")

N_ROWS = 60
BAD_ROW = 7  # position (0-based, header not counted) of the injected text cell


@pytest.fixture
def frame() -> pd.DataFrame:
    """6 users × 2 arms, an intercept, a numeric feature ``age`` and a text column ``note``."""
    g = np.random.default_rng(3)
    return pd.DataFrame(
        {
            "user": np.arange(N_ROWS) % 6,
            "arm": (np.arange(N_ROWS) // 6) % 2,
            "reward": g.normal(size=N_ROWS),
            "intercept": 1.0,
            "age": g.normal(size=N_ROWS),
            "note": g.choice(["a", "bb", "ccc"], size=N_ROWS),
        }
    )


def _with_text_cell(frame: pd.DataFrame, column: str, value: str = "oops") -> pd.DataFrame:
    df = frame.copy()
    df[column] = df[column].astype(object)
    df.loc[BAD_ROW, column] = value
    return df


def _fit_cli(path, out, *args: str):
    return CliRunner().invoke(
        app, ["fit-prior", str(path), "--instance", "user", *args, "--out", str(out)]
    )


def _assert_refused(res, out, *fragments: str) -> str:
    """Exit code 2, one line on stderr holding every fragment, no traceback, nothing written."""
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    line = lines[0]
    assert line.startswith("Error: ")
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    assert not out.exists()
    return line


# ---------------------------------------------------------------------- a text cell


@pytest.mark.parametrize("explicit", [False, True], ids=["inferred", "explicit"])
def test_cli_text_cell_in_a_feature_is_refused(frame, tmp_path, explicit):
    path = tmp_path / "oops.csv"
    _with_text_cell(frame, "age").to_csv(path, index=False)
    out = tmp_path / "p.nc"
    args = ["--feature", "intercept", "--feature", "age"] if explicit else []
    res = _fit_cli(path, out, *args)
    _assert_refused(res, out, "'age'", f"row {BAD_ROW} (0-based", "'oops'", "not a number")


@pytest.mark.parametrize(
    ("column", "option"),
    [("reward", "--reward"), ("user", "--instance"), ("arm", "--arm")],
)
def test_cli_text_cell_in_a_named_column_is_refused(frame, tmp_path, column, option):
    path = tmp_path / "oops.csv"
    _with_text_cell(frame, column, "n/a?").to_csv(path, index=False)
    out = tmp_path / "p.nc"
    res = _fit_cli(path, out, option, column)
    _assert_refused(res, out, f"column {column!r}", f"row {BAD_ROW}", "'n/a?'")


def test_cli_text_column_is_ignored_with_a_note_unless_named(frame, tmp_path):
    path = tmp_path / "log.csv"
    frame.to_csv(path, index=False)
    out = tmp_path / "p.nc"
    res = _fit_cli(path, out)
    assert res.exit_code == 0, res.output
    assert "ignored column 'note' (not numeric: text)" in res.stdout
    # the inferred features, said in the command's terms on stdout (not a Python warning)
    assert (
        "warning: features not given, so every numeric column besides the instance, arm and "
        "reward columns is a feature: ['intercept', 'age']. Name them with --feature"
    ) in res.stdout
    assert "UserWarning" not in res.output and res.stderr == ""
    prior = load_prior(out)
    assert prior.features == ["intercept", "age"]
    assert prior.provenance["data"]["ignored_columns"] == {"note": "text"}

    out2 = tmp_path / "p2.nc"
    res = _fit_cli(path, out2, "--feature", "age", "--feature", "note")
    _assert_refused(res, out2, "'note'", "must be numeric", "text")


# ---------------------------------------------------------------------- duplicated header


def test_cli_duplicated_header_is_refused(frame, tmp_path):
    lines = frame.drop(columns="note").to_csv(index=False).splitlines()
    path = tmp_path / "dup.csv"
    body = [f"{line},{0.1 * i}" for i, line in enumerate(lines[1:])]
    path.write_text("\n".join([lines[0] + ",age", *body]) + "\n")
    out = tmp_path / "p.nc"
    res = _fit_cli(path, out)
    _assert_refused(res, out, "'age'", "more than once", "columns 5, 6")


def test_cli_column_named_like_a_renamed_duplicate_is_accepted(frame, tmp_path):
    path = tmp_path / "log.csv"
    frame.assign(**{"age.1": frame["age"] ** 2}).to_csv(path, index=False)
    out = tmp_path / "p.nc"
    res = _fit_cli(path, out)
    assert res.exit_code == 0, res.output
    assert load_prior(out).features == ["intercept", "age", "age.1"]


def test_duplicated_header_of_a_compressed_csv_is_refused(frame, tmp_path):
    text = frame.rename(columns={"intercept": "age"}).to_csv(index=False)
    path = tmp_path / "dup.csv.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(text)
    with pytest.raises(ValueError, match=r"names 1 column more than once \('age' at columns 4, 5"):
        read_log(path, instance="user")


# ---------------------------------------------------------------------- constant rewards


@pytest.mark.parametrize("method", ["eb", "ml", "mcmc"])
@pytest.mark.parametrize("value", [0.0, 3.5])
def test_cli_constant_rewards_are_refused(frame, tmp_path, method, value):
    path = tmp_path / "const.csv"
    frame.assign(reward=value).to_csv(path, index=False)
    out = tmp_path / "p.nc"
    res = _fit_cli(path, out, "--method", method)
    _assert_refused(
        res, out, "reward column 'reward' is constant", f"every value is {value:g}", "nothing"
    )


# ---------------------------------------------------------------------- Python: read_log


def test_read_log_refuses_a_text_cell_in_a_dataframe(frame):
    df = _with_text_cell(frame, "age")
    for features in (None, ["intercept", "age"]):
        with pytest.raises(TypeError) as info:
            read_log(df, instance="user", features=features)
        msg = str(info.value)
        for fragment in ("'age'", f"row {BAD_ROW}", "'oops'", f"1 of {N_ROWS}"):
            assert fragment in msg, (fragment, msg)


def test_read_log_refuses_numbers_stored_as_objects_when_inferring(frame):
    df = frame.assign(age=frame["age"].astype(object))
    with pytest.raises(TypeError, match="column 'age' holds numbers with dtype object"):
        read_log(df, instance="user")


def test_read_log_records_ignored_columns(frame):
    df = frame.assign(when=pd.Timestamp("2024-01-01"))
    log = read_log(df, instance="user")
    assert log.features == ("intercept", "age")
    assert dict(log.ignored_columns) == {"note": "text", "when": "dtype datetime64[us]"}
    assert log.provenance()["ignored_columns"] == dict(log.ignored_columns)
    assert read_log(df, instance="user", features=["age"]).ignored_columns == ()


def test_read_log_text_only_columns_named_in_the_no_feature_message(frame):
    with pytest.raises(ValueError, match=r"no numeric feature columns.*'note' is text"):
        read_log(frame[["user", "arm", "reward", "note"]], instance="user")


def test_read_log_duplicated_dataframe_columns_and_a_legit_dotted_name(frame):
    dup = pd.concat([frame, frame[["age"]]], axis=1)
    with pytest.raises(ValueError, match=r"duplicate column names: \['age'\]"):
        read_log(dup, instance="user")
    with pytest.raises(ValueError, match="duplicate column names"):
        fit_prior(dup, instance="user")
    log = read_log(frame.assign(**{"age.1": 2.0 * frame["age"]}), instance="user")
    assert log.features == ("intercept", "age", "age.1")


def test_read_log_csv_line_numbers_match_the_reported_row(frame, tmp_path):
    """The reported row is the 0-based data row: line row + 2 of the file."""
    path = tmp_path / "oops.csv"
    _with_text_cell(frame, "age").to_csv(path, index=False)
    with pytest.raises(TypeError, match=f"row {BAD_ROW} "):
        read_log(path, instance="user")
    assert "oops" in path.read_text().splitlines()[BAD_ROW + 1]


# ---------------------------------------------------------------------- Python: fit_prior


@pytest.mark.parametrize("method", ["eb", "ml", "mcmc"])
def test_fit_prior_refuses_constant_rewards(frame, method):
    with pytest.raises(ValueError, match=r"is constant \(every value is 0\): nothing to fit"):
        fit_prior(frame.assign(reward=0.0), instance="user", method=method)


@pytest.mark.parametrize("method", ["eb", "ml", "mcmc"])
def test_fit_prior_refuses_an_arm_with_constant_rewards(frame, method):
    df = frame.copy()
    df.loc[df["arm"] == 1, "reward"] = 0.0
    with pytest.raises(ValueError, match=r"constant within arm 1 \(every value is 0\)"):
        fit_prior(df, instance="user", method=method)


@pytest.mark.parametrize("method", ["eb", "ml", "mcmc"])
def test_fit_prior_refuses_rewards_copied_into_a_feature(frame, method):
    df = frame.assign(copy=lambda d: 2.0 * d["reward"])
    with pytest.raises(ValueError, match="exact linear function of the features"):
        fit_prior(df, instance="user", method=method)


@pytest.mark.parametrize("method", ["eb", "ml", "mcmc"])
def test_fit_prior_refuses_exact_fits_within_instances(frame, method):
    """Every user's rewards are exactly linear in the features, each with its own coefficients:
    σ² would be 0 (type-II ML used to divide by zero on the way there)."""
    g = np.random.default_rng(5)
    beta = g.normal(size=(6, 2))
    X = frame[["intercept", "age"]].to_numpy()
    df = frame.assign(reward=np.einsum("td,td->t", X, beta[frame["user"]]))
    with pytest.raises(ValueError, match="within every instance, an exact linear function"):
        fit_prior(df, instance="user", method=method)


def test_fit_prior_still_fits_varying_rewards(frame):
    prior = fit_prior(frame, instance="user", method="ml")
    assert np.all(prior.sigma2 > 0.1)
    assert prior.provenance["data"]["ignored_columns"] == {"note": "text"}
