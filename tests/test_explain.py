"""The engine's traces and ``difftune explain``: equal to llvm-mca's own views
where llvm-mca has them, and the expected explanation on hand-made blocks."""

import csv
import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from typer.testing import CliRunner

from conftest import SAMPLE, TEST_DATA
from difftune_pipeline.cli import app
from difftune_pipeline.engine import Engine, ParamTable
from difftune_pipeline.engine.reference import llvm_mca_views, view_differences
from difftune_pipeline.engine.trace import last_cycle
from difftune_pipeline.reporting.explain import LABEL_WIDTH, explain, timeline_cells, timeline_header

ITERATIONS, SHOWN = 100, 10
BLOCKS_PER_CPU = 100

POP_CHAIN = "popq %rax\npopq %rbx\npopq %rcx\naddq %rax, %rbx\n"
STORE_LOAD = "movq %rax, 8(%rsp)\nmovq 8(%rsp), %rax\naddq $1, %rax\n"
PORT_BOUND = (
    "vmulps %ymm0, %ymm1, %ymm2\nvmulps %ymm3, %ymm1, %ymm4\nvmulps %ymm5, %ymm1, %ymm6\nvmulps %ymm7, %ymm1, %ymm8\n"
)


def _rows(path, n):
    with open(path) as fh:
        return [h for h, _ in csv.reader(fh)][:n]


@pytest.mark.parametrize(
    "mcpu, path",
    [
        ("haswell", SAMPLE / "bhive_hsw_sample.csv"),
        ("skylake", TEST_DATA / "bhive_skl_100.csv"),
        ("ivybridge", TEST_DATA / "bhive_ivb_100.csv"),
    ],
)
def test_trace_equals_llvm_mca_timeline_resource_pressure_and_bottleneck_analysis(mcpu, path):
    engine = Engine(mcpu)
    # Identical input on both sides: the AT&T text both of them parse.
    blocks = [engine.parse_asm("\n".join(b.asm)) for b in engine.disassemble_many(_rows(path, BLOCKS_PER_CPU)) if b.ok]
    with ThreadPoolExecutor(2) as pool:
        references = list(pool.map(lambda b: llvm_mca_views(list(b.asm), mcpu, ITERATIONS, SHOWN), blocks))
    compared = 0
    for block, (doc, text) in zip(blocks, references):
        trace = engine.trace(block, iterations=ITERATIONS, shown=SHOWN)
        assert trace.cycles == engine.simulate([block]).cycles[0]
        if doc is None:
            assert trace.cycles is None, block.asm
            continue
        # Cycles, units, every timeline cycle, every resource-pressure double, the bottleneck percentages.
        assert view_differences(trace, doc, text) == [], block.asm
        # ... and drawn character by character as the binary draws it.
        lines = text.split("\n")
        at = lines.index("Timeline view:")
        header = timeline_header(last_cycle(trace.timeline))
        assert lines[at + 1 : at + 1 + len(header)] == header
        rows = [line for line in lines[at:] if re.match(r"\[\d+,\d+\]", line)]
        assert len(rows) == len(trace.timeline)
        mine = [
            label.ljust(LABEL_WIDTH) + "".join(ch for ch, _ in cells) for label, cells in timeline_cells(trace.timeline)
        ]
        assert all(r.startswith(m + "   ") for m, r in zip(mine, rows)), block.asm
        # Every '=' of the timeline has a cause: the operands until the instruction is ready, then resources.
        for e in trace.timeline:
            after = {c: w for c, w in e.cause_by_cycle().items() if c > e.dispatched}
            assert sorted(after) == list(range(e.dispatched + 1, e.issued)), block.asm
            assert all((w == "resource") == (c >= e.ready) for c, w in after.items()), block.asm
        compared += 1
    assert compared >= 0.9 * len(blocks)


def _view(engine, text, table=None, **kw):
    report = explain(engine, engine.parse_asm(text), table, **kw)
    return report, report["views"][0]


def test_a_pop_chain_waits_on_registers_and_is_bound_by_its_loop_carried_chain(haswell):
    report, v = _view(haswell, POP_CHAIN)
    assert report["row_keys"] == ["POP64r", "POP64r", "POP64r", "ADD64rr"]
    assert v["bottleneck"]["kind"] == "loop_carried_latency"
    assert set(v["wait_cycles"]) == {"register"}  # every wait is the RSP chain
    assert v["bottleneck"]["backend_pressure_pct"]["registers"] > 50
    faster = haswell.default_table()
    faster.rows["POP64r"]["latency"] = [1]
    _, quick = _view(haswell, POP_CHAIN, faster)
    assert quick["cycles"] < v["cycles"] / 2


