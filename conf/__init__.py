"""Typed settings for turnout: one object, built once from a YAML profile plus env overrides."""

from conf.settings import Settings, load_settings

__all__ = ["Settings", "load_settings"]
