"""maxk_jax.planning.gpu_plan: the per-decode-step accounting of an optimized GPU HLO module (hand-written
module: copies, kernels, bytes, nested trip counts) and, where the CUDA plugin is installed, the
deviceless H100 compile of the decode loop."""
import pytest

from maxk_jax.planning import gpu_plan
from maxk_jax.models import qwen2
from maxk_jax.sampling import SamplerSettings

# outer decode loop (body %step) with a nested layer loop (trip 4) whose body slices a weight out of
# a stacked [4, 8, 16] bf16 array (a memcpy fusion), multiplies (a cuBLAS custom call), copies, and
# updates a cache row in place; a prologue fusion outside the loop is not counted.
HLO = """HloModule jit_decode_loop

%fused_slice (param_0: bf16[4,8,16], param_1: s32[]) -> bf16[1,8,16] {
  %param_0 = bf16[4,8,16]{2,1,0} parameter(0)
  %param_1 = s32[] parameter(1)
  %c0 = s32[] constant(0)
  %ds = bf16[1,8,16]{2,1,0} dynamic-slice(%param_0, %param_1, %c0, %c0), dynamic_slice_sizes={1,8,16}
  ROOT %copy.1 = bf16[1,8,16]{2,1,0} copy(%ds)
}

%fused_update (param_0.1: f32[4,32], param_1.1: f32[1,32], param_2: s32[]) -> f32[4,32] {
  %param_0.1 = f32[4,32]{1,0} parameter(0)
  %param_1.1 = f32[1,32]{1,0} parameter(1)
  %param_2 = s32[] parameter(2)
  %c1 = s32[] constant(0)
  ROOT %dus = f32[4,32]{1,0} dynamic-update-slice(%param_0.1, %param_1.1, %param_2, %c1)
}

%fused_add (param_0.2: f32[2,8], param_1.2: f32[2,8]) -> f32[2,8] {
  %param_0.2 = f32[2,8]{1,0} parameter(0)
  %param_1.2 = f32[2,8]{1,0} parameter(1)
  ROOT %add.9 = f32[2,8]{1,0} add(%param_0.2, %param_1.2)
}

%fused_read_row (param_0.3: bf16[4,32]) -> f32[1,32] {
  %param_0.3 = bf16[4,32]{1,0} parameter(0)
  %cv = f32[4,32]{1,0} convert(%param_0.3)
  %sl = f32[1,32]{1,0} slice(%cv), slice={[1:2], [0:32]}
  ROOT %neg = f32[1,32]{1,0} negate(%sl)
}

%layer_body (p: (s32[], bf16[4,8,16], bf16[2,8])) -> (s32[], bf16[4,8,16], bf16[2,8]) {
  %p = (s32[], bf16[4,8,16]{2,1,0}, bf16[2,8]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %w = bf16[4,8,16]{2,1,0} get-tuple-element(%p), index=1
  %x = bf16[2,8]{1,0} get-tuple-element(%p), index=2
  %slice_fusion = bf16[1,8,16]{2,1,0} fusion(%w, %i), kind=kLoop, calls=%fused_slice
  %bc = bf16[8,16]{1,0} bitcast(%slice_fusion)
  %gemm = (bf16[2,16]{1,0}, s8[64]{0}) custom-call(%x, %bc), custom_call_target="__cublas$gemm"
  %y = bf16[2,16]{1,0} get-tuple-element(%gemm), index=0
  %y2 = bf16[2,16]{1,0} copy(%y)
  ROOT %t = (s32[], bf16[4,8,16]{2,1,0}, bf16[2,8]{1,0}) tuple(%i, %w, %x)
}

%layer_cond (p.1: (s32[], bf16[4,8,16], bf16[2,8])) -> pred[] {
  %p.1 = (s32[], bf16[4,8,16]{2,1,0}, bf16[2,8]{1,0}) parameter(0)
  ROOT %lt = pred[] compare(%a, %b), direction=LT
}

%step (q: (s32[], f32[4,32], f32[2,8])) -> (s32[], f32[4,32], f32[2,8]) {
  %q = (s32[], f32[4,32]{1,0}, f32[2,8]{1,0}) parameter(0)
  %s = s32[] get-tuple-element(%q), index=0
  %cache = f32[4,32]{1,0} get-tuple-element(%q), index=1
  %h = f32[2,8]{1,0} get-tuple-element(%q), index=2
  %layers = (s32[], bf16[4,8,16]{2,1,0}, bf16[2,8]{1,0}) while(%init), condition=%layer_cond, body=%layer_body, backend_config={"known_trip_count":{"n":"4"}}
  %row = f32[1,32]{1,0} constant({...})
  %upd = f32[4,32]{1,0} fusion(%cache, %row, %s), kind=kLoop, calls=%fused_update
  %h2 = f32[2,8]{1,0} fusion(%h, %h), kind=kLoop, calls=%fused_add
  %kv = bf16[4,32]{1,0} constant({...})
  %one = f32[1,32]{1,0} fusion(%kv), kind=kLoop, calls=%fused_read_row
  %mc = f32[2,8]{1,0} custom-call(%h2), custom_call_target="__gpu$xla.gpu.memcpy"
  ROOT %u = (s32[], f32[4,32]{1,0}, f32[2,8]{1,0}) tuple(%s, %upd, %mc)
}

%step_cond (q.1: (s32[], f32[4,32], f32[2,8])) -> pred[] {
  %q.1 = (s32[], f32[4,32]{1,0}, f32[2,8]{1,0}) parameter(0)
  %s1 = s32[] get-tuple-element(%q.1), index=0
  %s2 = s32[] constant(8)
  ROOT %c = pred[] compare(%s1, %s2), direction=LT
}

ENTRY %main (a: f32[2,8]) -> f32[2,8] {
  %a = f32[2,8]{1,0} parameter(0)
  %pro = f32[2,8]{1,0} fusion(%a, %a), kind=kLoop, calls=%fused_add
  %loop = (s32[], f32[4,32]{1,0}, f32[2,8]{1,0}) while(%t0), condition=%step_cond, body=%step
  ROOT %r = f32[2,8]{1,0} get-tuple-element(%loop), index=2
}
"""