def test_a_port_bound_vector_block_waits_on_busy_ports(haswell):
    _, v = _view(haswell, PORT_BOUND)
    assert v["bottleneck"]["kind"] == "port_pressure"
    assert set(v["wait_cycles"]) == {"resource"}
    per_iteration = v["pressure_per_iteration"]
    assert per_iteration["HWPort0"] + per_iteration["HWPort1"] == pytest.approx(4.0)  # 4 multiplies on ports 0 and 1
    assert v["bottleneck"]["busiest_unit"] in ("HWPort0", "HWPort1")


def test_memory_waits_and_dispatch_stalls_are_told_apart(haswell):
    # Stores leave in order (MCA's load/store unit), so the second and third wait on memory order.
    _, stores = _view(haswell, "movq %rax, (%rdi)\nmovq %rbx, 8(%rdi)\nmovq %rcx, 16(%rdi)\n")
    assert "memory" in stores["wait_cycles"] and "register" not in stores["wait_cycles"]
    # A long division chain fills the scheduler: later instructions cannot even be dispatched.
    _, full = _view(haswell, "vdivps %ymm0, %ymm1, %ymm1\n" + "addq $1, %rax\n" * 20, shown=20)
    assert full["wait_cycles"].get("scheduler-full", 0) > 0
    stalled = [e for e in full["timeline"] if any(first < e["dispatched"] for first, _, _ in e["waits"])]
    assert stalled
    assert all(cause == "scheduler-full" for e in stalled for f, last, cause in e["waits"] if last < e["dispatched"])


def test_against_lists_the_rows_that_differ_and_what_each_moves(haswell):
    slow = haswell.default_table()
    slow.rows["VMULPSYrr"]["ports"] = {"HWPort0": 1}  # one port instead of two
    slow.rows["ADD64rr"]["latency"] = [7]  # not in the block: not listed
    slow.globals["micro_op_buffer_size"] += 10
    report = explain(
        haswell,
        haswell.parse_asm(PORT_BOUND),
        slow,
        label="slow",
        against=haswell.default_table(),
        against_label="llvm",
    )
    mine, theirs = report["views"]
    assert (mine["label"], theirs["label"]) == ("slow", "llvm")
    assert mine["cycles"] > theirs["cycles"]
    by_row = {c["row"]: c for c in report["changes"]}
    assert set(by_row) == {"VMULPSYrr", "micro_op_buffer_size"}
    ports = by_row["VMULPSYrr"]
    assert ports["cycles_without"] == haswell.simulate([haswell.parse_asm(PORT_BOUND)]).cycles[0]
    assert ports["effect"] == mine["cycles"] - ports["cycles_without"] > 0
    assert {(p["param"], p["base"], p["value"]) for p in ports["values"]} == {
        ("port:HWPort01", 1, 0),
        ("port:HWPort0", 0, 1),
    }
    assert report["changes"][0]["row"] == "VMULPSYrr"  # largest effect first
    same = explain(haswell, haswell.parse_asm(PORT_BOUND), against=haswell.default_table())
    assert same["changes"] == []


def test_a_bad_block_is_refused(haswell):
    with pytest.raises(ValueError, match="cannot explain"):
        explain(haswell, haswell.disassemble("ffff"))
    trace = haswell.trace(haswell.disassemble("ffff"))
    assert trace.cycles is None and trace.status.startswith("bad block")
    with pytest.raises(ValueError):
        haswell.trace(haswell.parse_asm(PORT_BOUND), iterations=0)


def test_the_cycle_cap_ends_a_trace_with_its_reason(haswell):
    trace = haswell.trace(haswell.parse_asm(POP_CHAIN), cycle_cap=50)
    assert trace.cycles is None and "cycle cap" in trace.status
    # What happened before the cap is kept; what did not is -1.
    assert trace.timeline[0].dispatched == 0 and trace.timeline[0].retired > 0
    assert trace.timeline[-1].retired == -1


def test_a_trace_records_at_most_its_iterations_and_refuses_unbounded_work(haswell):
    block = haswell.parse_asm(PORT_BOUND)
    assert len(haswell.trace(block, iterations=2, shown=5).timeline) == 2 * 4
    assert haswell.trace(block, iterations=2, shown=0).timeline == []
    for kw in ({"iterations": 0}, {"iterations": 10**6}, {"shown": 10**4}, {"cycle_cap": 2**31}):
        with pytest.raises(ValueError, match="a trace needs"):
            haswell.trace(block, **kw)


