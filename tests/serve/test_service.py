"""The decision service without HTTP: restarts reach the uninterrupted state bit for bit."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from hierbandit.errors import InvalidFileError
from hierbandit.serve import DecisionService, RequestError, ServiceConfig
from tests.serve.conftest import ARMS, assert_same_state, request_script, small_policy


def _run(service: DecisionService, script: list) -> list:
    return [getattr(service, op)(copy.deepcopy(body)) for op, body in script]


def _kill(service: DecisionService) -> None:
    """What SIGKILL leaves: no last checkpoint, the log as written, the lock released (a
    background checkpoint is let finish: in process it would outlive the "killed" service;
    tests/serve/test_faults.py kills real processes at any point)."""
    if service._ckpt_thread is not None:
        service._ckpt_thread.join()
    service.wal.close()
    service._lockfile.close()


def _final_state(service: DecisionService, tmp: Path, name: str) -> Path:
    path = tmp / f"{name}.nc"
    service.policy.save(path)
    return path


@pytest.mark.parametrize("every", [3, 1000])
def test_a_restart_reaches_the_uninterrupted_state_and_decides_the_same(tmp_path, every):
    script = request_script(seed=11, steps=60)
    cfg = ServiceConfig(checkpoint_every=every)
    plain = DecisionService.open(tmp_path / "a", small_policy(), config=cfg)
    expected = _run(plain, script)
    # the same requests with a crash (no checkpoint, no close) after every 7th request
    cut = DecisionService.open(tmp_path / "b", small_policy(), config=cfg)
    got = []
    for i, (op, body) in enumerate(script):
        got.append(getattr(cut, op)(copy.deepcopy(body)))
        if i % 7 == 6:
            _kill(cut)
            cut = DecisionService.open(tmp_path / "b", config=cfg)
    assert got == expected
    assert cut.state() | {"records": 0, "committed": 0} == plain.state() | {
        "records": 0,
        "committed": 0,
    }
    assert_same_state(_final_state(plain, tmp_path, "a"), _final_state(cut, tmp_path, "b"))
    plain.close()
    cut.close()


def test_the_service_decides_as_the_policy_itself(tmp_path):
    """Arms and updates equal the policy's own select_batch / update_batch in the same order."""
    script = request_script(seed=3, steps=40)
    service = DecisionService.open(tmp_path / "s", small_policy())
    policy = small_policy()
    pending = {}
    for op, body in script:
        out = getattr(service, op)(copy.deepcopy(body))
        if op == "decide":
            arms = policy.select_batch(
                body["instances"], np.array(body["contexts"]), allowed=body.get("allowed")
            )
            assert out["arms"] == list(arms)
            p = policy.choice_probabilities(
                body["instances"],
                np.array(body["contexts"]),
                allowed=body.get("allowed"),
                arms=arms,
            )
            np.testing.assert_array_equal(out["probabilities"], p)
            for e, i, x, a in zip(
                out["events"], body["instances"], body["contexts"], arms, strict=True
            ):
                pending[e] = (i, x, a)
        else:
            rows = [pending.pop(e) for e in body["events"]]
            policy.update_batch(
                [r[0] for r in rows],
                np.array([r[1] for r in rows]),
                [r[2] for r in rows],
                np.array(body["rewards"]),
            )
    assert_same_state(_final_state(service, tmp_path, "s"), _final_state_of(policy, tmp_path))
    service.close()


def _final_state_of(policy, tmp: Path) -> Path:
    path = tmp / "p.nc"
    policy.save(path)
    return path


def test_a_torn_last_record_is_cut_off_and_a_corrupt_one_refused(tmp_path):
    script = request_script(seed=5, steps=20)
    s = DecisionService.open(tmp_path / "s", small_policy())
    _run(s, script)
    before = s.state()
    _kill(s)
    seg = sorted((tmp_path / "s" / "wal").iterdir())[-1]
    data = seg.read_bytes()
    seg.write_bytes(data + b"\x40\x00\x00\x00\x12\x34")  # a record cut inside its header+body
    s = DecisionService.open(tmp_path / "s")
    assert (
        s.state()["rewards"] == before["rewards"]
        and s.state()["next_event"] == before["next_event"]
    )
    out = s.decide({"instances": ["v", "w"], "contexts": [[0.1, 0.2, 0.3], [0.0, 1.0, 0.0]]})
    s.reward({"events": out["events"], "rewards": [0.5, -0.5]})
    _kill(s)
    # flip one byte inside an earlier record: the restart is refused, naming the segment
    seg = sorted((tmp_path / "s" / "wal").iterdir())[-1]
    data = bytearray(seg.read_bytes())
    data[20] ^= 0xFF
    seg.write_bytes(bytes(data))
    with pytest.raises(InvalidFileError, match="wal"):
        DecisionService.open(tmp_path / "s")