def test_decode_step_costs_of_a_hand_written_module():
    r = gpu_plan.decode_step_costs(HLO)
    # per layer: slice fusion, gemm, copy (x 4 layers; the condition of a loop of known trip count
    # never runs); per step: update, add and row fusions, memcpy, and the step condition's compare
    assert r["kernel_ops"] == {"fusion": 4 + 3, "custom-call": 4 + 1, "copy": 4, "compare": 1}
    assert r["kernels"] == 17
    # slices: 8*16 bf16 = 256 B x 4; copy of bf16[2,16] = 64 B x 4; memcpy f32[2,8] = 64 B
    assert r["materialized_bytes"] == 256 * 4 + 64 * 4 + 64
    assert {(c["name"], c["bytes"], c["times"]) for c in r["copies"]} == {
        ("slice_fusion", 256, 4), ("y2", 64, 4), ("mc", 64, 1)}
    per_layer = (256 + 4 + 256) + (32 + 256 + 64 + 64) + (64 + 64)   # the slice reads 256 B of the stack
    # the update reads its row and index and writes the row in place (not the whole [4, 32] cache)
    # the row fusion reads one bf16 row of the [4, 32] operand it converts and slices (64 B), writes 128 B
    per_step = (128 + 4 + 128) + (64 + 64 + 64) + (64 + 128) + (64 + 64) + (4 + 4 + 1)
    assert r["est_bytes"] == 4 * per_layer + per_step
    assert r["traffic"][0]["name"] == "slice_fusion"


