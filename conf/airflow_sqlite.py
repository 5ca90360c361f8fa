"""Connection arguments for Airflow's metadata database when it is the embedded SQLite file.

``ops/airflow-env.sh`` points ``[database] sql_alchemy_connect_args`` (and its async twin) here.
Python's sqlite3 gives up on a lock after 5 s and Airflow's API server turns that into a 500;
on a 2-core machine where Spark fills the cores, a scheduler write can hold the lock longer.
Wait up to a minute instead (``ops/up.sh`` also puts the file in WAL mode, so reads never wait).
"""

CONNECT_ARGS = {"timeout": 60}
