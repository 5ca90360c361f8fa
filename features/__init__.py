"""turnout features."""
