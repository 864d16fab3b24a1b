"""Ranking: by A, the paper's tie rule (common A, then B), budgets, seeds and statuses."""
import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.fit import FitOptions
from analysis.leaderboard import format_leaderboard, leaderboard
from analysis.models import sigmoid

C = np.concatenate([[0.0], np.linspace(250.0, 10000.0, 80)])
POINT = FitOptions(n_boot=0)          # point fits only


def run(name, A, B=2.0, C_mid=2500.0, R0=0.3, compute=C, **cols):
    return pd.DataFrame({"run": name, "compute": compute,
                         "reward": sigmoid(compute, A, B, C_mid, R0), **cols})


def table(*frames):
    return pd.concat(frames, ignore_index=True)


def test_ranks_by_a_when_a_values_are_apart():
    board = leaderboard(table(run("low", 0.50), run("high", 0.70), run("mid", 0.60)), options=POINT)
    assert board["run"].tolist() == ["high", "mid", "low"]
    assert board["rank"].tolist() == [1, 2, 3]
    assert (board["rank_basis"] == "A").all() and board["tie_group"].isna().all()


def test_tie_rule_orders_close_a_values_by_b_at_their_common_a():
    # A 0.610 vs 0.600 are within the paper's 0.02: refit both at A = 0.605, compare B
    points = table(run("flatter", 0.610, B=1.5), run("steeper", 0.600, B=2.5))
    board = leaderboard(points, options=POINT)
    assert board["run"].tolist() == ["steeper", "flatter"]
    assert board["tie_group"].tolist() == [1, 1]
    assert board["A_common"].tolist() == pytest.approx([0.605, 0.605])
    b = dict(zip(board["run"], board["B_common"]))
    assert b["steeper"] > 2.0 > 1.7 > b["flatter"]
    # with a margin below their gap, A decides
    assert leaderboard(points, options=POINT, margin=0.005)["run"].tolist() == ["flatter", "steeper"]


def test_target_compute_ranks_by_predicted_reward_at_the_budget():
    long_c = np.concatenate([[0.0], np.linspace(1000.0, 80000.0, 80)])
    points = table(run("fast", 0.60, B=2.0, C_mid=1000.0, compute=long_c),
                   run("slow", 0.70, B=2.0, C_mid=20000.0, compute=long_c))
    board = leaderboard(points, options=FitOptions(n_boot=50), target_compute=2000.0).set_index("run")
    assert board.loc["slow", "rank"] == 1 and board.loc["fast", "rank"] == 2
    # by hand: fast: 0.3 + 0.3 / (1 + (1000/2000)^2) = 0.54;  slow: 0.3 + 0.4 / (1 + 10^2) = 0.30396
    assert board.loc["fast", "pred_target"] == pytest.approx(0.54, abs=1e-6)
    assert board.loc["slow", "pred_target"] == pytest.approx(0.3 + 0.4 / 101, abs=1e-6)
    assert board.loc["fast", "rank_target"] == 1 and board.loc["slow", "rank_target"] == 2
    assert board.loc["fast", "pred_target_lo"] - 1e-9 <= 0.54 <= board.loc["fast", "pred_target_hi"] + 1e-9


def test_seeds_of_an_arm_are_ranked_together_with_the_pooled_seed_spread():
    seeds = [run(f"cispo-s{i}", A, seed=i, loss="cispo") for i, A in enumerate((0.60, 0.61, 0.62))]
    seeds += [run(f"dapo-s{i}", A, seed=i, loss="dapo") for i, A in enumerate((0.50, 0.51, 0.52))]
    board = leaderboard(table(*seeds), options=POINT)
    arm = board[board["level"] == "arm"].set_index("loss")
    assert arm.loc["cispo", "A"] == pytest.approx(0.61, abs=1e-6)
    assert arm.loc["cispo", "A_seed_sd"] == pytest.approx(0.01, abs=1e-6)
    # pooled sd 0.01 with 2 + 2 dof: half width t(0.975, 4) * 0.01 / sqrt(3) = 0.01603
    half = stats.t.ppf(0.975, 4) * 0.01 / np.sqrt(3)
    assert arm.loc["cispo", "A_lo"] == pytest.approx(0.61 - half, abs=1e-6)
    assert arm.loc["cispo", "A_hi"] == pytest.approx(0.61 + half, abs=1e-6)
    assert arm.loc["cispo", "n_seeds"] == 3 and arm.loc["cispo", "rank"] == 1
    seeds_rows = board[(board["level"] == "run") & (board["loss"] == "dapo")]
    assert (seeds_rows["rank"] == 2).all()
    assert board.iloc[0]["level"] == "arm"                  # arm row above its seeds


