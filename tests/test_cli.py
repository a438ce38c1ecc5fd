"""The difftune command: simulate, evaluate, sql, params export|import|diff, report, ui."""

import json
import os

import pytest
from typer.testing import CliRunner

from difftune_pipeline.cli import app
from difftune_pipeline.engine import ParamTable
from difftune_pipeline.engine.reference import llvm_mca_cycles

runner = CliRunner()


def _json(args):
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_simulate_hex_matches_llvm_mca(haswell):
    out = _json(["simulate", "--mcpu", "haswell", "--hex", "4801d8", "--hex", "4883c0014839d875f7", "--json"])
    assert set(out) >= {"n", "failed", "mape", "kendall_tau", "results"}
    assert out["n"] == 2 and out["failed"] == 0 and out["mape"] is None
    for r in out["results"]:
        assert r["cycles"] == llvm_mca_cycles(r["asm"], "haswell")


def test_simulate_csv_reports_metrics_and_bad_rows(tmp_path):
    csv = tmp_path / "b.csv"
    csv.write_text("4801d8,100\n480fafc0,280\nzz,5\n4801c8,abc\n4801d84801c3,210\n")
    out = _json(["simulate", "--csv", str(csv), "--json"])
    assert out["n"] == 5 and out["failed"] == 2 and out["measure"] == "steady"
    assert [r["steady_cycles_per_100"] for r in out["results"]] == [100.0, 300.0, None, None, 200.0]
    assert out["mape"] == pytest.approx((0 + 20 / 280 + 10 / 210) / 3) and out["kendall_tau"] == 1.0
    total = _json(["simulate", "--csv", str(csv), "--json", "--measure", "total"])
    assert total["mape"] == pytest.approx((3 / 100 + 23 / 280 + 7 / 210) / 3)
    statuses = [r["status"] for r in out["results"]]
    assert "non-hex" in statuses[2] and "is not a number" in statuses[3]


def test_simulate_asm_file_and_params_round_trip(tmp_path):
    asm = tmp_path / "b.s"
    asm.write_text("imulq %rax, %rax\naddq %rax, %rbx\n")
    params = tmp_path / "p.json"
    result = runner.invoke(app, ["params", "export", "--mcpu", "haswell", "--out", str(params)])
    assert result.exit_code == 0, result.output
    default = _json(["simulate", "--asm", str(asm), "--json"])
    exported = _json(["simulate", "--asm", str(asm), "--params", str(params), "--json"])
    assert (
        default["results"][0]["cycles"]
        == exported["results"][0]["cycles"]
        == llvm_mca_cycles(["imulq %rax, %rax", "addq %rax, %rbx"], "haswell")
    )
    table = json.loads(params.read_text())
    table["opcodes"]["IMUL64rr"]["latency"] = [10]
    params.write_text(json.dumps(table))
    slower = _json(["simulate", "--asm", str(asm), "--params", str(params), "--json"])
    assert slower["results"][0]["cycles"] > default["results"][0]["cycles"]


@pytest.mark.slow
def test_a_table_is_simulated_under_its_own_model_unless_told(tmp_path):
    asm = tmp_path / "b.s"
    asm.write_text("movq %rax, (%rsi)\nmovq (%rdi), %rax\n")  # BHive's harness: one address
    params = tmp_path / "p.json"
    assert runner.invoke(app, ["params", "export", "--mcpu", "haswell", "--out", str(params)]).exit_code == 0
    plain = _json(["simulate", "--asm", str(asm), "--params", str(params), "--json"])
    extended = _json(["simulate", "--asm", str(asm), "--params", str(params), "--model", "extended", "--harness",
                      "bhive", "--json"])  # fmt: skip
    assert plain["model"] == "llvm-mca" and extended["model"].startswith("llvm-mca+front_end+memory")
    # each load takes the store's data, forwarded (forwarded_load: 5 cycles an iteration), not llvm-mca's 1
    assert extended["results"][0]["cycles"] >= 4 * plain["results"][0]["cycles"]
    table = ParamTable.from_json(params).with_model(("front_end", "memory"), "bhive")
    table.to_json(params)
    recorded = _json(["simulate", "--asm", str(asm), "--params", str(params), "--json"])
    assert recorded["model"] == "llvm-mca+front_end+memory@bhive"
    assert recorded["results"][0]["cycles"] >= 5 * plain["results"][0]["cycles"]  # its own row: 6 cycles an iteration
    symbolic = _json(["simulate", "--asm", str(asm), "--params", str(params), "--harness", "none", "--json"])
    assert symbolic["results"][0]["cycles"] < 2 * plain["results"][0]["cycles"]  # (%rsi), (%rdi): no match
    refused = {
        ("--model", "llvm-mca+telepathy"): "unknown mechanism 'telepathy'",
        ("--harness", "qemu"): "unknown harness 'qemu'",
        ("--model", "auto"): "--model auto chooses on a pipeline's val split",
    }
    for (option, value), message in refused.items():
        result = runner.invoke(app, ["simulate", "--asm", str(asm), option, value])
        assert result.exit_code != 0 and message in result.output, result.output


