"""The stopping rule shared by early stopping and the sigmoid pruner: hand-made fits, then
real fits of Table-1 curves, then the Optuna pruner against MedianPruner."""
import numpy as np
import optuna
import pandas as pd
import pytest

from analysis.fit import FitResult, fit_sigmoid
from analysis.pruning import SigmoidPruner, report_eval
from analysis.stopping import StopRule, decide, with_stop_columns
from analysis.synthetic import simulate_curve


def fit(A, lo, hi, *, status="ok", C_mid=100.0, C_mid_hi=150.0, last=400.0, R0=0.2, B=2.0, boot=None):
    """A hand-made FitResult: A with its interval, past its bend unless told otherwise."""
    return FitResult(status=status, A=A, A_lo=lo, A_hi=hi, B=B, C_mid=C_mid, C_mid_lo=C_mid / 2,
                     C_mid_hi=C_mid_hi, R0=R0, last_compute=last,
                     boot=np.empty((0, 4)) if boot is None else boot)


def test_an_arm_whose_upper_bound_is_below_the_leaders_lower_bound_stops():
    # leader: the highest lower bound (0.58, not the highest A 0.63 whose lower bound is 0.50)
    arms = {"lead": [fit(0.60, 0.58, 0.62)], "wide": [fit(0.63, 0.50, 0.76)],
            "low": [fit(0.55, 0.54, 0.57)], "close": [fit(0.57, 0.55, 0.585)]}
    d = decide(arms)
    assert d["lead"].leader == "lead" and not d["lead"].stop
    assert d["low"].stop and "0.570 < leader's lower bound 0.580" in d["low"].reason
    assert not d["close"].stop            # 0.585 >= 0.58: still in the race
    assert not d["wide"].stop


def test_unidentified_or_pre_bend_arms_are_never_stopped_on_A():
    arms = {"lead": [fit(0.80, 0.79, 0.81)],
            "unidentified": [fit(0.30, 0.29, 0.31, status="A_unidentified")],
            "before_bend": [fit(0.30, 0.29, 0.31, C_mid=300.0, C_mid_hi=500.0, last=400.0)]}
    d = decide(arms)
    assert not d["unidentified"].stop and "not identified" in d["unidentified"].reason
    assert not d["before_bend"].stop and "bend" in d["before_bend"].reason
    # past_bend="C_mid" only asks for the point estimate: 400 >= 300
    assert decide(arms, StopRule(past_bend="C_mid"))["before_bend"].stop
    # and an unidentified arm can never lead: alone with it, nothing stops
    assert not any(x.stop for x in decide({"u": arms["unidentified"], "b": arms["before_bend"]}).values())


def test_the_profile_interval_widens_the_bounds():
    lead = fit(0.60, 0.58, 0.62)
    low = FitResult(**{**fit(0.55, 0.54, 0.57).__dict__, "A_profile_lo": 0.53, "A_profile_hi": 0.59})
    assert not decide({"lead": [lead], "low": [low]})["low"].stop     # 0.59 >= 0.58


def test_seeds_pool_conservatively():
    arms = {"lead": [fit(0.60, 0.58, 0.62), fit(0.61, 0.585, 0.63)],   # lower bound: the lowest, 0.58
            "low": [fit(0.55, 0.54, 0.57), fit(0.56, 0.55, 0.579)]}   # upper bound: the highest, 0.579
    assert decide(arms)["low"].stop
    arms["low"].append(fit(0.50, 0.40, 0.60, status="A_unidentified"))
    assert not decide(arms)["low"].stop        # one seed unidentified: the arm is not judged on A


def test_target_compute_compares_the_bands_at_C_star():
    # bootstrap rows (A, B, C_mid, R0); at C* = C_mid the prediction is (A + R0) / 2
    lead_boot = np.array([[0.80, 2.0, 100.0, 0.2], [0.82, 2.0, 100.0, 0.2]])     # 0.50 .. 0.51
    low_boot = np.array([[0.70, 2.0, 100.0, 0.2], [0.74, 2.0, 100.0, 0.2]])      # 0.45 .. 0.47
    rule = StopRule(target_compute=100.0)
    arms = {"lead": [fit(0.81, 0.80, 0.82, boot=lead_boot)],
            "low": [fit(0.72, 0.70, 0.74, status="A_unidentified", boot=low_boot)]}
    d = decide(arms, rule)
    assert d["lead"].leader == "lead"
    assert d["low"].stop and d["low"].basis == "target"                # C* = 100 <= last 400: interpolation
    assert d["low"].upper == pytest.approx(0.4699, abs=1e-3) and d["low"].leader_lower == pytest.approx(0.5005, abs=1e-3)
    assert not decide(arms, StopRule(target_compute=1000.0))["low"].stop   # past its data, A unidentified


