"""drope-bench step-parts: both parts timed on every path, the JSON written whole (the numbers are a benchmark's,
so only their presence and sign are checked here)."""
import json

from conftest import run_cli


def test_step_parts_times_every_path_and_writes_json(tmp):
    out = tmp / "parts.json"
    r = run_cli("drope-bench", "step-parts", "--preset", "micro", "--rows", "64", "--repeats", "2", "--threads", "1",
                "--json", out)
    assert "| LM-head loss fwd+bwd |" in r.stdout and "| AdamW update |" in r.stdout, r.stdout
    doc = json.loads(out.read_text())
    assert doc["preset"] == "micro" and doc["rows"] == 64 and doc["params"] > 0
    assert set(doc["loss_ms"]) == {"fused", "separate", "materialised"}
    assert set(doc["adamw_ms"]) == {"fused", "separate"}
    assert all(v > 0 for part in ("loss_ms", "adamw_ms") for v in doc[part].values())
    assert not list(tmp.glob("parts.json.*")), "no temporary file left behind"
