from pathlib import Path

from contracts.landing import ENTITIES, render_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "landing-schema.md"


def test_the_documented_landing_schema_is_the_one_in_code() -> None:
    assert DOC.read_text().strip() == render_markdown().strip(), "run `make docs`"


def test_every_entity_has_its_key_and_version_among_its_fields() -> None:
    for entity in ENTITIES.values():
        assert set(entity.key) <= set(entity.field_names), entity.name
        assert entity.version_field in entity.field_names, entity.name
        assert all(f.required for f in entity.fields if f.name in entity.key), entity.name
