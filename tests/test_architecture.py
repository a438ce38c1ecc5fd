"""The composable parts: settings as profiles of one base, tuners by name (a toy
one added in a few lines), the engine's limits and port rule read from Python,
and SQL only in the warehouse package."""

import re
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, SAMPLE
from difftune_pipeline import config, steps, tuners
from difftune_pipeline.engine import LIMITS, InvalidTable
from difftune_pipeline.ingest import batches as ingest
from difftune_pipeline.tuners.direct import DirectSearch
from difftune_pipeline.warehouse import tables


def test_profiles_are_overrides_of_one_base():
    base = config.Settings()
    assert config.settings_for("sample") == base
    smoke = config.settings_for("smoke")
    assert smoke.search.budget == 3000 and smoke.structured.epochs == 3 and smoke.lstm.epochs == 1
    assert smoke.search.min_blocks == base.search.min_blocks  # what a profile does not name stays the base's
    full = config.settings_for("full", {"search.halving": False, "tuner": "direct"})
    assert full.search.budget == 192_000 and full.search.prior == 0.5 and full.tuner == "direct"
    assert not full.search.halving and config.settings_for("full").search.halving
    assert config.settings_for("full").tuner == "ranked" and config.settings_for("full").search.repeats == 0


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"serach.budget": 1}, "unknown setting 'serach'"),
        ({"search.budgte": 1}, "unknown setting 'budgte'"),
        ({"search.budget": "many"}, "must be of type int"),
        ({"search.halving": 1}, "must be of type bool"),
        ({"search.prior": -0.5}, "search.prior must be at least 0"),
        ({"search.repeats": -1}, "search.repeats must be at least 0"),
        ({"tune.prior": float("nan")}, "tune.prior must be at least 0"),
        ({"search": 1}, "is a group"),
        ({"presets": ["perturb", 3]}, "must be of type tuple"),
        ({"presets": ["perturb", "gaussian"]}, "unknown sampling presets"),
        ({"tuner": "annealing"}, "unknown tuner 'annealing'"),
        ({"surrogate_model": "transformer"}, "unknown surrogate model 'transformer'"),
    ],
)
def test_bad_overrides_are_refused_by_name(overrides, message):
    with pytest.raises(ValueError, match=message):
        config.settings_for("sample", overrides)
    with pytest.raises(ValueError, match="unknown profile"):
        config.settings_for("huge")
    with pytest.raises(ValueError, match="not JSON"):
        config.parse_overrides("{search.budget: 1}")


def test_every_named_tuner_composes_and_an_unknown_one_is_refused():
    settings = config.Settings()
    stages_of = {
        name: [t.stage for t in tuners.compose(name, settings.tune, settings.search)] for name in tuners.TUNERS
    }
    assert stages_of == {
        "surrogate": ["surrogate"],
        "direct": ["search"],
        "combined": ["surrogate", "search"],
        "ranked": ["surrogate", "search"],
        "combined+direct": ["surrogate", "search", "search from default"],
    }
    with pytest.raises(ValueError, match="unknown tuner 'annealing'"):
        tuners.compose("annealing", settings.tune, settings.search)
    with pytest.raises(ValueError, match="tune.screen must be at least 1"):
        config.settings_for("sample", {"tune.screen": 0})
    for bad in ({"tune.around": -1}, {"tune.around_blocks": 0}):
        with pytest.raises(ValueError, match="tune.around ≥ 0 and tune.around_blocks ≥ 1"):
            config.settings_for("sample", bad)
    with pytest.raises(ValueError, match="tune.refit_on must be one of"):
        config.settings_for("sample", {"tune.refit_on": "both"})
    with pytest.raises(ValueError, match="ranked proposals, and only they"):
        DirectSearch(settings.search, "ranked")
    full = config.settings_for("full")
    assert [t.stage for t in tuners.compose(full.tuner, full.tune, full.search)] == ["surrogate", "search"]
    # only a composition with a direct search runs it again: the surrogate alone stays DiffTune's
    again = config.settings_for("full", {"search.repeats": 4})
    stages = lambda name: [t.stage for t in tuners.compose(name, again.tune, again.search)]  # noqa: E731
    assert stages("surrogate") == ["surrogate"]
    assert stages("direct") == ["search", "search again"]
    assert stages("ranked") == ["surrogate", "search", "search again"]


