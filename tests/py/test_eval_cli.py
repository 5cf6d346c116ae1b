"""drope-eval ppl / generate / fit-temperature / compare against HF transformers on the same random
Llama model and a byte-level BPE tokenizer trained on the fly (independent implementations)."""
import json
import math
import pathlib

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM

from conftest import expect_error, run_cli

LICENSES = pathlib.Path("/usr/share/common-licenses")


def text_corpus():
    files = sorted(p for p in LICENSES.iterdir() if p.is_file())
    return [p.read_text(encoding="utf-8", errors="replace")[:12000] for p in files[:6]]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("evalcli")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(text_corpus(), trainer=trainers.BpeTrainer(
        vocab_size=400, show_progress=False, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    V = tok.get_vocab_size()
    eos = tok.token_to_id("<|endoftext|>")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=32, rms_norm_eps=1e-5, tie_word_embeddings=True,
                      bos_token_id=None, eos_token_id=eos, attn_implementation="eager")
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(1.0 + 0.2 * torch.randn_like(p) if "norm" in n else 0.25 * torch.randn_like(p))
    mdir = root / "model"
    model.save_pretrained(mdir)
    (mdir / "tokenizer.json").write_text(tok.to_str(), encoding="utf-8")
    text = text_corpus()[1][:3000]
    (root / "eval.txt").write_text(text, encoding="utf-8")
    return dict(root=root, mdir=mdir, tok=tok, model=model, cfg=cfg, text=text)


def hf_sliding_ppl(model, ids, L, stride):
    """The sliding-window protocol (docs/design.md#perplexity) written out: windows of L every `stride`, each
    scoring its new tokens; exp(mean of means)."""
    means, prev_end = [], 0
    for begin in range(0, len(ids), stride):
        end = min(begin + L, len(ids))
        x = torch.tensor([ids[begin:end]])
        with torch.no_grad():
            logp = torch.log_softmax(model(x).logits.double(), -1)[0]
        first = max(prev_end - begin, 1)
        nll = [-logp[t - 1, ids[begin + t]].item() for t in range(first, end - begin)]
        means.append(sum(nll) / len(nll))
        prev_end = end
        if end == len(ids):
            break
    return math.exp(sum(means) / len(means))


def yarn_model(s, factor):
    cfg = LlamaConfig(**{**s["cfg"].to_dict(), "rope_scaling": {"rope_type": "yarn", "factor": factor,
                                                                 "original_max_position_embeddings": 32}})
    m = LlamaForCausalLM(cfg).eval()
    m.load_state_dict(s["model"].state_dict())
    return m


def test_ppl_matches_hf_sliding_window_and_yarn(setup, tmp):
    s = setup
    ids = s["tok"].encode(s["text"]).ids  # (+ EOS after the document, beyond the 200 tokens scored)
    out = tmp / "res" / "ppl"
    run_cli("drope-eval", "ppl", "--model", s["mdir"], "--data", s["root"] / "eval.txt", "--lengths", "16,48",
            "--stride", "12", "--max-tokens", "200", "--out", out)
    res = json.loads(out.with_suffix(".json").read_text())
    assert res["kind"] == "ppl" and [r["length"] for r in res["results"]] == [16, 48]
    for r in res["results"]:
        ref = hf_sliding_ppl(s["model"], ids[:200], r["length"], 12)
        assert abs(r["ppl"] - ref) / ref < 2e-4, (r, ref)
    for ext in (".csv", ".md", ".png", ".svg"):
        assert out.with_suffix(ext).is_file()
    # Eval-time YaRN (s = 2 over the 32-token training length) equals HF's YaRN at 64 tokens.
    run_cli("drope-eval", "ppl", "--model", s["mdir"], "--data", s["root"] / "eval.txt", "--lengths", "64",
            "--stride", "32", "--max-tokens", "160", "--rope-scaling", "yarn", "--factor", "2", "--out", tmp / "y",
            "--with", out.with_suffix(".json"))
    got = json.loads((tmp / "y.json").read_text())["results"][0]["ppl"]
    ref = hf_sliding_ppl(yarn_model(s, 2.0), ids[:160], 64, 32)
    plain = hf_sliding_ppl(s["model"], ids[:160], 64, 32)
    assert abs(got - ref) / ref < 2e-4 and abs(plain - ref) / ref > 1e-3, (got, ref, plain)


def test_generate_matches_hf_greedy_alone_and_batched(setup, tmp):
    s = setup
    prompts = ["The licensor grants you", "Permission is hereby granted, free of charge, to any person obtaining"]
    expect = []
    for p in prompts:
        x = torch.tensor([s["tok"].encode(p).ids])
        with torch.no_grad():
            y = s["model"].generate(x, max_new_tokens=12, do_sample=False, pad_token_id=0,
                                    eos_token_id=s["cfg"].eos_token_id)
        expect.append(y[0, x.shape[1]:].tolist())
    for bs in ("1", "2"):
        args = ["drope-eval", "generate", "--model", s["mdir"], "--max-new-tokens", "12", "--batch-size", bs,
                "--prefill-chunk", "5", "--out", tmp / f"g{bs}.jsonl"]
        for p in prompts:
            args += ["--prompt", p]
        run_cli(*args)
        lines = [json.loads(l) for l in (tmp / f"g{bs}.jsonl").read_text().splitlines()]
        assert [l["tokens"] for l in lines] == expect, bs
        assert [l["output"] for l in lines] == [s["tok"].decode(e) for e in expect]
    # A stop sequence cuts the text before it.
    full = s["tok"].decode(expect[0])
    stop = full[len(full) // 2:len(full) // 2 + 2]
    run_cli("drope-eval", "generate", "--model", s["mdir"], "--prompt", prompts[0], "--max-new-tokens", "12",
            "--stop", stop, "--out", tmp / "stop.jsonl")
    line = json.loads((tmp / "stop.jsonl").read_text())
    assert line["finish"] == "stop" and stop not in line["output"] and full.startswith(line["output"])


def test_fit_temperature_then_auto_and_compare(setup, tmp):
    s = setup
    save = tmp / "temperature.json"
    run_cli("drope-eval", "fit-temperature", "--model", s["mdir"], "--data", s["root"] / "eval.txt",
            "--lengths", "64", "--stride", "32", "--max-tokens", "160", "--beta-max", "2", "--save", save,
            "--out", tmp / "fit")
    fit = json.loads(save.read_text())
    f = fit["fits"][0]
    assert min(f["grid_ppl"]) == pytest.approx(f["best_ppl"]) and f["best_ppl"] <= f["base_ppl"]
    assert fit["c"] == pytest.approx((f["best_beta"] - 1) / math.log(2))
    # --temperature auto reads <model>/temperature.json: absent → clear error; present → used.
    r = run_cli("drope-eval", "ppl", "--model", s["mdir"], "--data", s["root"] / "eval.txt", "--lengths", "64",
                "--temperature", "auto", "--out", tmp / "auto", check=False)
    expect_error(r, "temperature.json", "fit-temperature")
    (s["mdir"] / "temperature.json").write_text(save.read_text())
    try:
        run_cli("drope-eval", "ppl", "--model", s["mdir"], "--data", s["root"] / "eval.txt", "--lengths", "64",
                "--stride", "32", "--max-tokens", "160", "--temperature", "auto", "--out", tmp / "auto")
    finally:
        (s["mdir"] / "temperature.json").unlink()
    auto = json.loads((tmp / "auto.json").read_text())
    assert auto["method"]["temperature"] == pytest.approx(fit["c"])
    assert auto["results"][0]["ppl"] == pytest.approx(f["best_ppl"], rel=1e-5)
    run_cli("drope-eval", "ppl", "--model", s["mdir"], "--data", s["root"] / "eval.txt", "--lengths", "64",
            "--stride", "32", "--max-tokens", "160", "--label", "base", "--out", tmp / "base")
    run_cli("drope-eval", "compare", tmp / "base.json", tmp / "auto.json", "--out", tmp / "cmp")
    md = (tmp / "cmp.md").read_text()
    assert "| base |" in md and "ppl@64" in md
    # Length columns in numeric order.
    for name, L in (("a", [256, 1024, 64]), ("b", [512])):
        (tmp / f"{name}.json").write_text(json.dumps({"kind": "ppl", "method": {"label": name},
                                                      "summary": {f"ppl@{x}": 1.0 for x in L}}))
    run_cli("drope-eval", "compare", tmp / "a.json", tmp / "b.json", "--out", tmp / "cmp2")
    assert (tmp / "cmp2.csv").read_text().splitlines()[0] == "method,ppl@64,ppl@256,ppl@512,ppl@1024"
    expect_error(run_cli("drope-eval", "compare", tmp / "a.json", tmp / "fit.json", "--out", tmp / "cmp3",
                         check=False), "fit.json")


def test_bad_inputs_fail_clearly_and_keep_results(setup, tmp):
    s = setup
    data = s["root"] / "eval.txt"
    keep = tmp / "keep.json"
    keep.write_text("earlier")
    bad = tmp / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": 3}\n')
    cases = [
        (["--data", bad, "--lengths", "16"], [str(bad) + ":2", 'field "text" must be a string']),
        (["--data", data, "--lengths", "16", "--temperature", "warm"], ["--temperature", "warm"]),
        (["--data", data, "--lengths", "16", "--factor", "2"], ["--factor 2 given without --rope-scaling"]),
        (["--data", data, "--lengths", "16", "--rope-scaling", "yarn"], ["needs --factor"]),
        (["--data", tmp / "missing.txt", "--lengths", "16"], ["missing.txt", "no such file"]),
        (["--data", data], ["--lengths or --multipliers"]),
        (["--data", data, "--lengths", "4000000000"], ["--lengths", "at most 4194304 tokens", "4000000000"]),
        (["--data", data, "--lengths", "16", "--with", bad], ["--with", "bad.jsonl"]),
    ]
    for extra, needles in cases:
        r = run_cli("drope-eval", "ppl", "--model", s["mdir"], *extra, "--out", tmp / "keep", check=False)
        expect_error(r, *needles)
        assert keep.read_text() == "earlier" and not (tmp / "keep.csv").exists()
    nomodel = tmp / "notok"
    nomodel.mkdir()
    for f in ("config.json", "model.safetensors"):
        (nomodel / f).write_bytes((s["mdir"] / f).read_bytes())
    r = run_cli("drope-eval", "generate", "--model", nomodel, "--prompt", "hi", check=False)
    expect_error(r, "no tokenizer", "--tokenizer")


def test_side_outputs_never_write_over_inputs(setup, tmp):
    """fit-temperature's --save (by default <model>/temperature.json) may replace an earlier fit only: never a
    file of the model, the data or a directory, whatever it is called; the check comes before the fit."""
    s = setup
    m = tmp / "m"
    m.mkdir()
    for f in s["mdir"].iterdir():
        (m / f.name).write_bytes(f.read_bytes())
    data = tmp / "eval.txt"
    data.write_text(s["text"], encoding="utf-8")
    before = {p.name: p.read_bytes() for p in [*m.iterdir(), data]}
    fit = ("drope-eval", "fit-temperature", "--model", m, "--data", data, "--lengths", 48, "--max-tokens", 200)
    for target, needle in ((m / "config.json", "is not a temperature fit"),
                           (m / "model.safetensors", "is not a temperature fit"),
                           (m / "tokenizer.json", "is not a temperature fit"),
                           (m, "is a directory"), (data, "is the input --data")):
        expect_error(run_cli(*fit, "--save", target, check=False), "--save", str(target), needle)
    assert {p.name: p.read_bytes() for p in [*m.iterdir(), data]} == before
    # The default file is written, and written again (an earlier fit is ours to replace), also when --tokenizer
    # names the model directory.
    for extra in ([], ["--tokenizer", m]):
        run_cli(*fit, *extra)
        assert json.loads((m / "temperature.json").read_text())["kind"] == "temperature"
    # A temperature.json that no fit wrote is the user's: refused, and kept.
    (m / "temperature.json").write_text('{"c": 0.5, "note": "mine"}')
    expect_error(run_cli(*fit, check=False), "temperature.json", "is not a temperature fit")
    assert "mine" in (m / "temperature.json").read_text()


def test_flags_are_refused_by_name(setup, tmp):
    """Flags the runs used to accept silently, or refuse naming an internal field: each is one line naming the
    flag, before the model is run."""
    s = setup
    data = s["root"] / "eval.txt"
    ppl = ("drope-eval", "ppl", "--model", s["mdir"], "--data", data, "--out", tmp / "p")
    cases = [
        ((*ppl, "--lengths", "16", "--threads", "100000"), ["--threads", "[0, 1024]", "100000"]),
        ((*ppl, "--lengths", "16,24,16"), ["--lengths: 16 is listed twice"]),
        ((*ppl, "--multipliers", "0.5,0.51"), ["--multipliers: 0.5 and 0.51 both give 16 tokens"]),
        ((*ppl, "--multipliers", "0.01"), ["--multipliers: 0.01", "a window needs at least 2"]),
        ((*ppl, "--lengths", "16", "--stride", "0"), ["--stride", "got 0"]),
        ((*ppl, "--lengths", "16", "--max-tokens", "-5"), ["--max-tokens", "got -5"]),
        ((*ppl, "--lengths", "16", "--max-windows", "-1"), ["--max-windows", "got -1"]),
        ((*ppl, "--lengths", "16", "--temperature", "1e300"), ["--temperature", "[0, 100]", "1e300"]),
        ((*ppl, "--lengths", "16", "--temperature", "0x10"), ["--temperature", "0x10"]),
        ((*ppl, "--lengths", "16", "--temperature", " 1"), ["--temperature", "' 1'"]),
        ((*ppl, "--lengths", "16", "--temperature", "nan"), ["--temperature", "nan"]),
        ((*ppl, "--lengths", "16", "--label", "a\nb"), ["--label", "one line"]),
        ((*ppl, "--lengths", "16", "--split", "train"), ["--split train", "only a token dataset"]),
        ((*ppl, "--lengths", "16", "--text-key", "body"), ["--text-key body", "no .jsonl"]),
        ((*ppl, "--lengths", "16", "--text-key", ""), ["--text-key", "got ''"]),
        (("drope-eval", "generate", "--model", s["mdir"], "--prompt", "hi", "--batch-size", "0"),
         ["--batch-size", "got 0"]),
        (("drope-eval", "generate", "--model", s["mdir"], "--prompt", "hi", "--prefill-chunk", "0"),
         ["--prefill-chunk", "got 0"]),
        (("drope-eval", "generate", "--model", s["mdir"], "--prompt", "hi", "--stop", ""), ["--stop", "empty"]),
    ]
    for cmd, needles in cases:
        expect_error(run_cli(*cmd, check=False), *needles)
        assert not list(tmp.glob("p.*")), cmd
    # In range, a temperature still runs, and the same results file twice is one file, not two seeds.
    run_cli(*ppl, "--lengths", "16", "--temperature", "0.5")
    expect_error(run_cli("drope-eval", "compare", tmp / "p.json", f"{tmp}/./p.json", "--out", tmp / "c",
                         check=False), "given twice", "p.json")


def test_ppl_on_token_dataset_equals_text_input(setup, tmp):
    """A `drope-data prepare` dataset (one document, no validation split) scores like the text it came from."""
    s = setup
    (tmp / "docs").mkdir()
    (tmp / "docs" / "a.txt").write_text(s["text"], encoding="utf-8")
    run_cli("drope-data", "prepare", "--input", tmp / "docs", "--tokenizer", s["mdir"], "--val-fraction", "0",
            "--out", tmp / "data")
    common = ["--lengths", "32", "--stride", "16", "--max-tokens", "150"]
    run_cli("drope-eval", "ppl", "--model", s["mdir"], "--data", tmp / "data", "--split", "train", *common,
            "--out", tmp / "ds")
    run_cli("drope-eval", "ppl", "--model", s["mdir"], "--data", tmp / "docs" / "a.txt", *common, "--out", tmp / "tx")
    a = json.loads((tmp / "ds.json").read_text())["results"][0]
    b = json.loads((tmp / "tx.json").read_text())["results"][0]
    assert a["ppl"] == pytest.approx(b["ppl"], rel=1e-9) and a["tokens"] == b["tokens"] == 149
    for split, needle in (("val", "0 tokens"), ("test", "no split 'test'")):  # val is empty here
        r = run_cli("drope-eval", "ppl", "--model", s["mdir"], "--data", tmp / "data", "--split", split, *common,
                    "--out", tmp / "bad", check=False)
        expect_error(r, needle)