def test_a_table_that_leaves_rows_to_llvm_is_explained_with_llvm_s_rows(haswell):
    empty = ParamTable("haswell", haswell.llvm_version, haswell.default_table().globals, {})
    zero_idiom = "xorl %eax, %eax\naddl %eax, %ebx\n" + PORT_BOUND  # a variant row: XOR32rr#CLASS
    report, v = _view(haswell, zero_idiom, empty, against=haswell.default_table())
    _, default = _view(haswell, zero_idiom)
    assert v["bottleneck"] == default["bottleneck"] and v["cycles"] == default["cycles"]
    assert report["changes"] == []


def test_explain_command(tmp_path, monkeypatch):
    monkeypatch.setenv("DIFFTUNE_WAREHOUSE", str(tmp_path / "w.duckdb"))
    runner = CliRunner()
    asm = tmp_path / "b.s"
    asm.write_text(PORT_BOUND)
    slow = Engine("haswell").default_table()
    slow.rows["VMULPSYrr"]["ports"] = {"HWPort0": 1}
    slow.to_json(tmp_path / "slow.json")
    out = runner.invoke(
        app, ["explain", "--asm", str(asm), "--params", str(tmp_path / "slow.json"), "--against", "default"]
    )
    assert out.exit_code == 0, out.output
    assert "Timeline" in out.stdout and "[0,0]" in out.stdout and "resource pressure per iteration" in out.stdout
    assert "rows of this block where" in out.stdout and "port:HWPort01[0] 1→0" in out.stdout
    assert re.search(r"VMULPSYrr.*\+\d+", out.stdout)  # the effect of the change on the total
    as_json = runner.invoke(app, ["explain", "--hex", "4801d8", "--json", "--shown", "2"])
    assert as_json.exit_code == 0, as_json.output
    report = json.loads(as_json.stdout)
    assert report["asm"] == ["addq %rbx, %rax"] and report["measured"] is None
    assert len(report["views"][0]["timeline"]) == 2 and "changes" not in report
    for args, message in [
        ([], "exactly one of --hex and --asm"),
        (["--hex", "4801d8", "--asm", str(asm)], "exactly one of --hex and --asm"),
        (["--hex", "zz"], "--hex"),
        (["--hex", "4801d8", "--mcpu", "pentium"], "unknown CPU"),
        (["--hex", "4801d8", "--params", str(tmp_path / "none.json")], "is not a file"),
        (["--hex", "4801d8", "--params", str(asm), "--table", "default"], "at most one"),
        (["--hex", "4801d8", "--table", "learned"], "no warehouse"),
        (["--hex", "4801d8", "--params", str(tmp_path / "slow.json"), "--mcpu", "skylake"], "not skylake"),
        (["--hex", "ffff"], "cannot explain"),
    ]:
        bad = runner.invoke(app, ["explain", *args])
        assert bad.exit_code == 2, (args, bad.output)
        assert message in bad.output, (args, bad.output)


def test_explain_shows_the_measured_cycles_of_a_block_in_the_warehouse(tmp_path, monkeypatch, haswell):
    from difftune_pipeline.ingest import batches as ingest

    warehouse = tmp_path / "w.duckdb"
    (tmp_path / "m.csv").write_text("4801d8,123.5\n")
    ingest.ingest_measurements(tmp_path / "m.csv", "haswell", warehouse, haswell)
    monkeypatch.setenv("DIFFTUNE_WAREHOUSE", str(warehouse))
    runner = CliRunner()
    found = runner.invoke(app, ["explain", "--hex", "4801D8", "--json"])
    assert found.exit_code == 0, found.output
    assert json.loads(found.stdout)["measured"] == 123.5
    text = runner.invoke(app, ["explain", "--hex", "4801d8"])
    assert "measured: 123.5 cycles per 100 iterations" in text.stdout
    block = haswell.disassemble("4801d8")
    steady = haswell.simulate([block]).steady[0]
    assert "error vs measured (steady state)" in text.stdout
    assert f"{100 * (steady - 123.5) / 123.5:+.1f}%" in text.stdout
    # The error compares the steady state, cycles per 100 iterations, whatever --iterations is.
    longer = runner.invoke(app, ["explain", "--hex", "4801d8", "--iterations", "1000"])
    thousand = haswell.simulate([block], iterations=1000)
    assert thousand.steady[0] == steady and f"{100 * (steady - 123.5) / 123.5:+.1f}%" in longer.stdout
    assert str(thousand.cycles[0]) in longer.stdout  # the total cycles, of the 1,000 iterations
    other_cpu = runner.invoke(app, ["explain", "--hex", "4801d8", "--mcpu", "skylake", "--json"])
    assert json.loads(other_cpu.stdout)["measured"] is None


