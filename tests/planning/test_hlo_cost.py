"""hlo_cost: loop trip counts read off XLA:TPU-style loops (no known_trip_count printed), matmul
FLOPs counted per trip (dot and convolution), and per-step HBM traffic with TPU memory spaces, on
hand-written HLO text."""
import jax
import jax.numpy as jnp
import pytest

from maxk_jax.planning import hlo, hlo_cost

# A 10-trip loop (counter += STEP while counter < 10) of a [256,1024] x [1024,1024] matmul written
# as XLA:TPU writes it (a convolution in a fusion), plus one dot outside the loop; no trip count printed.
MODULE = """HloModule jit_f

%fused_computation (param_0: bf16[256,1024], param_1: bf16[1024,1024]) -> bf16[256,1024] {
  %param_0 = bf16[256,1024]{1,0:T(8,128)(2,1)} parameter(0)
  %param_1 = bf16[1024,1024]{1,0:T(8,128)(2,1)} parameter(1)
  ROOT %convolution.3 = bf16[256,1024]{1,0:T(8,128)(2,1)S(1)} convolution(%param_0, %param_1), dim_labels=bf_io->bf
}

%body (wide.param.2: (s32[], bf16[256,1024], bf16[1024,1024])) -> (s32[], bf16[256,1024], bf16[1024,1024]) {
  %wide.param.2 = (s32[]{:T(128)}, bf16[256,1024]{1,0:T(8,128)(2,1)S(1)}, bf16[1024,1024]{1,0:T(8,128)(2,1)}) parameter(0)
  %constant.step = s32[]{:T(128)} constant(STEP)
  %get-tuple-element.47 = s32[]{:T(128)} get-tuple-element(%wide.param.2), index=0
  %get-tuple-element.48 = bf16[256,1024]{1,0:T(8,128)(2,1)S(1)} get-tuple-element(%wide.param.2), index=1
  %get-tuple-element.53 = bf16[1024,1024]{1,0:T(8,128)(2,1)} get-tuple-element(%wide.param.2), index=2
  %add.4 = s32[]{:T(128)} add(%get-tuple-element.47, %constant.step)
  %fusion.2 = bf16[256,1024]{1,0:T(8,128)(2,1)S(1)} fusion(%get-tuple-element.48, %get-tuple-element.53), kind=kOutput, calls=%fused_computation
  ROOT %tuple.15 = (s32[]{:T(128)}, bf16[256,1024]{1,0:T(8,128)(2,1)S(1)}, bf16[1024,1024]{1,0:T(8,128)(2,1)}) tuple(%add.4, %fusion.2, %get-tuple-element.53)
}

%cond (wide.param.1: (s32[], bf16[256,1024], bf16[1024,1024])) -> pred[] {
  %wide.param.1 = (s32[]{:T(128)}, bf16[256,1024]{1,0:T(8,128)(2,1)S(1)}, bf16[1024,1024]{1,0:T(8,128)(2,1)}) parameter(0)
  %constant.1 = s32[]{:T(128)} constant(10)
  %get-tuple-element.27 = s32[]{:T(128)} get-tuple-element(%wide.param.1), index=0
  ROOT %lt.3 = pred[]{:T(512)} compare(%get-tuple-element.27, %constant.1), direction=LT
}

ENTRY %main (param.2: bf16[256,1024], param.3: bf16[1024,1024]) -> bf16[256,1024] {
  %param.2 = bf16[256,1024]{1,0:T(8,128)(2,1)} parameter(0)
  %param.3 = bf16[1024,1024]{1,0:T(8,128)(2,1)} parameter(1)
  %constant.0 = s32[]{:T(128)} constant(0)
  %copy-start = (bf16[256,1024]{1,0:T(8,128)(2,1)S(1)}, bf16[256,1024]{1,0:T(8,128)(2,1)}, u32[]{:S(2)}) copy-start(%param.2)
  %copy-done = bf16[256,1024]{1,0:T(8,128)(2,1)S(1)} copy-done(%copy-start)
  %tuple.13 = (s32[]{:T(128)}, bf16[256,1024]{1,0:T(8,128)(2,1)S(1)}, bf16[1024,1024]{1,0:T(8,128)(2,1)}) tuple(%constant.0, %copy-done, %param.3)
  %while.9 = (s32[]{:T(128)}, bf16[256,1024]{1,0:T(8,128)(2,1)S(1)}, bf16[1024,1024]{1,0:T(8,128)(2,1)}) while(%tuple.13), condition=%cond, body=%body
  %get-tuple-element.55 = bf16[256,1024]{1,0:T(8,128)(2,1)S(1)} get-tuple-element(%while.9), index=1
  ROOT %dot.1 = bf16[256,512]{1,0} dot(%get-tuple-element.55, %param.3), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""
MATMUL = 2 * 256 * 1024 * 1024
LAST_DOT = 2 * 256 * 512 * 1024


def _parts(text):
    comps = hlo.parse_hlo(text)
    line = next(line for _, _, op, line in comps["main"] if op == "while")
    return line, comps["cond"], comps["body"]


@pytest.mark.parametrize("step, trips", [(1, 10), (2, 5), (3, 4)])
def test_trip_count_read_off_the_loop(step, trips):
    text = MODULE.replace("STEP", str(step))
    assert hlo.trip_count(*_parts(text)) == trips
    assert hlo_cost.matmul_flops(text) == {"flops": trips * MATMUL + LAST_DOT, "loops_without_trip_count": 0}


def test_printed_trip_count_wins_and_unknown_loops_count_once():
    text = MODULE.replace("STEP", "1")
    printed = text.replace("body=%body", 'body=%body, backend_config={"known_trip_count":{"n":"7"}}')
    assert hlo.trip_count(*_parts(printed)) == 7
    unknown = text.replace("direction=LT", "direction=NE")      # not a counter < N loop
    assert hlo.trip_count(*_parts(unknown)) is None
    assert hlo_cost.matmul_flops(unknown) == {"flops": MATMUL + LAST_DOT, "loops_without_trip_count": 1}


def test_conv_macs_counts_only_taps_on_real_input():
    # a plain matmul as a convolution: no spatial dims
    assert hlo_cost.conv_macs("dim_labels=bf_io->bf", [8, 16], [16, 4], [8, 4]) == 8 * 4 * 16
    # one spatial dim of 3 outputs, window 2, padding 1 on each side over an input of 2: taps on real
    # input at outputs 0 (k=1), 1 (k=0, 1), 2 (k=0) = 4 taps
    line = "window={size=2 pad=1_1} dim_labels=b0f_0io->b0f"
    assert hlo_cost.conv_macs(line, [5, 2, 6], [2, 6, 7], [5, 3, 7]) == 5 * 7 * 4 * 6


def test_matmul_flops_of_a_compiled_cpu_loop():
    """XLA:CPU prints known_trip_count: the walker counts the body that often."""
    def f(a, b):
        return jax.lax.fori_loop(0, 6, lambda i, c: jnp.tanh(c @ b), a)
    text = jax.jit(f).lower(jnp.ones((8, 32)), jnp.ones((32, 32))).compile().as_text()
    assert hlo_cost.matmul_flops(text)["flops"] == 6 * 2 * 8 * 32 * 32


def test_tpu_step_traffic_skips_vmem_operands():
    """Per loop iteration: the fusion reads its HBM weight (the VMEM activation costs nothing) and
    writes a VMEM result (nothing); the ENTRY's copy into VMEM is outside the loop; the counter's
    add and the condition's compare move a few scalar bytes."""
    t = hlo_cost.tpu_step_traffic(MODULE.replace("STEP", "1"))
    assert t["ops"] == 3 and t["dma_starts"] == 0
    scalars = 3 * 4 + 2 * 4 + 1                  # add: 2 reads + 1 write (s32); compare: 2 s32 reads, 1 pred
    assert t["hbm_bytes"] == 1024 * 1024 * 2 + scalars
    assert t["copy_to_hbm_bytes"] == 0
    moved = MODULE.replace("STEP", "1").replace("ROOT %convolution.3 = bf16[256,1024]{1,0:T(8,128)(2,1)S(1)}",
                                                "ROOT %convolution.3 = bf16[256,1024]{1,0:T(8,128)(2,1)}")
    moved = moved.replace("%fusion.2 = bf16[256,1024]{1,0:T(8,128)(2,1)S(1)}", "%fusion.2 = bf16[256,1024]{1,0}")
    assert hlo_cost.tpu_step_traffic(moved)["hbm_bytes"] == 1024 * 1024 * 2 + 256 * 1024 * 2 + scalars  # + result


