"""Learning: features, archetypes, predictors, regression detection, model registry."""
