"""scripts/real_model.sh's table from its step results (the steps themselves: tests/py/test_gguf.py)."""
from studies import real_model


def test_render_has_every_row():
    summary = {
        "parity": {"tokens": 89, "max_abs_logit_diff": 6e-5, "rel_logit_err": 1.6e-6, "argmax_agreement": 1.0,
                   "greedy_equal": True, "greedy_ours": " He had a long white beard"},
        "niah": {"results": [{"task": "single_1", "length": 2048, "score": 100.0},
                             {"task": "single_1", "length": 4096, "score": 50.0},
                             {"task": "multivalue", "length": 2048, "score": 75.0}]},
        "ppl_rope": {"results": [{"length": 512, "ppl": 32.96}, {"length": 2048, "ppl": 40.04}]},
        "ppl_drope_no_recal": {"results": [{"length": 512, "ppl": 265.5}]},
        "ppl_16k": {"yarn": {"results": [{"length": 16384, "ppl": 51.2}]}},
        "seconds": 229.0,
    }
    md = real_model.render(summary)
    assert "max abs diff 6.00e-05, rel 1.60e-06, argmax agree 100.0 %" in md
    assert "| greedy 24 tokens | identical: \"He had a long white beard\" |" in md
    assert "| single_1 | 100 | 50 |" in md and "| multivalue | 75 | – |" in md
    assert "| as released (RoPE) | 32.96 | 40.04 |" in md and "| DroPE, no recalibration | 265.5 | – |" in md
    assert "| 16K with yarn x2 | 16384: 51.20 |" in md


def test_long_context_methods_are_names_drope_eval_accepts():
    from conftest import run_cli

    help_text = run_cli("drope-eval", "ppl", "--help").stdout
    accepted = help_text.split("--rope-scaling", 1)[1].split("{", 1)[1].split("}", 1)[0].split(",")
    assert set(real_model.LONG_METHODS) <= set(accepted), (real_model.LONG_METHODS, accepted)