def test_the_comparison_with_llvm_mca_notices_a_difference(haswell):
    block = haswell.parse_asm(PORT_BOUND)
    doc, text = llvm_mca_views(list(block.asm), "haswell", ITERATIONS, SHOWN)
    assert view_differences(haswell.trace(block, iterations=ITERATIONS, shown=SHOWN), doc, text) == []
    slower = haswell.default_table()
    slower.rows["VMULPSYrr"]["ports"] = {"HWPort0": 1}
    found = view_differences(haswell.trace(block, slower, iterations=ITERATIONS, shown=SHOWN), doc, text)
    assert any(f.startswith("cycles") for f in found) and any(f.startswith("timeline entry") for f in found)
    assert any(f.startswith("resource pressure") for f in found)


def test_long_waits_are_stored_as_runs_of_cycles(haswell):
    slow = haswell.default_table()
    slow.rows["IMUL64rr"]["latency"] = [900]
    trace = haswell.trace(haswell.parse_asm("imulq %rax, %rax\naddq $1, %rbx\n"), slow, iterations=20, shown=20)
    waited = sum(last - first + 1 for e in trace.timeline for first, last, _ in e.waits)
    assert waited > 100_000 and sum(len(e.waits) for e in trace.timeline) < 200  # thousands of cycles, a few runs
    assert trace.wait_cycles()["register"] == sum(
        last - first + 1 for e in trace.timeline for first, last, cause in e.waits if cause == "register"
    )


def test_explain_refuses_what_it_cannot_show(haswell):
    block = haswell.parse_asm("addq $1, %rax\n" * 1001)
    with pytest.raises(ValueError, match="at most 1000"):
        explain(haswell, block)
    with pytest.raises(ValueError, match="timeline rows"):
        explain(haswell, haswell.parse_asm("addq $1, %rax\n" * 100), shown=51)
    with pytest.raises(ValueError, match="NUL"):
        haswell.parse_asm("\x00" * 100_000)


def test_explain_command_resists_hostile_input(tmp_path, monkeypatch):
    monkeypatch.setenv("DIFFTUNE_WAREHOUSE", str(tmp_path / "w.duckdb"))
    runner = CliRunner()
    for name, content in [("zeros.s", b"\x00" * 200_000), ("huge.s", b"addq $1, %rax\n" * 100_000)]:
        (tmp_path / name).write_bytes(content)
        out = runner.invoke(app, ["explain", "--asm", str(tmp_path / name)])
        assert out.exit_code == 2 and out.output.startswith("error:"), out.output
    # A file name or an instruction never becomes markup or terminal control.
    table = Engine("haswell").default_table()
    table.rows["ADD64rr"]["latency"] = [3]
    (tmp_path / "y[").mkdir()
    weird = tmp_path / "y[/red]\x1b[31m.json"  # in the folder "y["
    table.to_json(weird)
    (tmp_path / "esc.s").write_text('addq %rax, %rbx\njmp "\x1b]0;pwned\x07"\n')
    out = runner.invoke(
        app, ["explain", "--asm", str(tmp_path / "esc.s"), "--params", str(weird), "--against", "default"]
    )
    assert out.exit_code == 0, out.output
    assert "\x1b" not in out.stdout and "y[/red]" in out.stdout and "\\x1b" in out.stdout
    # Timeline rows are never wrapped, however narrow the terminal.
    wide = runner.invoke(app, ["explain", "--hex", "4801d84889c3", "--shown", "40"], terminal_width=60)
    rows = [line for line in wide.stdout.splitlines() if re.match(r"\[\d+,\d+\]", line)]
    assert len(rows) == 80 and all(line.rstrip().endswith(("%rax", "%rbx")) for line in rows)
    # The measured cycles: why there are none.
    asm = runner.invoke(app, ["explain", "--asm", str(tmp_path / "esc.s"), "--json"])
    assert json.loads(asm.stdout)["measured_note"].startswith("looked up for --hex blocks only")
    busy = runner.invoke(app, ["explain", "--hex", "4801d8", "--warehouse", str(weird)])
    assert busy.exit_code == 0 and "measured: unavailable" in busy.stdout


def test_a_notable_block_that_cannot_be_explained_is_reported_with_its_reason():
    from difftune_pipeline.defs.metadata import explained
    from difftune_pipeline.reporting.report import explained_html

    entry = {"case": "worst remaining", "block_id": "b1", "hex": "4801d8", "error": "cannot explain <this>"}
    assert "cannot explain &lt;this&gt;" in explained_html(entry)
    assert "cannot explain <this>" in explained(entry).value
