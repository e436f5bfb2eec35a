"""Analysis on paper: cost, bounds, topology, synthesis, error bounds. Imports: ir; no JAX."""
