"""benchmarks/hlo_passes.py counts the loops over memory of an XLA program's ENTRY
computation, each array operand read once and each output written once."""
import pytest

from benchmarks import hlo_passes

# A hand-written optimized-HLO text: one fused computation (its instructions are not loops of
# their own), then the ENTRY computation. Shapes: [4,8] float32 = 128 bytes.
HLO = """HloModule a_inference_update, entry_computation_layout={(f32[4,8]{1,0})->f32[4,8]{1,0}}

%fused_computation (param_0: f32[4,8], param_1: f32[4,8]) -> f32[4,8] {
  %param_0 = f32[4,8]{1,0} parameter(0)
  %param_1 = f32[4,8]{1,0} parameter(1)
  ROOT %add.9 = f32[4,8]{1,0} add(%param_0, %param_1)
}

ENTRY %main.7 (arg0.1: f32[4,8], arg1.2: f32[4,8], arg2.3: f32[]) -> (f32[4,8], f32[1]) {
  %arg0.1 = f32[4,8]{1,0} parameter(0), parameter_replication={false}
  %arg1.2 = f32[4,8]{1,0} parameter(1), parameter_replication={false}
  %arg2.3 = f32[] parameter(2), parameter_replication={false}
  %add_fusion = f32[4,8]{1,0} fusion(%arg0.1, %arg1.2), kind=kLoop, calls=%fused_computation
  %call.2 = f32[4]{0} call(%add_fusion), to_apply=%parallel_multiply_dot_fusion
  %reduce-window = f32[1]{0} reduce-window(%call.2, %arg2.3), window={size=4 stride=4}, to_apply=%sum
  %pair = (f32[4,8]{1,0}, bf16[2]{0}) fusion(%add_fusion), kind=kLoop, calls=%two
  ROOT %tuple = (f32[4,8]{1,0}, f32[1]{0}) tuple(%add_fusion, %reduce-window)
}
"""


def test_type_bytes_counts_every_array_of_a_type():
    assert hlo_passes.type_bytes("f32[30522,768]{1,0}") == 4 * 30522 * 768
    assert hlo_passes.type_bytes("f32[]") == 4
    assert hlo_passes.type_bytes("(f32[4,8]{1,0}, bf16[2]{0})") == 128 + 4


def test_passes_are_the_entry_loops_with_their_operands_and_outputs():
    # by hand: the fusion reads two [4,8] arrays and writes one; the dot reads that one and
    # writes 4 floats; the reduce-window reads those and a scalar, writes one float; the
    # two-output fusion reads [4,8] and writes [4,8] and bf16[2]; parameters and the tuple
    # are no loops, nor is the fused computation's add
    assert hlo_passes.passes(HLO) == [
        ("add_fusion", "fusion", 256, 128),
        ("call.2", "call", 128, 16),
        ("reduce-window", "reduce-window", 20, 4),
        ("pair", "fusion", 128, 132),
    ]


def test_small_loops_are_left_out_below_smallest_bytes():
    assert [name for name, *_ in hlo_passes.passes(HLO, smallest_bytes=100)] == [
        "add_fusion", "call.2", "pair"]


def test_a_text_without_entry_computation_is_refused():
    with pytest.raises(ValueError, match="ENTRY"):
        hlo_passes.passes("HloModule m\n")


def test_bytes_per_parameter_sums_the_loops_reads_and_writes():
    # by hand, from the loops above: read 256 + 128 + 20 + 128, written 128 + 16 + 4 + 132
    assert hlo_passes.bytes_per_parameter(hlo_passes.passes(HLO), 32) == (532 / 32, 280 / 32)
