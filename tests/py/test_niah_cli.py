"""`drope-eval niah` / `niah-grid` through --dump-prompts with a real byte-level BPE tokenizer trained on the
fly: every prompt's length is re-counted with HF `tokenizers` (an independent implementation) and must fit
the target with the 128-token generation budget, yet fill it; needles, answers and the RULER text are
checked on the prompts; bad input fails with a message naming the flag or file and leaves earlier output
alone."""
import json
import pathlib
import re

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from conftest import expect_error, run_cli

LICENSES = pathlib.Path("/usr/share/common-licenses")
GEN = 128


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    """(path to tokenizer.json, HF tokenizer): GPT-2 style byte-level BPE trained on the licenses (1000 ids,
    so the 1024-token `tiny` model preset can use it)."""
    if not LICENSES.is_dir():
        pytest.skip("needs /usr/share/common-licenses")
    texts = licenses_text().split("\n\n")
    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    hf.train_from_iterator(texts, trainer=trainer)
    path = tmp_path_factory.mktemp("niahtok") / "tokenizer.json"
    path.write_text(hf.to_str(), encoding="utf-8")
    return path, hf


def licenses_text():
    return "\n\n".join(p.read_text(encoding="utf-8") for p in sorted(LICENSES.iterdir())
                       if p.is_file() and not p.is_symlink())


def n_tokens(hf, text):
    return len(hf.encode(text, add_special_tokens=False).ids)


def niah(*args, check=True):
    return run_cli("drope-eval", "niah", *args, check=check)


def read_jsonl(path):
    return [json.loads(line) for line in pathlib.Path(path).read_text(encoding="utf-8").splitlines()]


def test_dump_prompts_fit_and_fill_the_target(tmp, tok):
    path, hf = tok
    out = tmp / "prompts.jsonl"
    lengths = [700, 1600]
    niah("--tokenizer", path, "--tasks", "all", "--lengths", ",".join(map(str, lengths)), "--trials", 3,
         "--seed", 7, "--dump-prompts", out)
    rows = read_jsonl(out)
    assert len(rows) == 8 * len(lengths) * 3
    # One more haystack unit would not fit: the largest unit is a noise paragraph (~25 tokens) or a
    # distractor needle, so every prompt comes within that of the budget.
    noise = n_tokens(hf, "\nThe grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.")
    for r in rows:
        p = r["prompt"]
        n = n_tokens(hf, p)
        slack = max(noise, n_tokens(hf, "\n" + r["needles"][0])) + 2
        assert n == r["prompt_tokens"], (r["task"], n, r["prompt_tokens"])  # our BPE agrees with HF's
        assert n + GEN <= r["length"], (r["task"], r["length"], n)
        assert n + GEN > r["length"] - slack, (r["task"], r["length"], n)
        singular = len(r["expected"]) == 1
        kind = {"single_3": "uuid", "multikey_3": "uuid"}.get(r["task"], "number")
        if singular:
            assert p.startswith(f"A special magic {kind} is hidden within the following text.")
            assert p.endswith(f" The special magic {kind} for {r['queries'][0]} mentioned in the provided text is")
        else:
            assert p.startswith(f"Some special magic {kind}s are hidden within the following text.")
            q = r["queries"]
            joined = q[0] if len(q) == 1 else ", ".join(q[:-1]) + ", and " + q[-1]
            assert p.endswith(f" The special magic {kind}s for {joined} mentioned in the provided text are")
        for needle in r["needles"]:
            assert p.count(needle) == 1
            assert needle.startswith(f"One of the special magic {kind}s for ")
        for v in r["expected"]:
            assert p.count(v) == 1
    by_task = {}
    for r in rows:
        by_task.setdefault(r["task"], []).append(r)
    assert len(by_task["multikey_1"][0]["needles"]) == 4 and len(by_task["multikey_1"][0]["queries"]) == 1
    assert len(by_task["multivalue"][0]["expected"]) == 4 and len(by_task["multivalue"][0]["queries"]) == 1
    assert len(by_task["multiquery"][0]["queries"]) == 4 and len(by_task["multiquery"][0]["expected"]) == 4
    assert by_task["single_1"][0]["prompt"].count("The grass is green.") == by_task["single_1"][0]["haystack_units"]
    mk2 = by_task["multikey_2"][0]
    assert mk2["prompt"].count("One of the special magic numbers for ") == mk2["haystack_units"] + 1


