"""Analysis of records: parity, recommendation, shipped GPU results, the baseline study."""
