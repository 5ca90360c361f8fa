"""Feature stage: gold feature tables (``jobs``/``transforms``), their data contract
(``validation``), and Feast apply/materialize (``store``)."""
