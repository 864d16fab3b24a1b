"""FitOptions: one frozen, validated object carries every fit setting; each default is written once."""
import dataclasses
import importlib
import inspect
import pkgutil

import numpy as np
import pytest

import analysis
from analysis.__main__ import main
from analysis.cli import build_parser
from analysis.extrapolation import extrapolation_check
from analysis.fit import METHODS, FitOptions, FitResult, fit_sigmoid
from analysis.synthetic import synthetic_sweep

BAD = [("method", "magic"), ("boot", "wild"), ("level", 0.0), ("level", 1.0), ("level", "95%"),
       ("n_boot", -1), ("n_boot", 2.5), ("max_a_width", 0.0), ("max_a_width", -0.1),
       ("max_a_width", float("nan")), ("min_points", 0), ("seed", 1.5), ("r0", "step 0"),
       ("fit_until", "end"), ("a_fixed", "mean"), ("min_compute", "a lot"), ("min_compute", "ten%"),
       ("min_compute", [1.0])]


@pytest.mark.parametrize("name, value", BAD)
def test_a_bad_value_raises_and_names_its_option(name, value):
    with pytest.raises(ValueError, match=rf"^FitOptions\.{name} must"):
        FitOptions(**{name: value})
    with pytest.raises(ValueError, match=rf"^FitOptions\.{name} must"):     # variants are checked too
        dataclasses.replace(FitOptions(), **{name: value})


@pytest.mark.parametrize("min_compute", ["auto", "10%", "4.5", 5e14, 0, None])
def test_every_min_compute_form_is_accepted(min_compute):
    assert FitOptions(min_compute=min_compute).min_compute == min_compute


def test_options_are_frozen_and_every_method_key_is_valid():
    with pytest.raises(dataclasses.FrozenInstanceError):
        FitOptions().n_boot = 3
    assert list(METHODS) == ["closed_form", "paper_grid"]
    for method in METHODS:
        assert FitOptions(method=method).method == method


def _parameters():
    """(where, inspect.Parameter) for every function and method written in the analysis package.

    Dataclass-generated __init__s are left out: FitOptions' is where the defaults live, and
    FitResult reads its `method` and `level` defaults from FitOptions (checked below).
    """
    for info in pkgutil.iter_modules(analysis.__path__):
        module = importlib.import_module(f"analysis.{info.name}")
        for name, obj in vars(module).items():
            if getattr(obj, "__module__", None) != module.__name__:
                continue
            if inspect.isfunction(obj):
                functions = [(name, obj)]
            elif inspect.isclass(obj):
                functions = [(f"{name}.{k}", f) for k, f in vars(obj).items()
                             if inspect.isfunction(f) and not (k == "__init__" and dataclasses.is_dataclass(obj))]
            else:
                functions = []
            for where, function in functions:
                for parameter in inspect.signature(function).parameters.values():
                    yield f"{module.__name__}.{where}", parameter


def test_each_fit_default_is_written_once_on_fit_options():
    assert FitOptions().max_a_width == 0.1
    assert not [where for where, p in _parameters() if p.name == "max_a_width"]
    # no function repeats a FitOptions default (a None default only means "not given");
    # synthetic_sweep's seed draws the test data, it is not a fit's seed
    fields = {f.name for f in dataclasses.fields(FitOptions)}
    repeats = [f"{where}({p.name}={p.default!r})" for where, p in _parameters()
               if p.name in fields and p.default is not inspect.Parameter.empty and p.default is not None]
    assert repeats == ["analysis.synthetic.synthetic_sweep(seed=0)"]
    result = FitResult(status="flat")
    assert (result.method, result.level) == (FitOptions().method, FitOptions().level)


def test_the_cli_defaults_are_fit_options_defaults():
    args = build_parser().parse_args(["fit", "p", "--out", "o"])
    built = FitOptions(r0=args.r0, min_compute=args.min_compute, method=args.method, seed=args.seed,
                       fit_until=args.fit_until, n_boot=args.n_boot, max_a_width=args.max_a_width)
    assert built == FitOptions()
    for method in METHODS:          # the --method choices are METHODS' keys
        assert build_parser().parse_args(["fit", "p", "--out", "o", "--method", method]).method == method


def test_a_bad_cli_value_exits_with_the_option_named(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "p", "--out", "o", "--max-a-width", "0"])
    assert exit_info.value.code == 2
    assert "FitOptions.max_a_width must be > 0" in capsys.readouterr().err


def test_replace_gives_a_variant_without_touching_the_original():
    C = np.concatenate([[0.0], np.linspace(100.0, 10000.0, 60)])
    R = 0.3 + 0.3 / (1 + (2500.0 / np.maximum(C, 1e-9)) ** 2)
    base = FitOptions(n_boot=0)
    tie = dataclasses.replace(base, a_fixed=0.6, profile=False)
    assert base.a_fixed is None and tie.n_boot == 0
    fit = fit_sigmoid(C, R, tie)
    assert fit.A == 0.6 and "A_fixed" in fit.flags


def test_extrapolation_check_refuses_a_fit_until_of_its_own():
    with pytest.raises(ValueError, match="fit_until"):
        extrapolation_check(synthetic_sweep(1, 20), 0.5, FitOptions(fit_until=1.0))
