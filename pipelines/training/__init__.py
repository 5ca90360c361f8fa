"""Training sets, the two heads, calibration, evaluation and registry promotion."""
