"""turnout serving."""
