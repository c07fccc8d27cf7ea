"""Model families: presets with real shapes, real loading, parameter and FLOP arithmetic."""
