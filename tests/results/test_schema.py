"""The declared kinds of results.json: the shipped JSON Schemas are what the types generate, and a job's results are
stamped and checked against their kind's schema before they are written."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from probing.results import KINDS, SCHEMA_VERSION, stamped
from probing.results.schema import SCHEMAS, kind_schema, schema_text, type_schema, write_schemas

FINETUNING = {"task": "pos", "model": "minilm", "model_name_or_path": "/models/minilm", "attention_window": None,
              "attention_policy": None, "isotropy_reg": 0.0, "precision": "32-true", "devices": 1, "labels": ["N", "V"],
              "data_summary": {"train": 10}, "data_skips": {}, "dev": {"accuracy": 0.9}, "best_epoch": 1,
              "epochs_trained": 2, "duration_s": 3.5, "model_dir": "/runs/1/model", "config": {"seed": 1},
              "data_files": [["/data/pos.conllu", "ab" * 32]], "model_weights": []}


def test_the_shipped_schemas_are_what_the_types_generate(tmp_path):
    written = write_schemas(tmp_path)
    assert sorted(path.name for path in SCHEMAS.glob("*.json")) == sorted(path.name for path in written)
    for path in written:
        assert (SCHEMAS / path.name).read_text(encoding="utf-8") == path.read_text(encoding="utf-8"), (
            f"{path.name} is stale: python -m probing.results")


def test_a_schema_types_documents_and_requires_the_fields_of_its_kind():
    schema = kind_schema(KINDS["tree_probe"])
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["kind"]["const"] == "tree_probe" and schema["properties"]["job"]["const"] == "probe"
    assert schema["properties"]["structure"]["enum"] == ["distance", "depth"]
    assert {"structure", "dev", "weights_sha256", "schema_version"} <= set(schema["required"])
    assert "mdl" not in schema["required"] and "mdl" in schema["properties"]  # only some runs write it
    assert all(field["description"] for field in schema["properties"].values())


def test_type_hints_become_json_types():
    assert type_schema(int | None) == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert type_schema(dict[str, list[float]]) == {"type": "object", "additionalProperties": {
        "type": "array", "items": {"type": "number"}}}
    with pytest.raises(TypeError, match="no JSON Schema"):
        type_schema(set[int])


def test_results_are_stamped_with_version_job_and_kind_first():
    record = stamped(FINETUNING, "finetuning")
    assert list(record)[:3] == ["schema_version", "job", "kind"]
    assert (record["schema_version"], record["job"], record["kind"]) == (SCHEMA_VERSION, "train", "finetuning")
    assert json.loads(json.dumps(record))["dev"] == {"accuracy": 0.9}


@pytest.mark.parametrize(("change", "message"), [
    ({"dev": None}, "None is not of type 'object'"),
    ({"devices": "1"}, "'1' is not of type 'integer'"),
    ({"kind": "distance"}, "'finetuning' was expected"),
])
def test_results_that_are_not_of_their_kind_are_refused(change, message):
    with pytest.raises(jsonschema.ValidationError, match=message):
        stamped({**FINETUNING, **change}, "finetuning")


def test_results_lacking_a_key_of_their_kind_are_refused():
    with pytest.raises(jsonschema.ValidationError, match="'model_dir' is a required property"):
        stamped({key: value for key, value in FINETUNING.items() if key != "model_dir"}, "finetuning")


def test_schema_text_ends_with_a_newline():
    assert schema_text(KINDS["amnesic"]).endswith("}\n")


def test_the_schema_shown_in_the_docs_is_the_shipped_one():
    docs = (Path(__file__).parents[2] / "docs" / "outputs.md").read_text(encoding="utf-8")
    shown = docs.split("The schema of `finetuning` (train.py):\n\n```json\n", 1)[1].split("```", 1)[0]
    assert shown == (SCHEMAS / "finetuning.json").read_text(encoding="utf-8")
