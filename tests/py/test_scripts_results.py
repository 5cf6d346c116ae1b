"""The scripts' results reader (scripts/drope_scripts/results.py): versions 0 and 1, refusals."""
import json

import pytest

from drope_scripts import results


def write(tmp_path, doc, name="r.json"):
    p = tmp_path / name
    p.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return p


PPL_V0 = {"kind": "ppl", "protocol": "sliding", "stride": 128, "method": {"label": "RoPE"},
          "data": ["runs/data/small"], "results": [{"length": 256, "ppl": 20.5}], "summary": {"ppl@256": 20.5}}
PPL_V1 = {"schema": "drope.results", "schema_version": 1, **PPL_V0}


def test_version_1_and_legacy_version_0_are_read(tmp_path):
    assert results.load(write(tmp_path, PPL_V1), "ppl")["summary"] == {"ppl@256": 20.5}
    doc = results.load(write(tmp_path, PPL_V0), "ppl")
    assert results.version(doc) == 0 and doc["method"]["label"] == "RoPE"
    assert results.version(results.load(write(tmp_path, PPL_V1))) == 1


def test_one_of_several_kinds(tmp_path):
    assert results.load(write(tmp_path, {**PPL_V1, "kind": "niah"}), ("niah", "niah-grid"))["kind"] == "niah"


@pytest.mark.parametrize("doc, needle", [
    ({**PPL_V1, "schema_version": 2}, "schema_version 2 is not supported"),
    ({**PPL_V1, "schema_version": 0}, "schema_version 0 is not supported"),
    ({**PPL_V1, "schema_version": "1"}, "'schema_version' must be an integer"),
    ({**PPL_V1, "schema_version": True}, "'schema_version' must be an integer"),
    ({k: v for k, v in PPL_V1.items() if k != "schema_version"}, "'schema_version' must be an integer"),
    ({**PPL_V1, "schema": "other.results"}, 'schema "other.results" is not drope.results'),
    ({**PPL_V1, "kind": "niah"}, "a 'niah' results file, expected 'ppl'"),
    ({k: v for k, v in PPL_V1.items() if k != "kind"}, "no string 'kind'"),
    ({k: v for k, v in PPL_V0.items() if k != "kind"}, "no string 'kind'"),
    ({**PPL_V1, "summary": [1]}, "'summary' must be an object"),
    ({**PPL_V1, "results": {}}, "'results' must be a list"),
    ([PPL_V1], "expected a JSON object"),
    ("{not json", "cannot read a results file"),
])
def test_refusals_name_the_file(tmp_path, doc, needle):
    p = write(tmp_path, doc, "bad.json")
    with pytest.raises(results.ResultsError) as e:
        results.load(p, "ppl")
    assert str(e.value).startswith(f"{p}: ") and needle in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(results.ResultsError, match="cannot read"):
        results.load(tmp_path / "absent.json")


def test_legacy_bias_grad_has_no_kind(tmp_path):
    """Version 0 bias_grad.json (drope-analyze) has no kind: known by its models; version 1 must name it."""
    legacy = {"description": "...", "models": []}
    assert results.load(write(tmp_path, legacy), "bias-grad")["models"] == []
    with pytest.raises(results.ResultsError, match="no string 'kind'"):
        results.load(write(tmp_path, legacy), "ppl")
    with pytest.raises(results.ResultsError, match="no string 'kind'"):
        results.load(write(tmp_path, {"schema": "drope.results", "schema_version": 1, **legacy}), "bias-grad")