def test_hbm_bytes_by_memory_space():
    assert hlo_cost.hbm_bytes("(bf16[4,8]{1,0:T(8,128)(2,1)S(1)}, f32[2]{0}, u32[]{:S(2)})") == 8


def test_data_dependent_loops_count_the_given_trips():
    """A loop nested in the decode loop whose bound is data-dependent (the live-block attention
    loop) counts ``dynamic_trips`` times per step."""
    inner = MODULE.replace("STEP", "1").replace("direction=LT", "direction=NE")
    entry = inner.index("ENTRY %main")
    state = "(s32[]{:T(128)}, bf16[256,1024]{1,0:T(8,128)(2,1)S(1)}, bf16[1024,1024]{1,0:T(8,128)(2,1)})"
    outer = inner[:entry] + f"""%outer_body (op: {state}) -> {state} {{
  %op = {state} parameter(0)
  ROOT %inner = {state} while(%op), condition=%cond, body=%body
}}

%outer_cond (oc: {state}) -> pred[] {{
  %oc = {state} parameter(0)
  ROOT %t = pred[] constant(true)
}}

""" + inner[entry:].replace("while(%tuple.13), condition=%cond, body=%body",
                            "while(%tuple.13), condition=%outer_cond, body=%outer_body")
    one, three = hlo_cost.tpu_step_traffic(outer), hlo_cost.tpu_step_traffic(outer, dynamic_trips=3)
    assert one["dynamic_loops"] == 1
    weight = 1024 * 1024 * 2
    assert three["hbm_bytes"] - one["hbm_bytes"] == 2 * (weight + 3 * 4 + 2 * 4 + 1)   # fusion + add + compare