def test_same_seed_same_prompts(tmp, tok):
    path, _ = tok
    args = ["--tokenizer", path, "--tasks", "paper,single_3", "--lengths", "900", "--trials", 2]
    niah(*args, "--seed", 1, "--dump-prompts", tmp / "a.jsonl")
    niah(*args, "--seed", 1, "--dump-prompts", tmp / "b.jsonl")
    niah(*args, "--seed", 2, "--dump-prompts", tmp / "c.jsonl")
    a, b, c = (read_jsonl(tmp / f) for f in ("a.jsonl", "b.jsonl", "c.jsonl"))
    assert [r["prompt"] for r in a] == [r["prompt"] for r in b]
    assert all(x["prompt"] != y["prompt"] for x, y in zip(a, c))


def test_grid_dump_depths_with_python_tokenizer(tmp, tok):
    path, hf = tok
    out = tmp / "grid.jsonl"
    run_cli("drope-eval", "niah-grid", "--tokenizer", path, "--lengths", "1000,2000", "--depths", "0,25,50,75,100",
            "--trials", 2, "--dump-prompts", out)
    rows = read_jsonl(out)
    assert len(rows) == 2 * 5 * 2
    head = "I will quiz you about the number afterwards.\n"
    for r in rows:
        p = r["prompt"]
        assert n_tokens(hf, p) + GEN <= r["length"]
        assert p.count(r["needle"]) == 1 and p.count(r["expected"][0]) == 1
        assert f"What is the special magic number for {r['key']} mentioned in the provided text?" in p
        context = p[p.index(head) + len(head):p.index("\nWhat is the special magic number")]
        before = context[:context.index(r["needle"])].rstrip(" ")
        hay = context.replace(" " + r["needle"], "").replace(r["needle"] + " ", "")
        depth = r["depth"]
        if depth == 0:
            assert before == ""
        elif depth == 100:
            assert context.endswith(r["needle"])
        else:
            # Snapped back to a sentence end: terminal punctuation, or a paragraph break in the source text.
            if before[-1] not in ".!?)\"'":
                tail = r"\s+".join(map(re.escape, before.split()[-8:]))
                assert re.search(tail + r"[ \t]*\n\s*\n", licenses_text()), before[-80:]
            frac = 100 * n_tokens(hf, before) / n_tokens(hf, hay)
            assert frac <= depth + 0.5, (depth, frac)
            assert abs(frac - r["actual_depth"]) < 0.5, (frac, r["actual_depth"])
            assert frac > depth - 25, (depth, frac)


def test_bad_input_names_the_flag_or_file(tmp, tok):
    path, _ = tok
    out = tmp / "keep.jsonl"
    out.write_text("earlier results\n")
    base = ["--dump-prompts", out]
    (tmp / "empty.txt").write_text("")
    (tmp / "latin1.txt").write_bytes("caf\xe9 cr\xe8me. Tr\xe8s bien.".encode("latin-1"))
    with open(tmp / "huge.txt", "wb") as f:  # split into words whole: refused above 64 MiB before it is read
        f.truncate((64 << 20) + 1)
    cases = [
        (["--tasks", "single_1,bogus"], ["--tasks", "bogus"]),
        (["--tasks", "single_2", "--haystack", tmp / "missing.txt"], ["--haystack", "missing.txt"]),
        (["--tasks", "single_2", "--haystack", tmp / "empty.txt"], ["--haystack", "empty.txt", "empty"]),
        (["--tasks", "single_2", "--haystack", tmp / "latin1.txt"], ["--haystack", "latin1.txt", "UTF-8"]),
        (["--tasks", "single_2", "--haystack", tmp / "huge.txt"], ["--haystack", "huge.txt", "64 MiB"]),
        (["--tasks", "multiquery", "--lengths", "150"], ["--lengths", "150"]),
        (["--lengths", "800,abc"], ["--lengths", "abc"]),
        (["--trials", "0"], ["--trials"]),
        (["--trials", "99999999999"], ["--trials", "1048576"]),
        (["--max-new-tokens", "9223372036854775807"], ["--max-new-tokens", "4194304"]),
        (["--batch-size", "-1"], ["--batch-size", "65536"]),
        (["--tasks", "single_1", "--tokenizer", tmp / "nope.json"], ["nope.json"]),
    ]
    for extra, needles in cases:
        defaults = [a for flag, value in (("--tokenizer", path), ("--lengths", "800"), ("--trials", "2"))
                    if flag not in extra for a in (flag, value)]
        expect_error(niah(*base, *defaults, *extra, check=False), *needles)
        assert out.read_text() == "earlier results\n"
    # Neither a model nor a tokenizer; a run without --dump-prompts needs --model.
    expect_error(niah("--lengths", "800", "--dump-prompts", out, check=False), "--tokenizer")
    expect_error(niah("--tokenizer", path, "--lengths", "800", check=False), "--model")
    grid = ["niah-grid", "--tokenizer", path, "--dump-prompts", out]
    expect_error(run_cli("drope-eval", *grid, "--lengths", "800", "--depths", "0,150", check=False), "--depths", "150")
    expect_error(run_cli("drope-eval", *grid, "--lengths", "60", check=False), "--lengths", "60")
    # A length or depth listed twice would be run twice and written as two rows.
    expect_error(niah(*base, "--tokenizer", path, "--lengths", "800,900,800", check=False),
                 "--lengths: 800 is listed twice")
    expect_error(run_cli("drope-eval", *grid, "--lengths", "800", "--depths", "50,50", check=False),
                 "--depths: 50 is listed twice")
    assert out.read_text() == "earlier results\n"
    assert not list(tmp.glob("keep.jsonl.*"))  # no temp files left behind


