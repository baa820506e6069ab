"""Whether ``FeatureWorkflow``'s "stuck" plan fails its workflow task: the test's worker passes this
module through its sandbox (one module object), so the test can "deploy the fix" while the run is
open."""

broken = True
