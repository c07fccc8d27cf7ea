"""Data: loading and formats, tokenizer, synthetic data, padding strategies, padding waste, the contamination checks."""
