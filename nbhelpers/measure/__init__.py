"""Measuring one configuration: RunConfig, runner (subprocess isolation), worker, timed step,
records and store, environment, metrics; the measurements built on it: startup cold vs warm (startup), the
contamination proof (contamination_proof), the kernel doctor's records and kernel set (doctor_records)."""
