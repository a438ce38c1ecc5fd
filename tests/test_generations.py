"""CPU generations and mechanism parameters as data: a CPU of a known generation
is one name added to its record, the engine reads a generation's facts rather
than CPU names, and a mechanism's parameter is named only where it is declared
and where its mechanism is simulated or modelled."""

import dataclasses
import re
from pathlib import Path

import pytest

from difftune_pipeline import harness
from difftune_pipeline.engine import Engine, InvalidTable, _engine, extended, generations, mechanisms

PACKAGE = Path(__file__).parent.parent / "difftune_pipeline"
NATIVE = PACKAGE / "engine" / "native"
# Where a mechanism is simulated (the engine's files) and modelled (the structured
# surrogate, which bounds what each mechanism costs).
MECHANISM_FILES = {
    "front_end": ("front_end.cpp", "front_end.h"),
    "memory": ("memory_unit.cpp", "memory_unit.h"),
    "bank_conflict": ("memory_unit.cpp", "memory_unit.h"),
    "page_walk": ("memory_unit.cpp", "memory_unit.h"),
    "pointer_chasing": ("pointer_chasing.cpp", "pointer_chasing.h"),
    "forwarded_load": ("forwarded_load.cpp", "forwarded_load.h"),
    "dtlb_miss": ("dtlb_miss.cpp", "dtlb_miss.h"),
    "physical_alias": ("memory_unit.cpp", "memory_unit.h"),
    "memory_ordering": ("memory_unit.cpp", "memory_unit.h"),
    "stack_engine": ("stack_engine.cpp", "stack_engine.h"),
    "move_elimination": ("move_elimination.cpp", "move_elimination.h"),
    "zero_shift": ("serialising.cpp", "serialising.h"),
    "locked": ("serialising.cpp", "serialising.h"),
    "x87_stack": ("serialising.cpp", "serialising.h"),
    "slow_lea": ("slow_lea.cpp", "slow_lea.h"),
    "harness_offset": ("simulate.cpp",),
}
# Two parameters were added to stored tables by a migration: history, which never changes.
MIGRATED = {"lcp_penalty", "store_forward_fail_penalty"}
BLOCK = "movq (%rdi), %rax\naddq %rax, %rbx\ncmpq %rbx, %rcx\njne .Lloop"


def _extended_cycles(mcpu: str) -> int:
    engine = Engine(mcpu)
    block = engine.parse_asm(BLOCK)
    block = harness.accesses(block, "bhive").attach(block)
    table = engine.default_table([block]).with_model(extended.for_cpu(mcpu), "bhive")
    result = engine.simulate([block], table)
    assert result.status == ["ok"], result.status
    return int(result.cycles[0])


def test_a_cpu_of_a_known_generation_is_one_name_added_to_its_record(monkeypatch):
    """Cooper Lake runs LLVM's Skylake-server model: once its name is in Skylake's
    record it simulates under the extended model exactly as Skylake-AVX512 does."""
    assert not extended.supported("cooperlake")
    with pytest.raises(ValueError, match="no rules for 'cooperlake'"):
        Engine("cooperlake").default_table().with_model(("front_end",))
    skylake = generations.of("skylake")
    monkeypatch.setattr(
        generations,
        "GENERATIONS",
        tuple(
            dataclasses.replace(g, cpus=(*g.cpus, "cooperlake")) if g is skylake else g for g in generations.GENERATIONS
        ),
    )
    assert extended.for_cpu("cooperlake") == extended.for_cpu("skylake-avx512")
    assert extended.defaults("cooperlake", extended.for_cpu("cooperlake"))["uop_queue_size"] == 64  # Skylake's
    assert _extended_cycles("cooperlake") == _extended_cycles("skylake-avx512")


def test_the_engine_takes_a_generations_facts_not_cpu_names():
    """An engine given no generation runs llvm-mca's pipeline only; the native
    code names no CPU."""
    table = Engine("haswell").default_table().with_model(extended.for_cpu("haswell"), "bhive")
    bare = _engine.Engine("haswell", {})
    globals_ = dict(table.globals) | dict.fromkeys(table.mechanisms, True)
    with pytest.raises(InvalidTable, match="no rules for haswell"):
        bare.compile(globals_, [])
    facts = _engine.Engine("haswell", generations.facts("haswell"))
    assert facts.compile(globals_, [])
    with pytest.raises(InvalidTable, match="lock_penalty = 1001 is outside the valid range 0..1000"):
        facts.compile({**dict(table.globals), "locked": True, "lock_penalty": 1001}, [])
    with pytest.raises(InvalidTable, match="lcp_penalty is missing"):
        facts.compile({k: v for k, v in globals_.items() if k != "lcp_penalty"}, [])
    with pytest.raises(InvalidTable, match="lock_penalty is not a parameter of the mechanisms that are on"):
        facts.compile({**globals_, "lock_penalty": 8}, [])
    names = {c for g in generations.GENERATIONS for c in g.cpus}
    for source in NATIVE.glob("*.[ch]*"):
        literals = set(re.findall(r'"([a-z0-9-]+)"', source.read_text()))
        assert not literals & names, f"{source.name} names CPUs {sorted(literals & names)}"


@pytest.mark.parametrize("parameter", sorted(mechanisms.PARAMETERS))
def test_a_mechanism_parameter_is_named_in_its_declaration_and_its_mechanisms_files(parameter):
    mechanism = mechanisms.PARAMETERS[parameter].mechanism
    surrogate = {PACKAGE / "surrogates" / f for f in ("structured.py", "structured_blocks.py")}
    allowed = {PACKAGE / "engine" / "mechanisms.py", *surrogate}
    allowed |= {NATIVE / f for f in MECHANISM_FILES[mechanism]}
    if parameter in MIGRATED:
        allowed.add(PACKAGE / "warehouse" / "schema.py")
    word = re.compile(rf"[\"']{parameter}[\"']")  # as code names it: prose may say "decoders"
    named = {p for p in PACKAGE.rglob("*") if p.suffix in (".py", ".cpp", ".h") and word.search(p.read_text())}
    assert named <= allowed, sorted(str(p.relative_to(PACKAGE)) for p in named - allowed)


def test_every_generation_is_consistent_with_the_declaration():
    for g in generations.GENERATIONS:
        assert set(g.extended) <= set(g.mechanisms) <= set(mechanisms.MECHANISMS), g.name
        assert ("front_end" in g.mechanisms) == (g.dispatch_width is not None), g.name
        for m in g.mechanisms:
            assert set(mechanisms.REQUIRES.get(m, ())) <= set(g.mechanisms), (g.name, m)
    cpus = [c for g in generations.GENERATIONS for c in g.cpus]
    assert len(cpus) == len(set(cpus)), "a CPU in two generations"
    keys = {k for p in mechanisms.PARAMETERS.values() for k, _ in p.by_generation}
    assert keys <= {g.name for g in generations.GENERATIONS}
