"""Real data mapped into the landing schema: peers of the simulator, knowing only ``contracts``."""
