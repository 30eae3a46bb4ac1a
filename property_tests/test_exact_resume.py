"""Invariant 2 (exact resume): snapshot after k outputs, restore the bytes in a fresh pipeline,
and the rest of the stream equals the uninterrupted one, for random pipelines and cut points."""

from hypothesis import given, note
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

from fpipe.core.testing import assert_exact_resume, outputs_equal, run
from property_tests.strategies import plan_specs


@given(spec=plan_specs(), data=st.data())
def test_exact_resume_random_pipelines(spec, data):
    rank = data.draw(st.integers(0, spec.world_size - 1))
    _, ref = run(spec.build(rank))
    cuts = data.draw(st.lists(st.integers(0, len(ref)), min_size=1, max_size=3))
    note(f"{spec} rank={rank} cuts={cuts} outputs={len(ref)}")
    assert_exact_resume(lambda: spec.build(rank), cuts, reference=ref)


class ResumeMachine(RuleBasedStateMachine):
    """Advance, snapshot, restore any earlier snapshot into a fresh pipeline; the stream read so
    far must always be a prefix of the uninterrupted stream at the restored position."""

    snapshots = Bundle("snapshots")

    @initialize(spec=plan_specs(max_samples=60))
    def setup(self, spec):
        self.spec = spec
        _, self.reference = run(spec.build())
        self.pipeline = spec.build()
        self.state = self.pipeline.init()
        self.position = 0
        self.ok = True

    @rule(n=st.integers(0, 7))
    def advance(self, n):
        self.state, out = run(self.pipeline, self.state, limit=n)
        expected = self.reference[self.position : self.position + len(out)]
        self.ok = self.ok and outputs_equal(out, expected)
        self.position += len(out)

    @rule(target=snapshots)
    def snapshot(self):
        return (self.pipeline.snapshot(self.state), self.position)

    @rule(snap=snapshots)
    def restore(self, snap):
        data, position = snap
        self.pipeline = self.spec.build()  # fresh: nothing shared but the bytes
        self.state = self.pipeline.restore(data)
        self.position = position

    @invariant()
    def stream_matches_reference(self):
        assert self.ok


TestResumeMachine = ResumeMachine.TestCase
