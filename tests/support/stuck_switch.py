"""Whether ``FeatureWorkflow``'s "stuck" plan fails its workflow task (passed through the sandbox,
so the test can fix the "deploy" while the run is open)."""

broken = True
