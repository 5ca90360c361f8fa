"""The Feast repository: the one place that names every feature turnout's models read.

Pure declarations, one module per kind:

* ``entities``  - the join keys (user, event and the persistent entities an event inherits from);
* ``sources``   - Spark sources over the gold Delta tables, and the request-time inputs;
* ``views``     - feature views with their TTLs;
* ``crosses``   - on-demand views computed at request time (distance, lead time, hour of week);
* ``services``  - one feature service per model head (``<head>_v<N>``);
* ``repo``      - every object above, listed once for ``apply``.

Nothing here reads settings or touches storage: a gold source names its table by a path
template (``{lake}/gold/<table>``) that ``pipelines.features.store`` binds to the profile's
lake root when it applies or reads, so importing this package never does I/O.
"""
