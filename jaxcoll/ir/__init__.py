"""Schedule IR: records, schedules, verifier, families, MSCCL XML. Imports: numpy; no JAX."""
