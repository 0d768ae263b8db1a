"""The direct NUTS driver compiles programs that depend on the data's shapes only; the on-disk
compilation cache and the host devices are configured as documented, by the first sampler run
and not by importing the package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from hierbandit.bayes.models import collapsed_model
from hierbandit.bayes.sampling import _jaxify_logp_with_data

from .test_fit import synthetic_hlog


@pytest.mark.parametrize("algebra", ["batched", "soa"])
def test_compiled_log_density_takes_the_data_as_arguments(algebra):
    """One log's compiled function, given another log's data, is the other log's log density."""
    logs = [
        synthetic_hlog(n_instances=4, n_arms=2, n_features=2, rows=rows, seed=seed)
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


def _run(code: str, env: dict[str, str] | None = None) -> dict:
    """Run ``code`` in a fresh interpreter without JAX or hierbandit settings in its
    environment (plus ``env``); it prints one JSON object, returned here."""
    full = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("JAX_", "HIERBANDIT_")) and k != "XLA_FLAGS"
    }
    full.update(env or {})
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=full, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


#: the hook the first sampler run calls, then what JAX ends up with
_FIRST_RUN = """
    import json, os
    import hierbandit.bayes._devices as s
    s.configure_jax_once()
    import jax
    print(json.dumps({"cache": jax.config.jax_compilation_cache_dir,
                      "devices": jax.local_device_count(),
                      "flags": os.environ.get("XLA_FLAGS")}))
"""


def _cache_dir_after_first_run(env: dict[str, str]) -> str | None:
    return _run(_FIRST_RUN, env)["cache"]


def test_compilation_cache_location_and_switch(tmp_path):
    assert _cache_dir_after_first_run({"HIERBANDIT_JAX_CACHE": str(tmp_path / "c")}) == str(
        tmp_path / "c"
    )
    assert (tmp_path / "c").is_dir()
    assert _cache_dir_after_first_run({"HIERBANDIT_JAX_CACHE": "off"}) in ("", None)
    assert _cache_dir_after_first_run({"XDG_CACHE_HOME": str(tmp_path / "x")}) == str(
        tmp_path / "x" / "hierbandit" / "jax"
    )
    # the user's own JAX setting wins
    mine = str(tmp_path / "mine")
    assert _cache_dir_after_first_run({"JAX_COMPILATION_CACHE_DIR": mine}) == mine


def test_importing_the_bayesian_layer_changes_no_setting():
    """Importing ``hierbandit.bayes`` and using names that do not sample leaves the environment
    as it was and loads none of PyMC, PyTensor, ArviZ or JAX."""
    code = """
        import json, os, sys
        before = dict(os.environ)
        import hierbandit.bayes as hb
        from hierbandit.bayes import (
            CascadeLog, CascadePrior, HierarchicalPrior, SamplerConfig, available_samplers,
            cascade_laplace, configure_compilation_cache, configure_host_devices, fit_prior,
            load_cascade_prior, load_prior, prior_from_arrays, read_cascade_log, upgrade_prior,
        )
        SamplerConfig(draws=10, chains=4)
        available_samplers()
        heavy = ("pymc", "pytensor", "arviz", "jax", "numpyro", "nutpie")
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in heavy)
        changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))
        print(json.dumps({"loaded": loaded, "changed": changed}))
    """
    got = _run(code)
    assert got == {"loaded": [], "changed": []}


def test_the_first_sampler_run_configures_jax_before_it_starts(tmp_path):
    cores = os.cpu_count() or 1
    got = _run(_FIRST_RUN, {"XDG_CACHE_HOME": str(tmp_path)})
    assert got["devices"] == cores
    assert got["flags"] == f"--xla_force_host_platform_device_count={cores}"
    assert got["cache"] == str(tmp_path / "hierbandit" / "jax")
    # a device count the user asked for is kept
    got = _run(_FIRST_RUN, {"XLA_FLAGS": "--xla_force_host_platform_device_count=1"})
    assert got["devices"] == 1 and got["flags"] == "--xla_force_host_platform_device_count=1"


def test_the_first_sampler_run_keeps_what_the_user_configured(tmp_path):
    """A cache folder set beforehand (through the package or JAX) is kept; once JAX has started
    nothing is changed; the hook runs once."""
    code = f"""
        import json, os
        import jax
        import hierbandit.bayes as hb
        import hierbandit.bayes._devices as s
        hb.configure_compilation_cache({str(tmp_path / "mine")!r})
        s.configure_jax_once()
        print(json.dumps({{"cache": jax.config.jax_compilation_cache_dir,
                          "flags": os.environ.get("XLA_FLAGS")}}))
    """
    got = _run(code, {"XDG_CACHE_HOME": str(tmp_path)})
    assert got["cache"] == str(tmp_path / "mine") and got["flags"] is not None
    code = """
        import json, os
        import jax, jax.numpy as jnp
        float(jnp.ones(2).sum())  # JAX has started
        before = dict(os.environ)
        import hierbandit.bayes._devices as s
        from hierbandit.bayes._devices import jax_started
        started = jax_started()
        s.configure_jax_once()
        print(json.dumps({"started": started, "same": before == dict(os.environ),
                          "cache": jax.config.jax_compilation_cache_dir}))
    """
    assert _run(code) == {"started": True, "same": True, "cache": None}
    code = """
        import json, os
        import hierbandit.bayes._devices as s
        from hierbandit.bayes._devices import jax_started
        assert not jax_started()
        s.configure_jax_once()
        first = os.environ.get("XLA_FLAGS")
        os.environ["XLA_FLAGS"] = ""
        s.configure_jax_once()  # once per process
        print(json.dumps({"first": first, "second": os.environ["XLA_FLAGS"]}))
    """
    got = _run(code, {"HIERBANDIT_JAX_CACHE": "off"})
    assert got["first"] and got["second"] == ""
