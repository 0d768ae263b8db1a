"""The direct NUTS driver compiles programs that depend on the data's shapes only, and the
on-disk compilation cache is configured as documented."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from hierbandit.bayes.models import collapsed_model
from hierbandit.bayes.sampling import _jaxify_logp_with_data
from hierbandit.data import read_log

from .test_fit import synthetic_log


@pytest.mark.parametrize("algebra", ["batched", "soa"])
def test_compiled_log_density_takes_the_data_as_arguments(algebra):
    """One log's compiled function, given another log's data, is the other log's log density."""
    logs = [
        read_log(synthetic_log(n_instances=4, n_arms=2, n_features=2, rows=rows, seed=seed))
        for rows, seed in ((160, 3), (900, 8))
    ]
    models = [collapsed_model(log, algebra=algebra) for log in logs]
    fn, data0 = _jaxify_logp_with_data(models[0])
    _, data1 = _jaxify_logp_with_data(models[1])
    st0 = logs[0].suffstats()
    wants = (st0.G, st0.b, st0.q, st0.n)
    for want in wants:  # every sufficient statistic is an argument (in graph order)
        assert any(np.array_equal(got, want) for got in data0)
    names = [v.name for v in models[0].value_vars]
    rng = np.random.default_rng(0)
    for model, data in zip(models, (data0, data1), strict=True):
        logp = model.compile_logp()
        for _ in range(3):
            point = {
                k: v + rng.uniform(-0.5, 0.5, np.shape(v)) for k, v in model.initial_point().items()
            }
            got = float(fn(*[point[n] for n in names], *data)[0])
            assert got == pytest.approx(float(logp(point)), rel=1e-10)


def _cache_dir_in_subprocess(env: dict[str, str]) -> str:
    code = "import hierbandit.bayes as b, jax; print(jax.config.jax_compilation_cache_dir)"
    full = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "HIERBANDIT_"))}
    full.update(env)
    out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_compilation_cache_location_and_switch(tmp_path):
    assert _cache_dir_in_subprocess({"HIERBANDIT_JAX_CACHE": str(tmp_path / "c")}) == str(
        tmp_path / "c"
    )
    assert (tmp_path / "c").is_dir()
    assert _cache_dir_in_subprocess({"HIERBANDIT_JAX_CACHE": "off"}) in ("", "None")
    assert _cache_dir_in_subprocess({"XDG_CACHE_HOME": str(tmp_path / "x")}) == str(
        tmp_path / "x" / "hierbandit" / "jax"
    )
    # the user's own JAX setting wins
    mine = str(tmp_path / "mine")
    assert _cache_dir_in_subprocess({"JAX_COMPILATION_CACHE_DIR": mine}) == mine
