"""The read side: readers of everything the batch side publishes, below both runtimes.

* ``versioned``     - versioned artifacts behind one atomic pointer (build beside, switch, roll back);
* ``geo_index``     - the H3 geo-time index: its structure and exact query (pure numpy + h3);
* ``index_store``   - the index on disk: write, verify, load the published version;
* ``catalog``       - the live catalog serving reads instead of silver (events, RSVPs, friends, homes);
* ``tower``         - which content tower is published, or was in effect at an instant;
* ``registry``      - the MLflow registry's champions and their heads;
* ``feature_store`` - the Feast online store as serving reads it, and the schema hash models carry.

``pipelines`` (the batch jobs) and ``serving`` (the web process) both import from here, never from
each other; nothing here starts Spark.
"""