def test_dump_prompts_never_writes_over_an_input(tmp, tok):
    """--dump-prompts is an output like --out: never the tokenizer, the haystack or a file of the model."""
    path, _ = tok
    tk = tmp / "tokenizer.json"
    tk.write_bytes(path.read_bytes())
    hay = tmp / "hay.txt"
    hay.write_text("The grass is green. The sky is blue. " * 200)
    m = tmp / "m"
    run_cli("drope-model", "init", "--preset", "tiny", "--out", m)
    before = {f: f.read_bytes() for f in (tk, hay, *m.iterdir())}
    run = ["--tokenizer", tk, "--lengths", "800", "--trials", "1", "--tasks", "single_1", "--haystack", hay]
    for cmd, target, needle in (
            (["niah", *run], tk, "is the input --tokenizer"),
            (["niah", *run], hay, "is the input --haystack"),
            (["niah", *run, "--model", m], m / "model.safetensors", "is inside the input --model"),
            (["niah", *run], tmp, "is a directory"),
            (["niah-grid", "--tokenizer", tk, "--lengths", "800", "--trials", "1", "--depths", "50"], tk,
             "is the input --tokenizer")):
        expect_error(run_cli("drope-eval", *cmd, "--dump-prompts", target, check=False), "--dump-prompts",
                     needle)
    assert {f: f.read_bytes() for f in before} == before


def test_model_run_writes_tables_samples_and_heatmap(tmp, tok):
    """The full path with a (random) tiny model: generation runs, every sample is scored and recorded."""
    path, _ = tok
    model = tmp / "m"
    run_cli("drope-model", "init", "--preset", "tiny", "--out", model)
    (model / "tokenizer.json").write_bytes(pathlib.Path(path).read_bytes())
    res = tmp / "res" / "niah"
    r = niah("--model", model, "--tasks", "single_1,multiquery", "--lengths", "400,500", "--trials", 2,
             "--batch-size", 2, "--max-new-tokens", 8, "--label", "tiny-rand", "--out", res)
    doc = json.loads((tmp / "res" / "niah.json").read_text())
    assert doc["kind"] == "niah" and doc["method"]["label"] == "tiny-rand"
    assert sorted(doc["summary"]) == sorted(["single_1@400", "single_1@500", "multiquery@400", "multiquery@500",
                                             "single_1", "multiquery", "avg"])
    samples = read_jsonl(tmp / "res" / "niah.samples.jsonl")
    assert len(samples) == 2 * 2 * 2
    for s in samples:
        assert s["prompt_tokens"] + 8 <= s["length"]
        assert 0 <= s["score"] <= 100 and isinstance(s["output"], str)
    md = (tmp / "res" / "niah.md").read_text()
    assert "| tiny-rand | multiquery |" in md and "| 400 | 500 | mean |" in md, md
    assert "niah_multiquery @ 500" in r.stdout
    grid = tmp / "res" / "grid"
    run_cli("drope-eval", "niah-grid", "--model", model, "--lengths", "300,400", "--depths", "0,50,100",
            "--trials", 1, "--max-new-tokens", 8, "--out", grid)
    g = json.loads((tmp / "res" / "grid.json").read_text())
    assert len(g["heatmap"]["values"]) == 3 * 2 and len(g["results"]) == 6
    assert (tmp / "res" / "grid.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in (tmp / "res" / "grid.svg").read_text()
    assert len(read_jsonl(tmp / "res" / "grid.samples.jsonl")) == 6
