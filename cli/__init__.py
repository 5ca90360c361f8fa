"""The ``turnout`` command: wires every layer (``main``), renders results for people (``render``)."""
