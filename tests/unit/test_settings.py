from pathlib import Path

import pytest

from conf.settings import SettingsError, load_settings

REPO = Path(__file__).resolve().parents[2]


def test_local_profile_roots_all_state_under_home(tmp_path: Path) -> None:
    s = load_settings("local", home=tmp_path, environ={})
    assert s.profile == "local"
    assert s.lake.root == f"{tmp_path}/lake"
    assert s.landing.root == f"{tmp_path}/landing"
    assert s.lake.table_path("silver", "events") == f"{tmp_path}/lake/silver/events"


def test_two_homes_never_share_a_path(tmp_path: Path) -> None:
    a = load_settings("local", home=tmp_path / "a", environ={})
    b = load_settings("local", home=tmp_path / "b", environ={})
    assert a.lake.root != b.lake.root and a.landing.root != b.landing.root


def test_env_picks_profile_and_home_and_overrides_a_key(tmp_path: Path) -> None:
    env = {
        "TURNOUT_PROFILE": "cluster",
        "TURNOUT_HOME": str(tmp_path),
        "TURNOUT__SPARK__SHUFFLE_PARTITIONS": "16",
    }
    s = load_settings(environ=env)
    assert s.profile == "cluster"
    assert s.home == tmp_path.resolve()
    assert s.spark.shuffle_partitions == 16
    assert s.lake.root.startswith("s3a://")


def test_unknown_key_is_rejected_naming_file_and_key(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as err:
        load_settings("local", home=tmp_path, environ={"TURNOUT__SPARK__MASTR": "local[1]"})
    assert "local.yaml" in str(err.value) and "spark.mastr" in str(err.value)


def test_bad_value_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="max_quarantine_fraction"):
        load_settings("local", home=tmp_path, environ={"TURNOUT__INGEST__MAX_QUARANTINE_FRACTION": "2"})


def test_unknown_profile_lists_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="cluster"):
        load_settings("staging", home=tmp_path, environ={})


def test_our_generic_package_names_resolve_inside_this_repository() -> None:
    import bench
    import cli
    import conf
    import contracts
    import features
    import models
    import pipelines
    import published
    import serving
    import simulator

    for module in (bench, cli, conf, contracts, features, models, pipelines, published, serving, simulator):
        assert module.__file__ is not None
        assert Path(module.__file__).resolve().is_relative_to(REPO), module.__file__


def test_a_lake_on_s3_puts_the_s3a_connector_on_spark_jars(tmp_path: Path) -> None:
    from pipelines.spark import JarsMissing, spark_conf

    s = load_settings("s3-local", home=tmp_path, environ={})
    assert s.lake.root.startswith("s3a://") and s.spark.extra_jars_dirs == [f"{REPO}/.cache/jars-s3"]
    jars = spark_conf(s)["spark.jars"].split(",")
    assert any("/jars-s3/hadoop-aws-" in j for j in jars) and any("delta-spark" in j for j in jars)

    empty = s.model_copy(update={"spark": s.spark.model_copy(update={"extra_jars_dirs": [str(tmp_path)]})})
    with pytest.raises(JarsMissing, match="make jars-s3"):
        spark_conf(empty)


def test_the_class_archive_is_named_for_its_jars_and_mapped_only_once_it_exists(tmp_path: Path) -> None:
    from pipelines.spark import class_archive, spark_conf

    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "delta-spark_2.13-4.0.0.jar").write_bytes(b"x")
    env = {"TURNOUT__SPARK__JARS_DIR": str(jars), "TURNOUT__SPARK__CLASS_ARCHIVE_DIR": str(tmp_path / "cds")}
    s = load_settings("local", home=tmp_path / "home", environ=env)
    archive = class_archive(s)
    assert archive is not None and archive.parent == tmp_path / "cds"
    flags = spark_conf(s)["spark.driver.extraJavaOptions"]
    assert "SharedArchiveFile" not in flags and "-Duser.timezone=UTC" in flags

    archive.parent.mkdir()
    archive.write_bytes(b"classes")
    # Not mapped until the dump has checked it and recorded its size (a truncated archive is a
    # SIGBUS at JVM start, not a fallback).
    assert "SharedArchiveFile" not in spark_conf(s)["spark.driver.extraJavaOptions"]
    archive.with_name(archive.name + ".size").write_text("7\n")
    assert f"-XX:SharedArchiveFile={archive}" in spark_conf(s)["spark.driver.extraJavaOptions"]
    archive.write_bytes(b"class")
    assert "SharedArchiveFile" not in spark_conf(s)["spark.driver.extraJavaOptions"]
    archive.write_bytes(b"classes")

    # Another jar on the classpath is another archive: the old one is never mapped by the new jars.
    (jars / "delta-storage-4.0.0.jar").write_bytes(b"y")
    assert class_archive(s) != archive
    assert "SharedArchiveFile" not in spark_conf(s)["spark.driver.extraJavaOptions"]

    none = load_settings("cluster", home=tmp_path / "home", environ={"TURNOUT__SPARK__JARS_DIR": str(jars)})
    assert class_archive(none) is None
