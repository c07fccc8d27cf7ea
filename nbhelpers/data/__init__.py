"""Data: loading and formats, tokenizer, synthetic data, padding strategies, padding waste, contamination proof."""