# a decode step with two batched GEMM fusions: %partials (split-K: f32 [2, 4, 8] partial products that
# %sum reduces over the leading dimension, through a bitcast) and %scores (an attention-like batched dot
# whose result is used elementwise: not split-K)
SPLIT_K_HLO = """HloModule jit_decode_loop

%gemm_split (p0: bf16[4,2,8], p1: bf16[2,8,8]) -> f32[2,4,8] {
  %p0 = bf16[4,2,8]{2,1,0} parameter(0)
  %p1 = bf16[2,8,8]{2,1,0} parameter(1)
  %d = f32[2,8,4]{1,2,0} dot(%p1, %p0), lhs_batch_dims={0}, lhs_contracting_dims={1}, rhs_batch_dims={1}, rhs_contracting_dims={2}
  ROOT %b = f32[2,4,8]{2,1,0} bitcast(%d)
}

%gemm_batched (q0: bf16[2,4,8], q1: bf16[2,8,8]) -> f32[2,4,8] {
  %q0 = bf16[2,4,8]{2,1,0} parameter(0)
  %q1 = bf16[2,8,8]{2,1,0} parameter(1)
  ROOT %e = f32[2,4,8]{2,1,0} dot(%q0, %q1), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
}

%add_f32 (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %z = f32[] add(%x, %y)
}

%sum_split (r0: f32[2,4,8], r1: bf16[4,8]) -> bf16[4,8] {
  %r0 = f32[2,4,8]{2,1,0} parameter(0)
  %r1 = bf16[4,8]{1,0} parameter(1)
  %zero = f32[] constant(0)
  %red = f32[4,8]{1,0} reduce(%r0, %zero), dimensions={0}, to_apply=%add_f32
  %cv = bf16[4,8]{1,0} convert(%red)
  ROOT %res = bf16[4,8]{1,0} add(%cv, %r1)
}

%scale (s0: f32[2,4,8]) -> f32[2,4,8] {
  %s0 = f32[2,4,8]{2,1,0} parameter(0)
  ROOT %n = f32[2,4,8]{2,1,0} negate(%s0)
}

%step (t: (s32[], bf16[4,8], bf16[2,8,8])) -> (s32[], bf16[4,8], bf16[2,8,8]) {
  %t = (s32[], bf16[4,8]{1,0}, bf16[2,8,8]{2,1,0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %h = bf16[4,8]{1,0} get-tuple-element(%t), index=1
  %w = bf16[2,8,8]{2,1,0} get-tuple-element(%t), index=2
  %hb = bf16[4,2,8]{2,1,0} bitcast(%h)
  %partials = f32[2,4,8]{2,1,0} fusion(%hb, %w), kind=kCustom, calls=%gemm_split
  %pb = f32[2,4,8]{2,1,0} bitcast(%partials)
  %sum = bf16[4,8]{1,0} fusion(%pb, %h), kind=kLoop, calls=%sum_split
  %hq = bf16[2,4,8]{2,1,0} bitcast(%h)
  %scores = f32[2,4,8]{2,1,0} fusion(%hq, %w), kind=kCustom, calls=%gemm_batched
  %neg = f32[2,4,8]{2,1,0} fusion(%scores), kind=kLoop, calls=%scale
  ROOT %u = (s32[], bf16[4,8]{1,0}, bf16[2,8,8]{2,1,0}) tuple(%i, %sum, %w)
}

%step_cond (c: (s32[], bf16[4,8], bf16[2,8,8])) -> pred[] {
  %c = (s32[], bf16[4,8]{1,0}, bf16[2,8,8]{2,1,0}) parameter(0)
  %c1 = s32[] get-tuple-element(%c), index=0
  %c2 = s32[] constant(8)
  ROOT %lt = pred[] compare(%c1, %c2), direction=LT
}

ENTRY %main (a: bf16[4,8]) -> bf16[4,8] {
  %a = bf16[4,8]{1,0} parameter(0)
  %loop = (s32[], bf16[4,8]{1,0}, bf16[2,8,8]{2,1,0}) while(%t0), condition=%step_cond, body=%step, backend_config={"known_trip_count":{"n":"8"}}
  ROOT %r = bf16[4,8]{1,0} get-tuple-element(%loop), index=1
}
"""