def test_bad_rule_settings_name_the_field():
    for kwargs, field in (({"level": 1.5}, "level"), ({"target_compute": -1.0}, "target_compute"),
                          ({"past_bend": "x"}, "past_bend"), ({"min_points": 1}, "min_points")):
        with pytest.raises(ValueError, match=field):
            StopRule(**kwargs)


def table1(A, B, C_mid, n, rng, c_end=16000.0):
    return simulate_curve(A, B, C_mid, 0.3, c_end=c_end, n_points=n, rng=rng)[:2]


def test_real_fits_stop_the_loser_but_not_a_slow_starter_median_would_cut():
    """ScaleRL-768 (A 0.61, C_mid 2542) vs. a worse arm (A 0.55) vs. batch-2048 (A 0.645, C_mid
    10909: slow start, higher A; arXiv 2510.13786 Table 1), all at 8,000 GPU-h of a 16k budget."""
    rng = np.random.default_rng(3)
    curves = {"scalerl": table1(0.61, 1.92, 2542.0, 40, rng), "worse": table1(0.55, 1.92, 2542.0, 40, rng),
              "batch2048": table1(0.645, 1.70, 10909.0, 40, rng)}
    half = {k: (c[:21], r[:21]) for k, (c, r) in curves.items()}
    fits = {k: [fit_sigmoid(c, r)] for k, (c, r) in half.items()}
    d = decide(fits)
    assert d["worse"].stop and d["worse"].leader == "scalerl"
    assert not d["batch2048"].stop and not d["batch2048"].eligible      # before its bend: never cut
    # Optuna's MedianPruner, fed the same evals, cuts exactly the arm that wins in the end.
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.MedianPruner(n_startup_trials=1))
    for name in ("scalerl", "worse", "batch2048"):
        trial = study.ask()
        c, r = half[name] if name != "scalerl" else curves[name]
        pruned = False
        for k in range(c.size):
            trial.report(float(r[k]), k)
            if trial.should_prune():
                pruned = True
                break
        study.tell(trial, float(r[-1]) if not pruned else None,
                   state=optuna.trial.TrialState.PRUNED if pruned else optuna.trial.TrialState.COMPLETE)
    states = {name: t.state.name for name, t in zip(("scalerl", "worse", "batch2048"), study.trials)}
    assert states["batch2048"] == "PRUNED"


def test_sigmoid_pruner_prunes_the_loser_and_spares_the_slow_starter():
    rng = np.random.default_rng(4)
    curves = [("scalerl", table1(0.61, 1.92, 2542.0, 40, rng)), ("worse", table1(0.55, 1.92, 2542.0, 40, rng)),
              ("batch2048", table1(0.645, 1.70, 10909.0, 40, rng))]
    pruner = SigmoidPruner(StopRule())
    study = optuna.create_study(direction="maximize", pruner=pruner)
    pruned_at = {}
    for name, (c, r) in curves:
        trial = study.ask()
        for k in range(c.size):
            report_eval(trial, k, c[k], r[k])
            if trial.should_prune():
                pruned_at[name] = k
                break
        study.tell(trial, float(r[-1]) if name not in pruned_at else None,
                   state=optuna.trial.TrialState.PRUNED if name in pruned_at else optuna.trial.TrialState.COMPLETE)
    assert set(pruned_at) == {"worse"}
    assert pruned_at["worse"] < 30                          # well before the end of the budget
    assert "cannot catch 0" in pruner.decisions[1].reason   # trial 0 (scalerl) leads


def test_with_stop_columns_records_why_and_the_fit_then():
    board = pd.DataFrame({"run": ["a", "b"], "rank": [1, 2], "status": ["ok", "ok"]})
    record = {"reason": "cannot catch a", "leader": "a", "basis": "A", "step": 150, "compute": 3e12,
              "value": 0.55, "upper": 0.57, "leader_lower": 0.58,
              "fit": {"status": "ok", "A": 0.55, "A_lo": 0.54, "A_hi": 0.57, "B": 2.0, "C_mid": 1e12}}
    out = with_stop_columns(board, {"b": record})
    row = out.set_index("run").loc["b"]
    assert row["stop_step"] == 150 and row["stop_A_hi"] == 0.57 and row["stop_leader"] == "a"
    assert np.isnan(out.set_index("run").loc["a", "stop_step"])
    assert any("b was stopped early at step 150" in n for n in out.attrs["notes"])
    assert with_stop_columns(board, {}) is board