class DispatchWidthTuner:
    """A toy tuner: try dispatch widths 2..6, keep the best on val."""

    stage = "toy"
    needs_surrogate = False
    config = {"widths": [2, 3, 4, 5, 6]}

    def tune(self, start, problem):
        history, best, best_val = [], start, problem.score(start)
        for width in self.config["widths"]:
            table = start.copy()
            table.globals["dispatch_width"] = width
            history.append({"dispatch_width": width, "val_mape": problem.score(table)})
            if history[-1]["val_mape"] < best_val:
                best, best_val = table, history[-1]["val_mape"]
        return best, history


def _toward_five(engine, default):
    """A problem with no blocks whose val score is how far the dispatch width is from 5."""
    score = lambda t: abs(t.globals["dispatch_width"] - 5)  # noqa: E731
    return tuners.Problem(engine=engine, blocks=[], measured=np.array([]), default=default, score=score)


def test_a_second_start_from_the_default_wins_only_when_better_on_val(haswell):
    default = haswell.default_table()
    problem = _toward_five(haswell, default)
    second = tuners.FromDefault(DispatchWidthTuner())
    assert second.stage == "toy from default" and second.config == DispatchWidthTuner.config
    good, bad = default.copy(), default.copy()
    good.globals["dispatch_width"], bad.globals["dispatch_width"] = 5, 2
    kept, history = second.tune(good, problem)
    assert kept is good and len(history) == 5  # it ran, from LLVM's table, and lost the tie
    found, _ = second.tune(bad, problem)
    assert found.globals["dispatch_width"] == 5 and found.rows == default.rows


class StepTuner:
    """A toy tuner: one dispatch width up per run, as a local search that stops short."""

    stage = "step"
    needs_surrogate = False
    config = {}

    def tune(self, start, problem):
        table = start.copy()
        table.globals["dispatch_width"] += 1
        return table, [{"dispatch_width": table.globals["dispatch_width"]}]


def test_a_tuner_runs_again_from_its_result_while_val_falls(haswell):
    default = haswell.default_table()
    start = default.copy()
    start.globals["dispatch_width"] = 2
    problem = _toward_five(haswell, default)
    again = tuners.Repeated(StepTuner(), 10)
    assert again.stage == "step again" and again.config == {"tuner": StepTuner.config, "times": 10}
    found, history = again.tune(start, problem)
    # 3, 4, 5 each lower val; 6 does not, so the fourth run is the last and its table is dropped
    assert found.globals["dispatch_width"] == 5 and [h["run"] for h in history] == [1, 2, 3, 4]
    capped, history = tuners.Repeated(StepTuner(), 2).tune(start, problem)
    assert capped.globals["dispatch_width"] == 4 and len(history) == 2
    # a run that only ties is no gain: the first one ends it and the start is kept
    flat = tuners.Problem(engine=haswell, blocks=[], measured=np.array([]), default=default, score=lambda t: 1.0)
    kept, history = again.tune(start, flat)
    assert kept is start and len(history) == 1


