"""Parameter spaces: encode/decode, deterministic sampling, valid extraction."""

import numpy as np
import polars as pl
import pytest

from difftune_pipeline.model.metrics import kendall_tau, mape, metrics_by_slice, slices
from difftune_pipeline.model.params import PRESETS, ParamSpace


@pytest.fixture(scope="module")
def space_and_default(haswell, sample_rows):
    blocks = haswell.disassemble_many([h for h, _ in sample_rows[:300]])
    default = haswell.default_table(blocks)
    keys = {k for b in blocks for k in b.row_keys if k in default.rows}
    return ParamSpace.create(keys, haswell), default, blocks


def test_encode_decode_round_trip(space_and_default):
    space, default, _ = space_and_default
    m, g = space.encode(default)
    assert m.shape == (len(space.keys), space.width)
    assert space.decode(m, g, default) == default


@pytest.mark.parametrize("preset", PRESETS)
def test_sampling_is_deterministic_and_valid(haswell, space_and_default, preset):
    space, default, blocks = space_and_default
    a, b = space.sample(preset, 3, default), space.sample(preset, 3, default)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert not np.array_equal(a[0], space.sample(preset, 4, default)[0])
    result = haswell.simulate(blocks, space.sampled_table(preset, 3, default))
    assert all(s == "ok" for s in result.status)


def test_an_extended_space_is_named_by_the_defaults_it_samples_around(haswell, space_and_default):
    """Sampled tables are regenerated from their id: an extended default whose
    values change (a pop row, a global) must name a new space, or the stored
    simulations of the old samples would be taken for the new ones."""
    space, default, _ = space_and_default
    keys = space.keys
    extended = default.with_model(("front_end", "stack_engine"))
    ids = {ParamSpace.create(keys, haswell, extended).fingerprint()}
    changed = extended.copy()
    changed.rows["POP64r"] = {**changed.rows["POP64r"], "latency": [1]}
    ids.add(ParamSpace.create(keys, haswell, changed).fingerprint())
    changed = extended.copy()
    changed.globals["stack_sync_uops"] = 2
    ids.add(ParamSpace.create(keys, haswell, changed).fingerprint())
    assert "POP64r" in keys and len(ids) == 3
    assert ParamSpace.create(keys, haswell, extended.copy()).fingerprint() in ids  # the same values: the same id
    assert ParamSpace.create(keys, haswell, default).fingerprint() == space.fingerprint()  # llvm-mca's: unchanged


def test_a_new_engine_revision_renames_extended_tables_and_spaces(haswell, space_and_default, monkeypatch):
    """Results stored under mechanisms that simulated differently are never reused."""
    from difftune_pipeline.engine import mechanisms

    space, default, _ = space_and_default
    ext = default.with_model(("memory",), "bhive")
    before = ext.fingerprint(), ParamSpace.create(space.keys, haswell, ext).fingerprint()
    plain = default.fingerprint(), space.fingerprint()
    monkeypatch.setattr(mechanisms, "REVISION", mechanisms.REVISION + 1)
    after = ext.fingerprint(), ParamSpace.create(space.keys, haswell, ext).fingerprint()
    assert before[0] != after[0] and before[1] != after[1]
    assert (default.fingerprint(), space.fingerprint()) == plain  # llvm-mca's model is LLVM's own


def test_a_mechanisms_own_revision_renames_only_the_tables_that_turn_it_on(haswell, space_and_default, monkeypatch):
    """A fix to one mechanism re-simulates the tables and spaces that turn it on, and
    leaves the others' stored results theirs."""
    from difftune_pipeline.engine import mechanisms

    space, default, _ = space_and_default
    tables = [default.with_model(on, "bhive") for on in (("memory", "memory_ordering"), ("memory", "locked"))]

    def ids():
        return [(t.fingerprint(), ParamSpace.create(space.keys, haswell, t).fingerprint()) for t in tables]

    (with_it, without) = ids()
    # a table with no mechanism of its own number keeps the id of an engine before such numbers
    assert mechanisms.revision(("memory", "locked")) == mechanisms.REVISION
    monkeypatch.setitem(mechanisms.REVISIONS, "memory_ordering", mechanisms.REVISIONS["memory_ordering"] + 1)
    renamed, kept = ids()
    assert renamed[0] != with_it[0] and renamed[1] != with_it[1]
    assert kept == without