def test_refused_requests_change_nothing(tmp_path):
    s = DecisionService.open(tmp_path / "s", small_policy())
    out = s.decide({"instances": ["u"], "contexts": [[0.1, 0.2, 0.3]]})
    s.checkpoint()
    before = (s.state(), (tmp_path / "s" / "wal").stat())
    bad = [
        ("decide", {"instances": ["u"], "contexts": [[0.1, 0.2]]}, 400),
        ("decide", {"instances": ["u"], "contexts": [[0.1, 0.2, float("nan")]]}, 400),
        ("decide", {"instances": [True], "contexts": [[0.1, 0.2, 0.3]]}, 400),
        ("decide", {"instances": [1.5], "contexts": [[0.1, 0.2, 0.3]]}, 400),
        ("decide", {"instances": ["u"], "contexts": [[0.1, 0.2, 0.3]], "allowed": [["pink"]]}, 400),
        ("decide", {"instances": ["u"], "contexts": [[0.1, 0.2, 0.3]], "allowed": [[]]}, 400),
        ("decide", {"instances": ["u"], "contexts": [[1e9, 0.2, 0.3]]}, 400),
        ("decide", {"instances": ["u"] * 3, "contexts": [[0.1, 0.2, 0.3]]}, 400),
        ("decide", {"instances": [], "contexts": []}, 400),
        ("decide", {"instances": ["u"], "contexts": [[0, 0, 0]], "extra": 1}, 400),
        ("decide", [1, 2], 400),
        ("reward", {"events": [out["events"][0] + 5], "rewards": [1.0]}, 404),
        ("reward", {"events": [-1], "rewards": [1.0]}, 404),
        ("reward", {"events": [0, 0], "rewards": [1.0, 1.0]}, 400),
        ("reward", {"events": [0], "rewards": [None]}, 400),
        ("reward", {"events": [0], "rewards": [1e300]}, 400),
        ("reward", {"events": ["0"], "rewards": [1.0]}, 400),
        ("reward", {"events": [0], "rewards": [1.0, 2.0]}, 400),
    ]
    for op, body, status in bad:
        with pytest.raises(RequestError) as err:
            getattr(s, op)(body)
        assert err.value.status == status, (body, err.value.message)
    assert (s.state(), (tmp_path / "s" / "wal").stat()) == before
    s.reward({"events": [0], "rewards": [1.0]})
    with pytest.raises(RequestError) as err:
        s.reward({"events": [0], "rewards": [1.0]})
    assert err.value.status == 409
    s.close()


def test_oversized_batches_are_413(tmp_path):
    s = DecisionService.open(tmp_path / "s", small_policy(), config=ServiceConfig(max_batch=4))
    with pytest.raises(RequestError) as err:
        s.decide({"instances": ["u"] * 5, "contexts": [[0.0, 0.0, 0.0]] * 5})
    assert err.value.status == 413
    s.close()


def test_old_decisions_expire_beyond_max_pending(tmp_path):
    s = DecisionService.open(tmp_path / "s", small_policy(), config=ServiceConfig(max_pending=5))
    out = s.decide({"instances": ["u"] * 8, "contexts": [[0.0, 1.0, 0.0]] * 8})
    assert s.state()["pending"] == 5 and s.state()["expired"] == 3
    with pytest.raises(RequestError) as err:
        s.reward({"events": [out["events"][0]], "rewards": [1.0]})
    assert err.value.status == 409
    s.reward({"events": [out["events"][-1]], "rewards": [1.0]})
    s.close()
    s = DecisionService.open(tmp_path / "s", config=ServiceConfig(max_pending=5))
    assert s.state()["pending"] == 4 and s.state()["expired"] == 3
    s.close()


def test_one_service_per_state_directory(tmp_path):
    s = DecisionService.open(tmp_path / "s", small_policy())
    with pytest.raises(RuntimeError, match="another service"):
        DecisionService.open(tmp_path / "s")
    s.close()
    DecisionService.open(tmp_path / "s").close()


def test_a_new_state_directory_needs_a_source(tmp_path):
    with pytest.raises(ValueError, match="source"):
        DecisionService.open(tmp_path / "s")


