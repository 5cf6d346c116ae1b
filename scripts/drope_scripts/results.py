"""The one reader of the result files the tools write (drope-eval, drope-analyze).

Version 1 documents carry "schema": "drope.results" and "schema_version": 1 beside the layout of
version 0 (the files written before versioning: no schema keys, the same layout otherwise).
"""
from __future__ import annotations

import json
import pathlib

SCHEMA = "drope.results"
SCHEMA_VERSION = 1
# Version 0 bias_grad.json files (drope-analyze bias-grad) carry no "kind": recognised by their "models".
_LEGACY_KINDLESS = {"bias-grad": "models"}


class ResultsError(ValueError):
    """A file that is not a readable drope results document of the expected kind."""


def version(doc: dict) -> int:
    """The schema version of a parsed document: 0 without the schema keys."""
    return doc["schema_version"] if "schema" in doc else 0


def validate(doc: object, where: str, kind: str | tuple[str, ...] | None = None) -> dict:
    """Checks a parsed document (schema, version, kind, summary/results types); returns it."""
    if not isinstance(doc, dict):
        raise ResultsError(f"{where}: not a drope results file (expected a JSON object)")
    if "schema" in doc:
        if doc["schema"] != SCHEMA:
            raise ResultsError(f"{where}: schema {json.dumps(doc['schema'])} is not {SCHEMA}")
        v = doc.get("schema_version")
        if not isinstance(v, int) or isinstance(v, bool):
            raise ResultsError(f"{where}: 'schema_version' must be an integer")
        if v < 1 or v > SCHEMA_VERSION:
            raise ResultsError(f"{where}: schema_version {v} is not supported (these scripts read versions up to "
                               f"{SCHEMA_VERSION}; update drope)")
    wanted = (kind,) if isinstance(kind, str) else kind
    found = doc.get("kind")
    if found is None and "schema" not in doc and wanted:
        found = next((k for k in wanted if k in _LEGACY_KINDLESS and _LEGACY_KINDLESS[k] in doc), None)
    if not isinstance(found, str):
        raise ResultsError(f"{where}: not a drope results file (no string 'kind')")
    if wanted and found not in wanted:
        raise ResultsError(f"{where}: a '{found}' results file, expected '{' or '.join(wanted)}'")
    if "summary" in doc and not isinstance(doc["summary"], dict):
        raise ResultsError(f"{where}: 'summary' must be an object")
    if "results" in doc and not isinstance(doc["results"], list):
        raise ResultsError(f"{where}: 'results' must be a list")
    return doc


def load(path: str | pathlib.Path, kind: str | tuple[str, ...] | None = None) -> dict:
    """Reads and validates one results file; `kind` (one or several) is what the caller expects."""
    try:
        doc = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ResultsError(f"{path}: cannot read a results file: {e}") from e
    return validate(doc, str(path), kind)

