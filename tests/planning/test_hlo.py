"""maxk_jax.planning.hlo: the one HLO reader: parsing, the decode loop, trip counts, and the loop walker's
policies (which trips count, when a loop's condition is walked, which calls are entered)."""
import collections

import pytest

from maxk_jax.planning import hlo

MODULE = """HloModule m

%fused (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %neg.f = f32[4]{0} negate(%p)
}

%known_body (p: (s32[], f32[4])) -> (s32[], f32[4]) {
  %p = (s32[], f32[4]{0}) parameter(0)
  %fusion.k = f32[4]{0} fusion(%p), kind=kLoop, calls=%fused
  ROOT %t = (s32[], f32[4]{0}) tuple(%p, %fusion.k)
}

%known_cond (p: (s32[], f32[4])) -> pred[] {
  %p = (s32[], f32[4]{0}) parameter(0)
  ROOT %lt.k = pred[] compare(%p, %p), direction=LT
}

%counted_body (p: (s32[], f32[4])) -> (s32[], f32[4]) {
  %p = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %add.c = f32[4]{0} add(%p, %p)
  ROOT %t = (s32[], f32[4]{0}) tuple(%next, %add.c)
}

%counted_cond (p: (s32[], f32[4])) -> pred[] {
  %p = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %n = s32[] constant(4)
  ROOT %lt.c = pred[] compare(%i, %n), direction=LT
}

%outer_body (p: (s32[], f32[4])) -> (s32[], f32[4]) {
  %p = (s32[], f32[4]{0}) parameter(0)
  %w.k = (s32[], f32[4]{0}) while(%p), condition=%known_cond, body=%known_body, backend_config={"known_trip_count":{"n":"3"}}
  %w.c = (s32[], f32[4]{0}) while(%p), condition=%counted_cond, body=%counted_body
  %call.o = f32[4]{0} call(%p), to_apply=%fused
  ROOT %t = (s32[], f32[4]{0}) tuple(%w.k, %call.o)
}

%outer_cond (p: (s32[], f32[4])) -> pred[] {
  %p = (s32[], f32[4]{0}) parameter(0)
  ROOT %done = pred[] compare(%p, %p), direction=NE
}

ENTRY %main (a: f32[4]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  %loop = (s32[], f32[4]{0}) while(%a), condition=%outer_cond, body=%outer_body
  ROOT %r = f32[4]{0} get-tuple-element(%loop), index=1
}
"""


def _counts(policy=hlo.LoopPolicy(), start=None):
    """{instruction name: executions} of one decode-loop iteration (or of ``start``) under ``policy``."""
    seen = collections.Counter()
    entered = collections.Counter()
    comps = hlo.parse(MODULE)
    visit = lambda _, __, ins, times: seen.update({ins[0]: times})  # noqa: E731
    enter = lambda name, _, times: entered.update({name: times})  # noqa: E731
    if start is None:
        unknown = hlo.walk_loop_iteration(comps, visit, policy, on_enter=enter)
    else:
        unknown = hlo.walk(comps, start, visit, policy, on_enter=enter)
    return seen, entered, unknown


def test_parse_and_the_decode_loop():
    comps = hlo.parse(MODULE)
    assert set(comps) == {"fused", "known_body", "known_cond", "counted_body", "counted_cond", "outer_body",
                          "outer_cond", "main"}
    assert comps["fused"].root[1] == "negate" and hlo.entry(MODULE) == "main"
    assert hlo.operands(comps["counted_body"].by_name["next"][2]) == ["i", "one"]
    assert hlo.called_computations(comps["outer_body"].by_name["w.k"][2]) == ["known_cond", "known_body"]
    # the while whose body reaches the most computations, from either parse
    assert hlo.outer_loop(comps) == hlo.outer_loop(hlo.parse_hlo(MODULE)) == ("outer_body", "outer_cond")
    with pytest.raises(ValueError, match="no while loop"):
        hlo.outer_loop(hlo.parse(MODULE.replace(" while(", " call(")))


def test_shapes():
    assert hlo.shape_bytes("(f32[2,3]{1,0}, bf16[4])") == 32
    assert hlo.dims("bf16[2,3]{1,0}") == [2, 3] and hlo.dims("token") == []
    assert hlo.element_count("bf16[2,3]{1,0}") == 6 and hlo.element_count("f32[]") == 1


def test_default_walk_counts_trips_enters_every_call_and_walks_only_the_outer_condition():
    seen, entered, unknown = _counts()
    assert seen["neg.f"] == 3 + 1            # in the fusion of the 3-trip loop, and called once
    assert seen["add.c"] == 4                # trip count read off `counter < 4`, step 1
    assert seen["lt.k"] == seen["lt.c"] == 0 and seen["done"] == 1
    assert entered["fused"] == 4 and entered["known_body"] == 3 and unknown == 0


def test_printed_trip_counts_only_and_unknown_trips():
    seen, _, unknown = _counts(hlo.LoopPolicy(infer_trips=False))
    assert seen["add.c"] == 1 and seen["neg.f"] == 4 and unknown == 1
    seen, _, unknown = _counts(hlo.LoopPolicy(infer_trips=False, unknown_trips=2.5))
    assert seen["add.c"] == 2.5 and unknown == 1


@pytest.mark.parametrize("condition, known, counted", [("never", 0, 0), ("unknown", 0, 2.5), ("always", 3, 2.5)])
def test_condition_policy(condition, known, counted):
    seen, _, _ = _counts(hlo.LoopPolicy(infer_trips=False, unknown_trips=2.5, condition=condition))
    assert (seen["lt.k"], seen["lt.c"]) == (known, counted)


def test_enter_only_control_calls_reads_a_fusion_as_one_op():
    seen, entered, _ = _counts(hlo.LoopPolicy(enter={"call"}))
    assert seen["fusion.k"] == 3 and seen["neg.f"] == 1 and entered["fused"] == 1


def test_walk_from_the_entry_multiplies_nested_trips_and_rejects_bad_policies():
    seen, _, unknown = _counts(hlo.LoopPolicy(unknown_trips=5), start="main")
    assert seen["neg.f"] == 5 * 4 and seen["add.c"] == 5 * 4 and unknown == 1   # the outer loop: unknown trips
    with pytest.raises(ValueError, match="condition='sometimes'"):
        hlo.LoopPolicy(condition="sometimes")