def test_the_event_log_holds_every_decision_and_reward_once(tmp_path):
    pd = pytest.importorskip("pandas")
    script = request_script(seed=8, steps=50)
    s = DecisionService.open(
        tmp_path / "s", small_policy(), config=ServiceConfig(checkpoint_every=4)
    )
    for i, (op, body) in enumerate(script):
        getattr(s, op)(copy.deepcopy(body))
        if i % 9 == 8:
            # die just after the event-log files of a checkpoint are written, before the
            # checkpoint itself: those files must be dropped and their rows replayed
            s.events.flush(s._ckpt_from, s.wal.next_index)
            _kill(s)
            s = DecisionService.open(tmp_path / "s", config=ServiceConfig(checkpoint_every=4))
    state = s.state()
    s.close()
    dec = pd.read_parquet(tmp_path / "s" / "events" / "decisions")
    rew = pd.read_parquet(tmp_path / "s" / "events" / "rewards")
    assert sorted(dec["event"]) == list(range(state["decisions"]))
    assert len(rew) == state["rewards"] == rew["event"].nunique()
    sent = [e for op, b in script if op == "reward" for e in b["events"]]
    assert sorted(rew["event"]) == sorted(sent)
    assert set(rew["arm"]) <= set(ARMS)
    assert {"instance", "arm", "reward", "a", "b", "c", "propensity"} <= set(rew.columns)
    merged = rew.merge(dec, on="event", suffixes=("", "_d"))
    assert (merged["arm"] == merged["arm_d"]).all()
    np.testing.assert_array_equal(merged["a"], merged["a_d"])


def test_the_event_log_feeds_the_offline_models_and_a_policy(tmp_path):
    """The rewards table is what an offline data set and a policy's update_batch read."""
    from hierbandit.offline import read_offline
    from hierbandit.serve import read_events

    s = DecisionService.open(
        tmp_path / "s", small_policy(), config=ServiceConfig(checkpoint_every=5)
    )
    _run(s, request_script(seed=4, steps=40))
    s.close()
    rew = read_events(tmp_path / "s", "rewards")
    assert len(rew) == s.state()["rewards"] > 0
    arm = rew["arm"].iloc[0]
    data = read_offline(rew[rew.arm == arm], user="instance", features=["a", "b", "c"])
    assert data.n_rows == int((rew.arm == arm).sum())
    twin = small_policy()
    twin.update_batch(rew)
    assert twin.t == len(rew)
    dec = read_events(tmp_path / "s", "decisions")
    assert sorted(dec["event"]) == list(range(s.state()["decisions"]))
    # files written past the checkpoint in force (a checkpoint under way) are not read
    s = DecisionService.open(tmp_path / "s", config=ServiceConfig(checkpoint_every=1000))
    s.decide({"instances": ["late"], "contexts": [[0.0, 0.0, 1.0]]})
    s.events.flush(s._ckpt_from, s.wal.next_index)
    assert len(read_events(tmp_path / "s", "decisions")) == len(dec)
    s.close()
    assert len(read_events(tmp_path / "s", "decisions")) == len(dec) + 1
    with pytest.raises(ValueError, match="table"):
        read_events(tmp_path / "s", "everything")


def test_a_policy_checkpoint_or_a_prior_is_a_source_and_anything_else_is_refused(tmp_path):
    from hierbandit.ebm import LinUCB, OLSBandit

    LinUCB(3, n_arms=2, n_features=2, rng=0).save(tmp_path / "lin.nc")
    s = DecisionService.open(tmp_path / "a", tmp_path / "lin.nc")
    out = s.decide({"instances": [0, 2], "contexts": [[1.0, 0.0], [0.0, 1.0]]})
    # an untrained LinUCB ties its two arms: each is chosen with probability 1/2
    assert s.info()["policy"] == "LinUCB" and out["probabilities"] == [0.5, 0.5]
    s.close()
    # a policy without choice probabilities is served with null probabilities
    OLSBandit(2, n_arms=2, n_features=2, rng=0).save(tmp_path / "ols.nc")
    s = DecisionService.open(tmp_path / "b", tmp_path / "ols.nc")
    assert s.decide({"instances": [1], "contexts": [[1.0, 0.0]]})["probabilities"] is None
    s.close()
    bad = tmp_path / "bad.nc"
    bad.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\x00" * 64)
    with pytest.raises(InvalidFileError, match="neither a fitted prior nor a policy"):
        DecisionService.open(tmp_path / "c", bad)
    assert not (tmp_path / "c" / "CURRENT").exists()