def test_split_k_partials_are_the_batched_gemm_results_summed_over_their_leading_dimension():
    r = gpu_plan.decode_step_costs(SPLIT_K_HLO)
    # %partials: f32[2, 4, 8] = 256 B written by the GEMM and read by %sum; %scores is not split-K
    assert r["split_k_bytes"] == 2 * 256
    assert r["split_k_bytes"] < r["est_bytes"]
    assert r["kernel_ops"] == {"fusion": 4, "compare": 1}
    lines = gpu_plan.report_lines({**r, "target_source": "t", "rows": 4, "prompt_bucket": 16, "compile_s": 1.0,
                                   "materialized_pct": 0.0, "weight_bytes_bf16": 1024, "est_over_ideal": 1.0,
                                   "ideal": {"total": 1024, "weights": 512, "kv": 512}})
    assert any("split-K partial sums: 0.000 GB (0.50 x the ideal)" in line for line in lines)


def test_decode_step_costs_needs_a_loop_and_ideal_bytes_count_prompts_once():
    with pytest.raises(ValueError, match="no while loop"):
        gpu_plan.decode_step_costs("HloModule m\n\nENTRY %main (a: f32[2]) -> f32[2] {\n"
                                   "  ROOT %a = f32[2]{0} parameter(0)\n}\n")
    c = qwen2.preset("qwen2.5-coder-1.5b")
    ideal = gpu_plan.ideal_bytes(c, 16, 8, 512, 256)
    per_token = 2 * c.num_layers * c.num_kv_heads * c.head_dim_ * 2
    assert ideal["kv"] == per_token * (16 * 512 + 128 * 128)
    assert ideal["weights"] == 2 * qwen2.param_count(c) and ideal["total"] == ideal["weights"] + ideal["kv"]
    text, source = gpu_plan.target_config("h100")
    assert "cuda_compute_capability { major: 9 }" in text and "h100.txtpb" in source
    with pytest.raises(ValueError, match="unknown GPU target"):
        gpu_plan.target_config("a100")


@pytest.mark.gpu_plugin
@pytest.mark.slow
def test_h100_plan_of_a_small_model():
    config = qwen2.Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                               num_kv_heads=2, dtype="bfloat16")
    r = gpu_plan.gpu_decode_report(config, SamplerSettings(n=2, max_new_tokens=8), 2, 16)
    assert r["rows"] == 4 and r["kernels"] > 0 and r["est_bytes"] > 0 and r["compile_s"] > 0
    assert r["materialized_pct"] >= 0 and "h100.txtpb" in r["target_source"]
    assert any("kernels per decode step" in line for line in gpu_plan.report_lines(r))


def test_custom_call_outputs_aliased_to_an_operand_are_not_counted_as_written():
    shape = "(bf16[8,2,6,16]{3,2,1,0}, bf16[8,2,255,16]{3,2,1,0}, bf16[8,2,255,16]{3,2,1,0})"
    line = (f"  %k = {shape} custom-call(%a, %b, %c), custom_call_target=\"__gpu$xla.gpu.triton\", "
            "output_to_operand_aliasing={{1}: (2, {}), {2}: (3, {})}, api_version=API_VERSION_TYPED_FFI")
    assert gpu_plan._aliased_output_bytes(shape, line) == 2 * 8 * 2 * 255 * 16 * 2
    assert gpu_plan._aliased_output_bytes(shape, line.replace("output_to_operand_aliasing", "x")) == 0


def test_own_cache_unread_bytes_counts_the_slots_past_the_average_step():
    config = qwen2.Qwen2Config(vocab_size=64, hidden_size=64, intermediate_size=64, num_layers=3, num_heads=4,
                               num_kv_heads=2, dtype="bfloat16", decode_attention="xla")
    assert gpu_plan.own_cache_unread_bytes(config, rows=8, new_tokens=256) == 0       # xla reads every slot
    pallas = config.replace(decode_attention="pallas")
    assert gpu_plan.own_cache_unread_bytes(config.replace(decode_attention="auto"), rows=8, new_tokens=256) == \
        gpu_plan.own_cache_unread_bytes(pallas, rows=8, new_tokens=256)   # the GPU's choice
    per_slot = 2 * 3 * 8 * 2 * 16 * 2                   # K and V, layers, rows, KV heads, head dim, bf16 bytes
    assert gpu_plan.own_cache_unread_bytes(pallas, rows=8, new_tokens=256) == per_slot * (255 - 128)