def test_simulate_refuses_an_invalid_table(tmp_path):
    params = tmp_path / "p.json"
    runner.invoke(app, ["params", "export", "--out", str(params)])
    table = json.loads(params.read_text())
    table["opcodes"]["IMUL64rr"]["uops"] = 99999
    params.write_text(json.dumps(table))
    result = runner.invoke(app, ["simulate", "--hex", "4801d8", "--params", str(params)])
    assert result.exit_code == 2
    assert "IMUL64rr" in result.output and "uops" in result.output


def test_sql_reads_and_cannot_write(cli_env, haswell):
    from difftune_pipeline.ingest import batches as ingest

    csv = cli_env / "m.csv"
    csv.write_text("4801d8,100\n")
    ingest.ingest_measurements(csv, "haswell", cli_env / "w.duckdb", haswell)
    result = runner.invoke(app, ["sql", "select count(*) as n from blocks", "--csv"])
    assert result.exit_code == 0 and result.stdout.splitlines() == ["n", "1"]
    assert json.loads(runner.invoke(app, ["sql", "select hex from blocks", "--json"]).stdout) == [{"hex": "4801d8"}]
    result = runner.invoke(app, ["sql", "delete from blocks"])
    assert result.exit_code == 2 and "read-only" in result.output
    refused = {  # what DuckDB calls MULTI, LOAD and CALL, in a user's words
        "pivot blocks on status using count(*)": "list them, PIVOT t ON c IN (...)",
        "install httpfs": "not INSTALL or LOAD",
        "checkpoint": "not CALL or CHECKPOINT",
    }
    for sql, words in refused.items():
        result = runner.invoke(app, ["sql", sql])
        assert result.exit_code == 2 and words in result.output, result.output
    pivot = runner.invoke(app, ["sql", "pivot (select status from blocks) on status in ('ok') using count(*)", "--csv"])
    assert pivot.exit_code == 0 and pivot.stdout.splitlines() == ["ok", "1"], pivot.output
    assert runner.invoke(app, ["sql", "select count(*) as n from blocks", "--csv"]).stdout.splitlines() == ["n", "1"]


def test_sql_without_a_warehouse(cli_env):
    result = runner.invoke(app, ["sql", "select 1"])
    assert result.exit_code == 2 and "no warehouse" in result.output


def test_evaluate_reports_the_same_keys_as_simulate(tmp_path):
    csv = tmp_path / "m.csv"
    csv.write_text("4801d8,100\n480fafc0,280\n4801d84801c3,210\n")
    out = _json(["evaluate", "--csv", str(csv), "--mcpu", "haswell", "--json"])
    assert out["n"] == 3 and out["failed"] == 0 and out["mape"] > 0 and out["kendall_tau"] is not None
    assert out == _json(["simulate", "--csv", str(csv), "--mcpu", "haswell", "--json"])


