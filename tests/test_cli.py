"""The difftune command: simulate, evaluate, sql, params export|import|diff, report, ui."""

import json

from typer.testing import CliRunner

from difftune_pipeline.cli import app
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
    csv.write_text("4801d8,100\n4883c0014839d875f7,300\nzz,5\n4801c8,abc\n4829d8,80\n")
    out = _json(["simulate", "--csv", str(csv), "--json"])
    assert out["n"] == 5 and out["failed"] == 2
    assert 0 <= out["mape"] and -1 <= out["kendall_tau"] <= 1
    statuses = [r["status"] for r in out["results"]]
    assert "non-hex" in statuses[2] and "not a positive number" in statuses[3]


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
    assert runner.invoke(app, ["sql", "select count(*) as n from blocks", "--csv"]).stdout.splitlines() == ["n", "1"]


def test_sql_without_a_warehouse(cli_env):
    result = runner.invoke(app, ["sql", "select 1"])
    assert result.exit_code == 2 and "no warehouse" in result.output


def test_evaluate_reports_the_same_keys_as_simulate(tmp_path):
    csv = tmp_path / "m.csv"
    csv.write_text("4801d8,100\n4883c0014839d875f7,300\n4829d8,80\n")
    out = _json(["evaluate", "--csv", str(csv), "--mcpu", "haswell", "--json"])
    assert out["n"] == 3 and out["failed"] == 0 and out["mape"] > 0 and out["kendall_tau"] is not None
    assert out == _json(["simulate", "--csv", str(csv), "--mcpu", "haswell", "--json"])


def test_params_export_of_stored_tables(cli_env, haswell):
    from difftune_pipeline.warehouse import queries, writer

    table = haswell.default_table()
    table.rows["IMUL64rr"]["latency"] = [9]
    with writer(cli_env / "w.duckdb") as con:
        queries.save_table(con, "learned-test", table, kind="learned")
    out = cli_env / "t.json"
    for name in ("learned-test", "learned"):
        result = runner.invoke(app, ["params", "export", "--table", name, "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert json.loads(out.read_text())["opcodes"]["IMUL64rr"]["latency"] == [9]
    result = runner.invoke(app, ["params", "export", "--table", "nope", "--out", str(out)])
    assert result.exit_code == 2 and "no parameter table 'nope'" in result.output


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
    assert result.exit_code == 2 and "no learned table" in result.output and not (cli_env / "r.html").exists()


def test_materialize_refuses_a_bad_selection(cli_env):
    result = runner.invoke(app, ["materialize", "--select", "learned_params evaluation"])
    assert result.exit_code == 2 and "bad asset selection" in result.output
