"""An example rollout project: `trialbox bundle build examples/qa-bundle/project`."""
