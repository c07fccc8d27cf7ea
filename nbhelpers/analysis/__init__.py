"""Analysis of records: what a record says and which may be compared, speedup tables, padding, parity,
recommendation, shipped GPU results, the baseline study, startup cold vs warm."""
