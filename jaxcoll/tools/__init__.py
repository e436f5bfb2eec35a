"""Tools: bench, timing, calibration, auto's policy, processes, pictures, CLI. Any layer."""
