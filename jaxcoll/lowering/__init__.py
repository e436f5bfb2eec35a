"""Lowering: plan, validation, both executors, streams, primitives. Imports: ir, analysis; JAX."""