def test_params_export_of_stored_tables(cli_env, haswell):
    from difftune_pipeline.warehouse import tables, writer

    table = haswell.default_table()
    table.rows["IMUL64rr"]["latency"] = [9]
    with writer(cli_env / "w.duckdb") as con:
        tables.save_table(con, "learned-test", table, kind="learned")
    out = cli_env / "t.json"
    for name in ("learned-test", "learned"):
        result = runner.invoke(app, ["params", "export", "--table", name, "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert json.loads(out.read_text())["opcodes"]["IMUL64rr"]["latency"] == [9]
    result = runner.invoke(app, ["params", "export", "--table", "nope", "--out", str(out)])
    assert result.exit_code == 2 and "no parameter table 'nope'" in result.output
    other = runner.invoke(app, ["params", "export", "--table", "learned-test", "--mcpu", "skylake", "--out", str(out)])
    assert other.exit_code == 2 and "learned-test is a table of -mcpu=haswell, not skylake" in other.output


@pytest.mark.slow
def test_params_import_and_diff(cli_env, tmp_path):
    params = tmp_path / "p.json"
    assert runner.invoke(app, ["params", "export", "--out", str(params)]).exit_code == 0
    table = json.loads(params.read_text())
    table["opcodes"]["IMUL64rr"]["latency"] = [7]
    table["opcodes"]["ADD64rr"]["ports"]["HWPort0156"] = 2
    table["globals"]["dispatch_width"] = 6
    params.write_text(json.dumps(table))
    result = runner.invoke(app, ["params", "import", str(params), "--id", "hand-tuned"])
    assert result.exit_code == 0 and "stored" in result.output
    assert "already stored" in runner.invoke(app, ["params", "import", str(params), "--id", "hand-tuned"]).output
    for ref in ("hand-tuned", str(params)):
        out = runner.invoke(app, ["params", "diff", ref, "--csv"])
        assert out.exit_code == 0, out.output
        assert out.stdout.splitlines() == [
            "opcode,param,idx,base,value,delta",
            "*,dispatch_width,0,4,6,2",
            "ADD64rr,port:HWPort0156,0,1,2,1",
            "IMUL64rr,latency,0,3,7,4",
        ]
    shown = runner.invoke(app, ["params", "diff", "hand-tuned"])
    assert shown.exit_code == 0 and "3 parameters differ" in shown.output
    table["opcodes"]["IMUL64rr"]["uops"] = 0  # the engine refuses it: nothing is stored
    params.write_text(json.dumps(table))
    bad = runner.invoke(app, ["params", "import", str(params), "--id", "broken"])
    assert bad.exit_code == 2 and "IMUL64rr" in bad.output
    assert runner.invoke(app, ["params", "diff", "broken"]).exit_code == 2


def test_report_needs_a_learned_table(cli_env, haswell):
    from difftune_pipeline.ingest import batches as ingest

    result = runner.invoke(app, ["report", "--out", str(cli_env / "r.html")])
    assert result.exit_code == 2 and "no warehouse" in result.output
    (cli_env / "m.csv").write_text("4801d8,100\n")
    ingest.ingest_measurements(cli_env / "m.csv", "haswell", cli_env / "w.duckdb", haswell)
    result = runner.invoke(app, ["report", "--out", str(cli_env / "r.html")])
    assert result.exit_code == 2 and "no evaluation" in result.output and not (cli_env / "r.html").exists()


def test_materialize_refuses_a_bad_selection(cli_env):
    result = runner.invoke(app, ["materialize", "--select", "learned_params evaluation"])
    assert result.exit_code == 2 and "is not an asset selection" in result.output


def test_materialize_narrows_to_a_uarch_and_says_when_it_has_nothing(cli_env, monkeypatch):
    refused = runner.invoke(app, ["materialize", "--uarch", "pentium5"])
    assert refused.exit_code == 2 and "pentium5: not a CPU LLVM" in refused.output
    monkeypatch.setenv("DAGSTER_HOME", str(cli_env / "home"))
    (cli_env / "home").mkdir()
    empty = runner.invoke(app, ["materialize", "--select", "key:evaluation", "--uarch", "skylake"])
    assert empty.exit_code == 0 and "no partition of skylake: it has no measurements" in empty.output


@pytest.fixture
def stocked(cli_env, haswell):
    """A warehouse with one measured block."""
    from difftune_pipeline.ingest import batches as ingest

    (cli_env / "m.csv").write_text("4801d8,100\n")
    ingest.ingest_measurements(cli_env / "m.csv", "haswell", cli_env / "w.duckdb", haswell)
    return cli_env / "w.duckdb"


@pytest.mark.parametrize(
    "sql, refusal",
    [
        ("copy (select 1 as a) to '{warehouse}'", "not COPY"),
        ("copy (select 1 as a) to '{tmp}/out.csv'", "not COPY"),
        ("select * from read_csv('/etc/passwd')", "disabled"),
        ("select * from read_text('/etc/passwd')", "disabled"),
        ("attach '{tmp}/other.duckdb' (READ_WRITE)", "not ATTACH"),
        ("install httpfs", "not INSTALL or LOAD"),
        ("load httpfs", "not INSTALL or LOAD"),
        ("set threads = 1", "not SET"),
        ("pragma threads = 1", "not SET"),
        ("create temp table x as select 1", "not CREATE"),
        ("delete from blocks", "not DELETE"),
        ("select 1; select 2", "exactly one SQL statement, got 2"),
        ("", "exactly one SQL statement, got 0"),
        ("selec 1", "syntax error"),
        ("explain analyze select 1", "not EXPLAIN ANALYZE"),
        ("explain analyze create temp table q as select 1", "not EXPLAIN ANALYZE"),
        ("explain create table q (a int)", "not CREATE"),
        ("/* hidden */ explain analyze select 1", "start the statement with EXPLAIN"),
    ],
)
def test_sql_refuses_everything_but_reading_the_warehouse(stocked, sql, refusal):
    before = stocked.read_bytes()
    result = runner.invoke(app, ["sql", sql.format(warehouse=stocked, tmp=stocked.parent)])
    assert result.exit_code == 2 and result.stdout == ""
    assert refusal in result.stderr and "Traceback" not in result.output
    assert stocked.read_bytes() == before
    assert not (stocked.parent / "out.csv").exists() and not (stocked.parent / "other.duckdb").exists()


def test_sql_reads_views_and_describes(stocked):
    assert _json(["sql", "select count(*) as n from usable_measurements", "--json"]) == [{"n": 1}]
    assert {r["column_name"] for r in _json(["sql", "describe batches", "--json"])} >= {"batch_id", "status"}
    assert _json(["sql", "explain select 1", "--json"])[0]["explain_key"] == "physical_plan"


def _strict_json(text):
    """JSON as the standard defines it: NaN and Infinity are not JSON."""
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in JSON output"))


def test_json_output_has_null_for_undefined_numbers(stocked, tmp_path):
    out = runner.invoke(app, ["sql", "select 'nan'::double as x, 'inf'::double as y, 1.5 as z", "--json"])
    assert out.exit_code == 0 and _strict_json(out.stdout) == [{"x": None, "y": None, "z": 1.5}]
    one = tmp_path / "one.csv"
    one.write_text("4801d8,100\n")  # one measured block: Kendall tau is undefined
    report = runner.invoke(app, ["simulate", "--csv", str(one), "--json"])
    assert report.exit_code == 0 and _strict_json(report.stdout)["kendall_tau"] is None
    ties = tmp_path / "ties.csv"
    ties.write_text("4801d8,100\n4801d8,100\n")  # all tied
    assert _strict_json(runner.invoke(app, ["simulate", "--csv", str(ties), "--json"]).stdout)["kendall_tau"] is None


@pytest.mark.parametrize(
    "args, message",
    [
        (["simulate", "--hex", "4801d8", "--iterations", "-5"], "--iterations"),
        (["simulate", "--hex", "4801d8", "--iterations", "0"], "--iterations"),
        (["simulate", "--hex", "4801d8", "--threads", "-3"], "--threads"),
        (["simulate", "--hex", "4801d8", "--mcpu", "foobar"], "unknown CPU 'foobar'"),
        (["simulate"], "give --csv, --hex or --asm"),
        (["simulate", "--csv", "{tmp}/empty.csv"], "has no blocks"),
        (["simulate", "--csv", "{tmp}/missing.csv"], "No such file"),
        (["evaluate", "--csv", "{tmp}/empty.csv"], "has no blocks"),
        (["params", "export", "--mcpu", "foobar", "--out", "{tmp}/t.json"], "unknown CPU 'foobar'"),
    ],
)
def test_bad_arguments_are_refused_on_stderr(tmp_path, args, message):
    (tmp_path / "empty.csv").write_text("\n\n")
    result = runner.invoke(app, [a.format(tmp=tmp_path) for a in args])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert message in result.stderr and "Traceback" not in result.output


def test_params_export_creates_the_folder(tmp_path):
    out = tmp_path / "new" / "deeper" / "t.json"
    result = runner.invoke(app, ["params", "export", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["mcpu"] == "haswell"


@pytest.mark.slow
def test_params_import_never_replaces_a_table_and_diff_needs_one_cpu(cli_env, tmp_path):
    params = tmp_path / "p.json"
    assert runner.invoke(app, ["params", "export", "--out", str(params)]).exit_code == 0
    assert runner.invoke(app, ["params", "import", str(params), "--id", "mine"]).exit_code == 0
    table = json.loads(params.read_text())
    table["opcodes"]["IMUL64rr"]["latency"] = [7]
    params.write_text(json.dumps(table))
    again = runner.invoke(app, ["params", "import", str(params), "--id", "mine"])
    assert again.exit_code == 2 and "already holds a different table" in again.stderr
    diff = runner.invoke(app, ["params", "diff", "mine", "--csv"])
    assert diff.stdout.splitlines() == ["opcode,param,idx,base,value,delta"]  # the first table, unchanged
    skylake = tmp_path / "skl.json"
    assert runner.invoke(app, ["params", "export", "--mcpu", "skylake", "--out", str(skylake)]).exit_code == 0
    other = runner.invoke(app, ["params", "diff", str(skylake), "--against", str(params)])
    assert other.exit_code == 2 and "-mcpu=skylake" in other.stderr and "not comparable" in other.stderr
    table["opcodes"]["IMUL64rr"]["uops"] = 0  # valid in shape, refused by the engine
    params.write_text(json.dumps(table))
    invalid = runner.invoke(app, ["params", "diff", str(params)])
    assert invalid.exit_code == 2 and "IMUL64rr" in invalid.stderr


def _document(**changes):
    doc = {
        "format": "difftune-params/1",
        "mcpu": "haswell",
        "llvm_version": "19.1.7",
        "globals": {"dispatch_width": 4, "micro_op_buffer_size": 192},
        "opcodes": {"IMUL64rr": {"latency": [3], "uops": 1, "read_advance": [], "ports": {"HWPort1": 1}}},
    }
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = doc
        for p in parents:
            node = node[p]
        node[last] = value
    return doc


@pytest.mark.parametrize(
    "doc, where",
    [
        ([1, 2], "(document): Input should be an object"),
        (_document(opcodes=[]), "opcodes: Input should be an object"),
        (_document(opcodes__IMUL64rr__ports=["HWPort1"]), "opcodes.IMUL64rr.ports: Input should be an object"),
        (_document(globals__dispatch_width=None), "globals.dispatch_width: Input should be a valid integer"),
        (_document(llvm_version=19), "llvm_version: Input should be a valid string"),
        (_document(mcpu=7), "mcpu: Input should be a valid string"),
        (_document(opcodes__IMUL64rr__latency=[10**10]), "opcodes.IMUL64rr.latency.0: Input should be less than"),
        (_document(opcodes__IMUL64rr__latency=[10**20]), "opcodes.IMUL64rr.latency.0"),
        (_document(opcodes__IMUL64rr__latency=["5"]), "opcodes.IMUL64rr.latency.0: Input should be a valid integer"),
        (_document(opcodes__IMUL64rr__latency=[1.7]), "opcodes.IMUL64rr.latency.0: Input should be a valid integer"),
        (_document(opcodes__IMUL64rr__uops=True), "opcodes.IMUL64rr.uops: Input should be a valid integer"),
        (_document(opcodes__IMUL64rr__read_advance=[[0, 0]]), "opcodes.IMUL64rr.read_advance.0"),
        (_document(opcodes__IMUL64rr__latncy=[3]), "opcodes.IMUL64rr.latncy: Extra inputs are not permitted"),
        (_document(format="something/2"), "format: Input should be 'difftune-params/1'"),
        ({k: v for k, v in _document().items() if k != "globals"}, "globals: Field required"),
    ],
)
def test_parameter_files_of_the_wrong_shape_are_refused_with_the_field(cli_env, tmp_path, doc, where):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    for args in (["params", "import", str(path)], ["simulate", "--hex", "4801d8", "--params", str(path)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and result.stdout == "", result.output
        assert "not a valid parameter table" in result.stderr and where in " ".join(result.stderr.split())
        assert "Traceback" not in result.output
    assert not (cli_env / "w.duckdb").exists()  # nothing stored


def test_a_parameter_file_with_a_byte_order_mark_loads(tmp_path):
    path = tmp_path / "bom.json"
    path.write_text("\ufeff" + json.dumps(_document()), encoding="utf-8")
    assert _json(["simulate", "--hex", "4801d8", "--params", str(path), "--json"])["failed"] == 0


def test_sql_shows_any_value_as_data(stocked):
    shown = runner.invoke(app, ["sql", "select '[/x]' as a, '[bold]hi' as \"[/b]\""])
    assert shown.exit_code == 0 and "[/x]" in shown.stdout and "[bold]hi" in shown.stdout and "[/b]" in shown.stdout
    nested = runner.invoke(app, ["sql", "select [1, 2] as l, {'k': 'v'} as s, null as n, opcodes from blocks", "--csv"])
    assert nested.exit_code == 0 and nested.stdout.splitlines() == [
        "l,s,n,opcodes",
        '"[1, 2]","{""k"": ""v""}",,"[""ADD64rr""]"',
    ]
    odd = _strict_json(
        runner.invoke(
            app,
            ["sql", "select interval 3 day as i, 'ab'::blob as b, sum(9223372036854775807::bigint) + 1 as big, "
             "12.345::decimal(38, 9) as d, union_value(k := 1) as u", "--json"],
        ).stdout
    )  # fmt: skip
    assert odd == [{"i": "3 days, 0:00:00", "b": "6162", "big": 9223372036854775808, "d": 12.345, "u": 1}]


def test_sql_stops_a_query_at_its_timeout(stocked):
    result = runner.invoke(app, ["sql", "select count(*) from range(100000000000)", "--timeout", "0.5"])
    assert result.exit_code == 2 and "longer than 0.5 s" in result.stderr


def test_sql_stops_a_runaway_query_at_its_memory_limit(stocked, monkeypatch):
    runaway = "select string_agg(b::varchar, ',') from range(50000000) u(b)"
    result = runner.invoke(app, ["sql", runaway, "--memory-limit", "100MB"])
    assert result.exit_code == 2 and "more memory than its limit, 100MB (--memory-limit" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    monkeypatch.setenv("DIFFTUNE_QUERY_MEMORY", "100MB")  # the setting, when the option is not given
    assert "more memory than its limit, 100MB" in runner.invoke(app, ["sql", runaway]).stderr
    # a sort spills; what it spills is bounded too
    spill = (
        "select count(*) from (select row_number() over (order by x) r from (select a::varchar || repeat('x', 50) "
        "|| b::varchar x from range(3000) t(a), range(1000) u(b))) where r % 1000 = 0"
    )
    spilled = runner.invoke(app, ["sql", spill, "--memory-limit", "60MB", "--temp-limit", "20MB"])
    assert spilled.exit_code == 2 and "more temporary disk than its limit, 20MB (--temp-limit" in spilled.stderr
    fine = runner.invoke(app, ["sql", spill, "--memory-limit", "60MB", "--temp-limit", "2GB", "--csv"])
    assert fine.exit_code == 0 and fine.stdout.splitlines()[1] == "3000"  # spilled within its limit
    bad = runner.invoke(app, ["sql", "select 1", "--memory-limit", "lots"])
    assert bad.exit_code == 2 and "--memory-limit='lots': a size such as 2GB" in bad.stderr


def test_a_duckdb_file_of_something_else_is_never_touched(cli_env):
    import duckdb

    foreign = cli_env / "foreign.duckdb"
    con = duckdb.connect(str(foreign))
    con.execute("CREATE TABLE mine (x INT)")
    con.close()
    before = foreign.read_bytes()
    for args in (["sql", "show tables"], ["batches", "list"], ["batches", "drop", "x"]):
        result = runner.invoke(app, [*args, "--warehouse", str(foreign)])
        assert result.exit_code == 2 and "no schema_version" in result.stderr, result.output
    assert foreign.read_bytes() == before


def test_a_long_error_is_cut_and_not_quoted(stocked):
    result = runner.invoke(app, ["sql", "select * from " + "a" * 60_000])
    assert result.exit_code == 2 and "more characters)" in result.stderr and len(result.stderr) < 3000
    missing = runner.invoke(app, ["batches", "drop", "nosuch"])
    assert missing.stderr.startswith("error: no batch 'nosuch'")


@pytest.mark.parametrize(
    "change, refusal",
    [
        ({"latency": []}, "latency has 0 entries; the instruction writes 1"),
        ({"latency": [3] * 50}, "latency has 50 entries"),
        ({"read_advance": [[0, 0, 1], [0, 0, 5]]}, "read_advance lists use 0 of write 0 twice"),
    ],
)
def test_rows_of_the_wrong_shape_for_the_instruction_are_refused(tmp_path, change, refusal):
    path = tmp_path / "p.json"
    doc = _document()
    doc["opcodes"]["IMUL64rr"].update(change)
    path.write_text(json.dumps(doc))
    result = runner.invoke(app, ["simulate", "--hex", "480fafc0", "--params", str(path)])
    assert result.exit_code == 2 and refusal in result.stderr, result.output


def test_parameter_files_with_duplicate_keys_or_odd_names(cli_env, tmp_path):
    dup = tmp_path / "dup.json"
    dup.write_text(json.dumps(_document()).replace('"uops": 1', '"uops": 1, "uops": 9'))
    result = runner.invoke(app, ["params", "import", str(dup)])
    assert result.exit_code == 2 and "duplicate key 'uops'" in result.stderr
    braces = tmp_path / "{brace}.json"
    braces.write_text(json.dumps(_document()))
    assert runner.invoke(app, ["params", "diff", str(braces), "--csv"]).exit_code == 0
    odd = tmp_path / os.fsdecode(b"\xff.json")
    odd.write_text(json.dumps(_document()))
    stored = runner.invoke(app, ["params", "import", str(odd), "--id", "odd"])
    assert stored.exit_code == 0, stored.output
    other_cpu = _document(mcpu="broadwell")
    other_cpu["opcodes"] = {}
    same_values = _document()
    same_values["opcodes"] = {}
    (tmp_path / "h.json").write_text(json.dumps(same_values))
    (tmp_path / "b.json").write_text(json.dumps(other_cpu))
    assert runner.invoke(app, ["params", "import", str(tmp_path / "h.json"), "--id", "E"]).exit_code == 0
    clash = runner.invoke(app, ["params", "import", str(tmp_path / "b.json"), "--id", "E"])
    assert clash.exit_code == 2 and "already holds a different table" in clash.stderr
    # the ids the pipeline gives its own tables are not an import's to take: a step that then
    # stored its table under the id would find it taken and keep the import
    for own in ("default", "learned", "default-haswell-c7098331a43f6e1", "learned-haswell-0a1b", "perturb-3-skylake-9"):
        taken = runner.invoke(app, ["params", "import", str(tmp_path / "h.json"), "--id", own])
        assert taken.exit_code == 2 and "the pipeline's own tables" in taken.stderr, own
    from difftune_pipeline.engine import ParamTable
    from difftune_pipeline.warehouse import tables, writer

    with writer(cli_env / "w.duckdb") as con, pytest.raises(ValueError, match="holds a table of kind 'imported'"):
        tables.save_table(con, "E", ParamTable.from_json(tmp_path / "h.json"), kind="default")