@pytest.mark.slow
def test_a_toy_tuner_is_one_class_and_one_line(haswell, warehouse, monkeypatch):
    monkeypatch.setitem(tuners.TUNERS, "toy", lambda tune, search: [DispatchWidthTuner()])  # the one line
    ingest.ingest_measurements(SAMPLE / "bhive_hsw_sample.csv", "haswell", warehouse, haswell)
    ingest.assign_splits(warehouse)
    ctx = steps.StepContext(str(warehouse), haswell, config.settings_for("sample", {"tuner": "toy"}))
    steps.default_params(ctx)
    out = steps.learn(ctx, log=lambda *_: None)
    assert [h["stage"] for h in out.history] == ["toy"] * 5 + ["prune"]  # every composition ends pruned
    assert out.learned_val_mape <= out.default_val_mape
    learned, default = tables.load_table(warehouse, out.table_id), ctx.default_table()[1]
    # what the toy reached, or LLVM's where pruning's train check refuted it
    assert learned.globals["dispatch_width"] in (2, 3, 4, 5, 6, default.globals["dispatch_width"])
    assert learned.rows == default.rows


def test_limits_and_the_port_rule_come_from_the_engine(haswell):
    assert LIMITS["dispatch_width"] == (1, 1000) and LIMITS["micro_op_buffer_size"] == (2, 100000)
    table = haswell.default_table()
    table.globals["dispatch_width"] = LIMITS["dispatch_width"][1] + 1
    with pytest.raises(InvalidTable, match="dispatch_width"):
        haswell.compile(table)
    # HWPort05 and HWPort56 partially overlap: the one with fewer cycles loses its cycles
    ports = [("HWPort05", 2), ("HWPort56", 1), ("HWPort1", 1)]
    assert haswell.nested_ports(ports, []) == [("HWPort05", 2), ("HWPort56", 0), ("HWPort1", 1)]
    assert haswell.nested_ports(ports, ["HWPort05", "HWPort56"]) == ports  # unless LLVM's own row pairs them
    with pytest.raises(ValueError, match="HWPortX"):
        haswell.nested_ports([("HWPortX", 1)], [])


def test_sql_lives_in_the_warehouse_package():
    package = ROOT / "difftune_pipeline"
    sql = re.compile(r"\b(SELECT|INSERT INTO|CREATE TABLE|DELETE FROM)\b")
    holders = sorted(
        str(p.relative_to(package))
        for p in package.rglob("*.py")
        if sql.search(p.read_text()) and not str(p.relative_to(package)).startswith("warehouse/")
    )
    assert holders == []


def _imports(path) -> set[str]:
    """The difftune_pipeline modules and top-level packages a file imports."""
    import ast

    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            if node.module == "difftune_pipeline":  # from difftune_pipeline import x
                out |= {f"difftune_pipeline.{a.name}" for a in node.names}
    return out


# each layer may import only the layers after it (ARCHITECTURE.md)
LAYERS = ["cli", "defs", "steps", "config", "reporting", "tuners", "surrogates", "model", "ingest", "harness",
          "warehouse", "engine"]  # fmt: skip


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "difftune_pipeline" or len(parts) < 2:
        return None
    name = {"quality": "model", "ui": "cli", "definitions": "defs", "environment": "config"}.get(parts[1], parts[1])
    return name if name in LAYERS else None


def test_imports_point_downward_and_only_the_dagster_layer_imports_dagster():
    package = ROOT / "difftune_pipeline"
    for path in package.rglob("*.py"):
        module = "difftune_pipeline." + ".".join(path.relative_to(package).with_suffix("").parts)
        mine = _layer(module)
        if mine is None:
            continue
        imports = _imports(path)
        if mine not in ("defs", "cli"):
            assert not any(i.split(".")[0] == "dagster" for i in imports), module
        for imported in imports:
            theirs = _layer(imported)
            if theirs is not None and theirs != mine:
                assert LAYERS.index(theirs) > LAYERS.index(mine), f"{module} imports {imported}"


def test_modules_stay_small_and_the_command_stays_thin():
    """A module holds one concept: none over 300 lines, and `difftune materialize`
    is its arguments and what it prints (the run loop is ``defs.runner``)."""
    package = ROOT / "difftune_pipeline"
    sizes = {p.relative_to(package): len(p.read_text().splitlines()) for p in package.rglob("*.py")}
    assert {p: n for p, n in sizes.items() if n > 300} == {}
    assert sizes[Path("cli") / "materialize.py"] <= 150
