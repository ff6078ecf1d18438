"""Outside launches held against ours: InferenceX's chain run from a checkout under a recorder."""