@pytest.mark.gpu_plugin
@pytest.mark.slow
def test_h100_plan_with_the_pallas_decode_attention_and_xla_options():
    config = qwen2.Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                               num_kv_heads=2, dtype="bfloat16", decode_attention="pallas")
    options = {"xla_gpu_experimental_force_split_k": 1}
    r = gpu_plan.gpu_decode_report(config, SamplerSettings(n=2, max_new_tokens=32), 2, 16, compiler_options=options)
    assert r["kernel_ops"].get("custom-call") == 2 * config.num_layers    # the two Triton kernels per layer
    # the own-cache kernel writes the new K/V in place: no write kernel per layer, no cache copied
    # (the one copy left is a scalar of the loop's bookkeeping)
    writes = sum(t["times"] for t in r["traffic"] if t["op"] == "fusion:dynamic-update-slice")
    assert writes < 2 * config.num_layers and r["materialized_bytes"] <= 8
    assert r["decode_attention"] == "pallas" and r["compiler_options"] == options
    assert r["est_live_over_ideal"] < r["est_over_ideal"]
    assert any("XLA options: xla_gpu_experimental_force_split_k=1" in line for line in gpu_plan.report_lines(r))


@pytest.mark.gpu_plugin
@pytest.mark.slow
def test_h100_plan_counts_split_k_partials_only_where_xla_splits():
    config = qwen2.Qwen2Config(vocab_size=512, hidden_size=256, intermediate_size=1024, num_layers=2, num_heads=4,
                               num_kv_heads=2, dtype="bfloat16", decode_attention="pallas")
    settings = SamplerSettings(n=8, max_new_tokens=32)
    split = gpu_plan.gpu_decode_report(config, settings, 2, 16)      # XLA's default tiling splits these GEMMs
    whole = gpu_plan.gpu_decode_report(config, settings, 2, 16,
                                       compiler_options={"xla_gpu_experimental_force_split_k": 1})
    assert 0 < split["split_k_bytes"] < split["est_bytes"] and whole["split_k_bytes"] == 0
    assert whole["est_bytes"] < split["est_bytes"]
    assert any("split-K partial sums" in line for line in gpu_plan.report_lines(split))
    assert not any("split-K partial sums" in line for line in gpu_plan.report_lines(whole))


def test_target_mesh_refuses_a_bad_tensor_size_before_looking_for_the_plugin():
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match=f"tensor={bad!r}"):
            gpu_plan.target_mesh("h100", tensor=bad)


@pytest.mark.gpu_plugin
@pytest.mark.slow
def test_h100_train_memory_grows_with_what_the_remat_policy_keeps():
    from maxk_jax.rl import training
    config = qwen2.Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=256, num_layers=2, num_heads=4,
                               num_kv_heads=2, dtype="bfloat16", remat=True)
    step = training.StepConfig(estimator="maxk_offpolicy", k=2, micro_batches=1,
                               sampler=SamplerSettings(n=2, max_new_tokens=16))
    rows = {p: gpu_plan.gpu_train_memory(config.replace(remat_policy=p), step, 8, 48, 16) for p in ("nothing", "dots")}
    assert rows["nothing"]["args"] == rows["dots"]["args"] > 0                 # the same state and batch
    assert rows["dots"]["temps"] > rows["nothing"]["temps"]                    # the kept projections
    assert rows["dots"]["remat_policy"] == "dots" and "h100.txtpb" in rows["dots"]["target_source"]
    with pytest.raises(ValueError, match="sequences"):
        gpu_plan.gpu_train_memory(config, step, 0, 48, 16)