def test_an_unidentified_run_puts_every_fitted_run_on_reward_at_a_shared_compute():
    short_c = np.concatenate([[0.0], np.linspace(100.0, 1200.0, 40)])   # ends before C_mid
    rng = np.random.default_rng(0)
    unid = run("unidentified", 0.65, compute=short_c)
    unid["reward"] += np.r_[0, rng.normal(0, 0.004, 40)]
    failed = pd.DataFrame({"run": ["crashed"], "compute": [np.nan], "reward": [np.nan],
                           "run_status": ["failed"], "error": ["NCCL timeout"]})
    board = leaderboard(table(run("good", 0.55), unid, failed), options=FitOptions(n_boot=100))
    # A cannot order them (one A is only a bound); at C_ref = 1200, where both have data, by hand:
    # good 0.3 + 0.25 / (1 + (2500/1200)^2) = 0.3468, unidentified ~0.3 + 0.35 / 5.34 = 0.3655
    assert board["run"].tolist() == ["unidentified", "good", "crashed"]
    assert board["status"].tolist() == ["A_unidentified", "ok", "run_failed"]
    assert board["rank"].iloc[:2].tolist() == [1, 2] and np.isnan(board["rank"].iloc[2])
    assert (board["rank_basis"].iloc[:2] == "reward at C_ref=1200").all()
    assert board.loc[1, "R_ref"] == pytest.approx(0.3 + 0.25 / (1 + (2500 / 1200) ** 2), abs=1e-6)
    text = format_leaderboard(board)
    assert "not identified" in text and "NCCL timeout" in text
    unid_line = next(line for line in text.splitlines() if line.lstrip("0123456789= ").startswith("unidentified"))
    assert f"{board['A_raw'].iloc[0]:.3f}" not in unid_line      # no confident A on a bound
    assert np.isnan(board["A"].iloc[0]) and board["A_raw"].iloc[0] > 0.3


def test_axis_columns_and_loss_clamp_come_through():
    points = table(run("a", 0.6, loss="cispo", precision="fp32", loss_clamp="sg(min(ratio, 4.0))"))
    board = leaderboard(points, options=POINT)
    assert board.loc[0, "loss"] == "cispo" and board.loc[0, "precision"] == "fp32"
    assert board.loc[0, "loss_clamp"] == "sg(min(ratio, 4.0))"


def test_fit_until_adds_forecast_columns():
    board = leaderboard(run("a", 0.6), options=FitOptions(n_boot=0, fit_until=5000.0))
    # exact curve: the forecast of the mean of the last 3 evals is exact
    assert board.loc[0, "pred_final"] == pytest.approx(board.loc[0, "obs_final"], abs=1e-6)


def test_a_multi_seed_arm_is_named_by_what_its_runs_share():
    """Run directories are named by their overrides and a hash; the arm's row drops the seed and the hash."""
    hashes = iter(["1a2b3c4d", "5e6f7a8b", "9c0d1e2f", "0a0b0c0d"])
    seeds = [run(f"loss={loss},seed={i}-{next(hashes)}", A, seed=i, loss=loss)
             for loss, As in (("cispo", (0.60, 0.61)), ("dapo", (0.50, 0.51))) for i, A in enumerate(As)]
    board = leaderboard(table(*seeds), options=POINT)
    names = board.loc[board["level"] == "arm", "run"].tolist()
    assert [n.split(" (arm ")[0] for n in names] == ["loss=cispo", "loss=dapo"]
    assert names[0] != names[1] and all(n.endswith(")") for n in names)