def test_difftune_preset_ranges(space_and_default):
    space, default, _ = space_and_default
    m, g = space.sample("difftune", 0, default)
    assert m[:, 0].min() >= 0 and m[:, 0].max() <= 5
    assert m[:, 1].min() >= 1 and m[:, 1].max() <= 5
    ports = m[:, 9:]
    groups = [i for i, r in enumerate(space.resources) if r not in space.units]
    assert ports[:, groups].sum() == 0 and ports.max() <= 2 and (ports > 0).sum(1).max() <= 2
    assert 1 <= g[0] <= 10 and 50 <= g[1] <= 250


def test_any_matrix_decodes_to_a_table_the_engine_accepts(haswell, space_and_default):
    space, default, blocks = space_and_default
    m, g = space.encode(default)
    rng = np.random.default_rng(0)
    for _ in range(3):
        table = space.decode(m + rng.normal(0, 3, m.shape), g * rng.uniform(0, 3, 2) - 50, default)
        haswell.compile(table)
        assert all(s == "ok" for s in haswell.simulate(blocks[:50], table).status)


def test_unknown_preset(space_and_default):
    space, default, _ = space_and_default
    with pytest.raises(ValueError, match="unknown sampling preset"):
        space.sample("nope", 0, default)


def test_metrics_and_slices():
    assert mape([110, 90], [100, 100]) == pytest.approx(0.1)
    assert kendall_tau([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    blocks = pl.DataFrame(
        {"block_id": ["a", "b", "c"], "n_insts": [2, 7, 25], "asm": ["addq %rax, %rbx", "movq (%rdi), %rax", "nop"]}
    )
    sources = pl.DataFrame({"block_id": ["a", "b"], "app": ["tensorflow", "openblas-dgemm.goto"]})
    member = slices(blocks, sources)
    by_block = {b: set(member.filter(pl.col("block_id") == b)["slice"]) for b in "abc"}
    assert {"all", "app:tensorflow", "ml:tensorflow", "ml:all", "len:1-4", "mem:register"} <= by_block["a"]
    assert {"ml:openblas", "len:5-9", "mem:memory"} <= by_block["b"]
    assert {"ml:none", "len:20+"} <= by_block["c"]
    assert "class:other" in by_block["a"] and not any(s.startswith("class:") for s in by_block["a"] - {"class:other"})

    pred = pl.DataFrame({"block_id": ["a", "b", "c"], "cycles": [110, 100, 50]})
    truth = pl.DataFrame({"block_id": ["a", "b", "c"], "cycles_per_100": [100.0, 100.0, 100.0]})
    splits = pl.DataFrame({"block_id": ["a", "b", "c"], "split": ["test"] * 3})
    table = metrics_by_slice(pred, truth, splits, member)
    overall = table.filter(pl.col("slice") == "all")
    assert overall["n"][0] == 3 and overall["mape"][0] == pytest.approx((0.1 + 0 + 0.5) / 3)


def test_a_block_is_in_every_instruction_class_of_its_instructions():
    asm = {
        "div": "movq (%rdi), %rax\ndivq 8(%rbx)\naddq $1, (%rax)",
        "x87": "fldz\ntestq %rdi, %rdi",
        "x87_control": "fnstsw %ax\nfldcw (%rax)",
        "simd": "vaddps %ymm0, %ymm1, %ymm2\nsqrtsd %xmm1, %xmm0",
        "locked": "lock\naddl $1, (%rsi)",
        "xchg": "xchgq %rax, (%rdx)",
        "stack": "pushq %rbx\nmfence",
    }
    blocks = pl.DataFrame({"block_id": list(asm), "n_insts": [2] * len(asm), "asm": list(asm.values())})
    member = slices(blocks, pl.DataFrame(schema={"block_id": pl.Utf8, "app": pl.Utf8}))
    classes = {
        b: {s.removeprefix("class:") for s in member.filter(pl.col("block_id") == b)["slice"] if s.startswith("class:")}
        for b in asm
    }
    assert classes == {
        "div": {"divide", "read_modify_write"},
        "x87": {"x87"},
        "x87_control": {"other"},
        "simd": {"simd", "fp_divide_sqrt"},
        "locked": {"locked", "read_modify_write"},
        "xchg": {"locked"},
        "stack": {"push_pop", "fence_serialising"},
    }
