"""`drope-eval longbench-score` against LongBench's official scoring, re-implemented here from the
definitions in LongBench/metrics.py and eval.py on top of the very packages they call (`rouge` 1.0.1,
`jieba` 0.42.1, `fuzzywuzzy` 0.18.0 without python-Levenshtein). Tricky strings are scored one sample
per dataset and call, so a single wrong value shows; random sets check the aggregation (eval.py's
sequential sum, LongBench-E's np.mean buckets). Bad prediction/data files fail with file:line and
write nothing. `longbench` itself runs end to end on a tiny random model.

Run as a script (`python test_longbench_metrics.py DIR [--e] ...`) this file is the oracle: it scores
prediction directories from module level, so the Python call depth equals eval.py's (rouge 1.0.1's
LCS reconstruction recurses, and LongBench scores 0 where it hits the recursion limit)."""
import json
import math
import os
import pathlib
import random
import re
import string
import subprocess
import sys
import warnings
from collections import Counter

import pytest

from conftest import expect_error, run_cli

warnings.filterwarnings("ignore")  # fuzzywuzzy's "slow pure-python SequenceMatcher" warning

# --- the oracle: metrics.py's definitions over the real packages -------------------------------------

CN_PUNCT = ("！？｡。＂＃＄％＆＇（）＊＋，－／：；＜＝＞＠［＼］＾＿｀｛｜｝～｟｠｢｣､、"
            "〃》「」『』【】〔〕〖〗〘〙〚〛〜〝〞〟〰〾〿"
            "–—‘’‛“”„‟…‧﹏.")


def normalize_answer(s):
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def normalize_zh_answer(s):
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation + CN_PUNCT))
    return "".join(s.split())


def f1_score(prediction, ground_truth):
    same = sum((Counter(prediction) & Counter(ground_truth)).values())
    if same == 0:
        return 0
    precision = 1.0 * same / len(prediction)
    recall = 1.0 * same / len(ground_truth)
    return (2 * precision * recall) / (precision + recall)


def qa_f1_score(prediction, ground_truth, **kwargs):
    return f1_score(normalize_answer(prediction).split(), normalize_answer(ground_truth).split())


def qa_f1_zh_score(prediction, ground_truth, **kwargs):
    import jieba

    def tokens(s):
        return [t for t in (normalize_zh_answer(w) for w in jieba.cut(s, cut_all=False)) if len(t) > 0]

    return f1_score(tokens(prediction), tokens(ground_truth))


def rouge_score(prediction, ground_truth, **kwargs):
    from rouge import Rouge

    try:
        scores = Rouge().get_scores([prediction], [ground_truth], avg=True)
    except:  # noqa: E722 -- LongBench catches everything (empty hypothesis, RecursionError)
        return 0.0
    return scores["rouge-l"]["f"]


def rouge_zh_score(prediction, ground_truth, **kwargs):
    import jieba

    prediction = " ".join(list(jieba.cut(prediction, cut_all=False)))
    ground_truth = " ".join(list(jieba.cut(ground_truth, cut_all=False)))
    return rouge_score(prediction, ground_truth)


def classification_score(prediction, ground_truth, **kwargs):
    matched = [c for c in kwargs["all_classes"] if c in prediction]
    for term in matched:  # removing while iterating skips elements -- as metrics.py does
        if term in ground_truth and term != ground_truth:
            matched.remove(term)
    return 1.0 / len(matched) if ground_truth in matched else 0.0


def _share_of(numbers, target):
    right = sum(1 for n in numbers if str(n) == str(target))
    return 0.0 if len(numbers) == 0 else float(right / len(numbers))


def count_score(prediction, ground_truth, **kwargs):
    return _share_of(re.findall(r"\d+", prediction), ground_truth)


def retrieval_score(prediction, ground_truth, **kwargs):
    return _share_of(re.findall(r"\d+", prediction), re.findall(r"Paragraph (\d+)", ground_truth)[0])


def retrieval_zh_score(prediction, ground_truth, **kwargs):
    return _share_of(re.findall(r"\d+", prediction), re.findall(r"段落(\d+)", ground_truth)[0])


def code_sim_score(prediction, ground_truth, **kwargs):
    from fuzzywuzzy import fuzz

    chosen = ""
    for line in prediction.lstrip("\n").split("\n"):
        if "`" not in line and "#" not in line and "//" not in line:
            chosen = line
            break
    return fuzz.ratio(chosen, ground_truth) / 100


METRIC = {
    "narrativeqa": qa_f1_score, "qasper": qa_f1_score, "multifieldqa_en": qa_f1_score,
    "multifieldqa_zh": qa_f1_zh_score, "hotpotqa": qa_f1_score, "2wikimqa": qa_f1_score, "musique": qa_f1_score,
    "dureader": rouge_zh_score, "gov_report": rouge_score, "qmsum": rouge_score, "multi_news": rouge_score,
    "vcsum": rouge_zh_score, "trec": classification_score, "triviaqa": qa_f1_score, "samsum": rouge_score,
    "lsht": classification_score, "passage_retrieval_en": retrieval_score, "passage_count": count_score,
    "passage_retrieval_zh": retrieval_zh_score, "lcc": code_sim_score, "repobench-p": code_sim_score,
}
FIRST_LINE = ("trec", "triviaqa", "samsum", "lsht")


def sample_score(dataset, prediction, ground_truths, all_classes):
    if dataset in FIRST_LINE:
        prediction = prediction.lstrip("\n").split("\n")[0]
    score = 0.0
    for gt in ground_truths:
        score = max(score, METRIC[dataset](prediction, gt, all_classes=all_classes))
    return score


def scorer(dataset, predictions, answers, all_classes):
    total = 0.0
    for prediction, ground_truths in zip(predictions, answers):
        score = 0.0
        if dataset in FIRST_LINE:
            prediction = prediction.lstrip("\n").split("\n")[0]
        for gt in ground_truths:
            score = max(score, METRIC[dataset](prediction, gt, all_classes=all_classes))
        total += score
    return round(100 * total / len(predictions), 2)


def scorer_e(dataset, predictions, answers, lengths, all_classes):
    import numpy as np

    buckets = {"0-4k": [], "4-8k": [], "8k+": []}
    for prediction, ground_truths, length in zip(predictions, answers, lengths):
        score = 0.0
        if dataset in FIRST_LINE:
            prediction = prediction.lstrip("\n").split("\n")[0]
        for gt in ground_truths:
            score = max(score, METRIC[dataset](prediction, gt, all_classes=all_classes))
        buckets["0-4k" if length < 4000 else "4-8k" if length < 8000 else "8k+"].append(score)
    return {k: round(100 * np.mean(v), 2) for k, v in buckets.items()}


def read_pred_file(path):
    preds, answers, lengths, all_classes = [], [], [], None
    with open(path, encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            preds.append(d["pred"])
            answers.append(d["answers"])
            all_classes = d["all_classes"]  # eval.py keeps the last record's
            if "length" in d:
                lengths.append(d["length"])
    return preds, answers, lengths, all_classes


if __name__ == "__main__":
    # Oracle mode. Scorers are called from module level, as in eval.py (same recursion depth).
    e_mode = "--e" in sys.argv
    all_results = []
    for pred_dir in [a for a in sys.argv[1:] if a != "--e"]:
        result = {}
        for name in sorted(os.listdir(pred_dir)):
            if not name.endswith("jsonl"):
                continue
            p, a, ln, ac = read_pred_file(os.path.join(pred_dir, name))
            if e_mode:
                result[name.split(".")[0]] = scorer_e(name.split(".")[0], p, a, ln, ac)
            else:
                result[name.split(".")[0]] = scorer(name.split(".")[0], p, a, ac)
        all_results.append(result)
    print(json.dumps(all_results))
    sys.exit(0)

# --- fixtures and helpers --------------------------------------------------------------------------


def oracle(dirs, e=False):
    r = subprocess.run([sys.executable, __file__, *map(str, dirs), *(["--e"] if e else [])], capture_output=True,
                       text=True, timeout=200, cwd=pathlib.Path(__file__).parent)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def write_preds(directory, task, rows):
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / f"{task}.jsonl", "w", encoding="utf-8") as f:
        for pred, answers, all_classes, length in rows:
            f.write(json.dumps({"pred": pred, "answers": answers, "all_classes": all_classes, "length": length},
                               ensure_ascii=False) + "\n")


def ours(pred_dir, e=False):
    run_cli("drope-eval", "longbench-score", "--pred", pred_dir, *(["--e"] if e else []))
    return json.loads((pathlib.Path(pred_dir) / "result.json").read_text(encoding="utf-8"))["official"]


def same(a, b):
    """Equal floats, NaN (oracle) == null (our JSON)."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if b is None or (isinstance(b, float) and math.isnan(b)):
        return a is None or (isinstance(a, float) and math.isnan(a))
    return a == b


def words(n):
    return " ".join(f"w{i}" for i in range(1, n + 1))


TREC = ["Description", "Abbreviation", "Abbreviation and Description", "Entity", "Human", "Location"]
LSHT = ["体育", "财经", "体育新闻", "科技"]
CODE = "    def forward(self, x):\n        return self.proj(x)  # note"

# (task, prediction, answers, all_classes, length): the tricky cases, one scored per call.
TRICKY = {
    "multifieldqa_en": [
        ("The Eiffel Tower, in Paris!", ["eiffel tower", "Paris"]),
        ("", ["x"]),
        ("A an THE", ["the"]),
        ("ΣΊΣΥΦΟΣ İstanbul", ["σίσυφος i̇stanbul"]),
        ("naïve café—résumé", ["naive cafe resume", "naïve café résumé"]),
        ("U.S.A. (1990) an_apple", ["usa 1990 anapple"]),
        ("42\u00a0km\u3000north", ["42 km north"]),
        ("Ｔｈｅ ＦＵＬＬＷＩＤＴＨ answer", ["ｔｈｅ fullwidth"]),
    ],
    "triviaqa": [
        ("\n\nParis\nQuestion: what is", ["Paris", "paris france"]),
        ("\n", ["x"]),
        ("London\r\nParis", ["London"]),
        ("  the answer: Rome ", ["Rome", "rome italy"]),
    ],
    "hotpotqa": [("yes", ["yes", "no"]), ("John Smith Jr.", ["John Smith", "Smith Jr"])],
    "multifieldqa_zh": [
        ("作者是刘慈欣。", ["刘慈欣"]),
        ("", ["刘慈欣"]),
        ("《三体》的作者是刘慈欣，他是中国科幻作家", ["刘慈欣", "中国科幻作家刘慈欣"]),
        ("答案是iPhone 15 Pro，售价8999元", ["iPhone 15", "8999元"]),
        ("ＡＢＣ全角　答案！", ["abc全角答案"]),
    ],
    "gov_report": [
        ("the cat sat on the mat. it was happy", ["a cat sat on a mat. the cat was happy"]),
        ("", ["reference"]),
        ("...", ["hello"]),
        ("hello.  . world", ["hello world"]),
        (" . . ", ["x . y"]),
        (words(990), ["w1"]),  # deepest LCS walk eval.py survives
        (words(991), ["w1"]),  # RecursionError → 0
        ("Café. Déjà vu. naïve", ["Déjà vu at the café", "naïve"]),
        ("same same same. same", ["same"]),
    ],
    "samsum": [
        ("\nAmanda will bring cookies tomorrow.\nBob: ok", ["Amanda brings cookies tomorrow."]),
        ("\n\n\n", ["Nothing."]),
    ],
    "qmsum": [("The team agreed on the budget. Marketing objected", ["The budget was agreed. Marketing objected."])],
    "vcsum": [
        ("会议讨论了预算问题，决定增加投入。", ["会议决定增加预算投入"]),
        ("", ["会议"]),
        ("第一项.第二项. 预算v2.0版本", ["预算 v2.0 版本. 第一项"]),
        (words(989), ["w1"]),
        (words(990), ["w1"]),
    ],
    "dureader": [("北京是中国的首都，也是政治中心。", ["北京是首都", "中国的首都是北京"])],
    "trec": [
        ("Type: Description and Abbreviation", ["Abbreviation"], TREC),
        ("Abbreviation, Description, Abbreviation and Description", ["Abbreviation and Description"], TREC),
        ("\nHuman\nLocation", ["Human"], TREC),
        ("nothing matches", ["Entity"], TREC),
        ("Entity", ["Plant"], TREC),
    ],
    "lsht": [("体育新闻", ["体育"], LSHT), ("这是财经和科技", ["财经"], LSHT), ("\n体育\n财经", ["体育新闻"], LSHT)],
    "passage_count": [("There are 12 unique, not 12.5 or 3", ["12"]), ("٣ or 3", ["3"]), ("none", ["3"]),
                      ("１２", ["12"])],
    "passage_retrieval_en": [("Paragraph 7, maybe Paragraph 17", ["Paragraph 7"]), ("P7", ["Paragraph 7"]),
                             ("", ["Paragraph 3"])],
    "passage_retrieval_zh": [("段落3", ["段落3"]), ("答案是段落12和3", ["段落12"])],
    "lcc": [
        ("\n\n# c\n```\nreturn foo(x)\nnext", ["return bar(x);"]),
        ("", [""]),
        ("# only", [""]),
        ("x", [""]),
        ("// c\nint y = x * 2;", ["int y = x*2;"]),
        ("x" * 150 + "y" * 60 + "abc", ["y" * 3 + "x" * 250 + "abc"]),  # difflib autojunk
        (CODE, ["        return self.proj(x)"]),
    ],
    "repobench-p": [("print('é😀 ok')", ["print('é😀')"]), ("    self.assertEqual(a, b)", ["self.assertEqual(a,b)"])],
}


def tricky_rounds(tmp):
    """Round k holds the k-th tricky case of every dataset (one record per file)."""
    n = max(len(v) for v in TRICKY.values())
    dirs = []
    for k in range(n):
        d = tmp / f"round{k}"
        for task, cases in TRICKY.items():
            if k < len(cases):
                pred, answers, *cls = cases[k]
                write_preds(d, task, [(pred, answers, cls[0] if cls else None, 100)])
        dirs.append(d)
    return dirs


def test_tricky_samples_match_official_metrics(tmp):
    dirs = tricky_rounds(tmp)
    expected = oracle(dirs)
    nonzero = 0
    for d, exp in zip(dirs, expected):
        got = ours(d)
        for task in exp:
            assert same(exp[task], got[task]), f"{task} in {d.name}: official {exp[task]}, ours {got[task]}"
            nonzero += exp[task] > 0
    assert nonzero > 30  # the cases exercise real matches, not just zeros
    # The recursion cases: 990 words score, 991 do not (eval.py's RecursionError).
    assert expected[5]["gov_report"] > 0 and expected[6]["gov_report"] == 0


def random_text(rng, zh):
    en = ("the a an cat dog sat on mat Paris France 1990 hello world's U.S.A. don't naïve CAFÉ İstanbul "
          "budget report team agreed meeting").split()
    cn = ["会议", "预算", "决定", "增加", "投入", "北京", "中国", "首都", "的", "了", "是", "刘慈欣", "科幻", "作家"]
    punct = list(".,!?;:'\"()-_/") + list("，。！？、《》") + [" ", "\n", "\t", "\u3000"]
    pool = (cn * 3 + en) if zh else en * 3 + punct
    return "".join(rng.choice(pool) + rng.choice(["", " ", rng.choice(punct)]) for _ in range(rng.randint(0, 30)))


def random_rows(rng, task, n):
    rows = []
    zh = task in ("multifieldqa_zh", "vcsum", "dureader")
    for _ in range(n):
        length = rng.choice([rng.randint(0, 3999), rng.randint(4000, 7999), rng.randint(8000, 20000)])
        if task == "lcc":
            gt = rng.choice(["return x + y;", "self.x = x", "for i in range(n):", "int y = x * 2;"])
            pred = "\n".join(rng.choice(["# c", gt[: rng.randint(0, len(gt))] + "z", "```", gt]) for _ in range(3))
            rows.append((pred, [gt], None, length))
        elif task == "trec":
            gt = rng.choice(TREC)
            rows.append((" ".join(rng.sample(TREC, rng.randint(0, 3))), [gt], TREC, length))
        elif task == "passage_count":
            rows.append((" ".join(str(rng.randint(1, 9)) for _ in range(rng.randint(0, 3))), [str(rng.randint(1, 9))],
                         None, length))
        else:
            gt = random_text(rng, zh)
            pred = gt[: rng.randint(0, len(gt))] + random_text(rng, zh) if rng.random() < 0.6 else random_text(rng, zh)
            rows.append((pred, [gt, random_text(rng, zh)], None, length))
    return rows


@pytest.mark.parametrize("e", [False, True])
def test_random_sets_aggregate_like_eval_py(tmp, e):
    rng = random.Random(1234)
    d = tmp / "random"
    for task in ("qasper", "multifieldqa_zh", "gov_report", "vcsum", "trec", "passage_count", "lcc"):
        write_preds(d, task, random_rows(rng, task, 150))
    # one task whose 8k+ bucket stays empty: np.mean([]) is nan
    write_preds(d, "samsum", [(r[0], r[1], None, min(r[3], 7999)) for r in random_rows(rng, "samsum", 40)])
    expected = oracle([d], e=e)[0]
    got = ours(d, e=e)
    assert same(expected, got), (expected, got)
    if e:
        assert got["samsum"]["8k+"] is None
        assert all(0 < got[t]["0-4k"] < 100 for t in ("qasper", "gov_report", "vcsum", "lcc"))


# --- bad input ------------------------------------------------------------------------------------


def test_malformed_prediction_file_fails_with_file_and_line(tmp):
    d = tmp / "bad"
    write_preds(d, "qasper", [("a", ["a"], None, 1)])
    write_preds(d, "lcc", [("x", ["x"], None, 1)])
    with open(d / "lcc.jsonl", "a", encoding="utf-8") as f:
        f.write('{"pred": "x", "answers": ["x"], "all_classes": null\n')
    r = run_cli("drope-eval", "longbench-score", "--pred", d, check=False)
    expect_error(r, f"{d / 'lcc.jsonl'}:2:", "invalid JSON")
    assert not (d / "result.json").exists() and not (d / "result.csv").exists()

    # Earlier results survive a failing run with the same --out.
    good = tmp / "good"
    write_preds(good, "qasper", [("a", ["a"], None, 1)])
    run_cli("drope-eval", "longbench-score", "--pred", good, "--out", tmp / "res")
    before = (tmp / "res.json").read_text()
    r = run_cli("drope-eval", "longbench-score", "--pred", d, "--out", tmp / "res", check=False)
    expect_error(r, "lcc.jsonl:2:")
    assert (tmp / "res.json").read_text() == before

    (d / "lcc.jsonl").write_text('{"pred": "x", "all_classes": null}\n', encoding="utf-8")
    expect_error(run_cli("drope-eval", "longbench-score", "--pred", d, check=False),
                 "lcc.jsonl:1: missing key 'answers'")
    (d / "lcc.jsonl").write_text('{"pred": 3, "answers": [], "all_classes": null}\n', encoding="utf-8")
    expect_error(run_cli("drope-eval", "longbench-score", "--pred", d, check=False),
                 "lcc.jsonl:1: key 'pred' must be a string")
    (d / "lcc.jsonl").unlink()
    write_preds(d, "mystery", [("x", ["x"], None, 1)])
    expect_error(run_cli("drope-eval", "longbench-score", "--pred", d, check=False),
                 "'mystery' is not a LongBench task")
    (d / "mystery.jsonl").unlink()
    (d / "qasper.jsonl").write_text('{"pred": "x", "answers": ["x"], "all_classes": null}\n', encoding="utf-8")
    expect_error(run_cli("drope-eval", "longbench-score", "--pred", d, "--e", check=False),
                 "qasper.jsonl:1: missing key 'length'")
    write_preds(d, "passage_retrieval_en", [("1", ["no paragraph"], None, 1)])
    expect_error(run_cli("drope-eval", "longbench-score", "--pred", d, check=False), "passage_retrieval_en.jsonl",
                 "holds no 'Paragraph <number>'")
    assert not (d / "result.json").exists()


def test_longbench_rejects_bad_data_before_loading_a_model(tmp):
    data = tmp / "data"
    data.mkdir()
    rec = {"input": "q", "context": "c", "answers": ["a"], "length": 5, "all_classes": None}
    (data / "qasper.jsonl").write_text(json.dumps(rec) + "\n" + json.dumps({**rec, "answers": "a"}) + "\n")
    r = run_cli("drope-eval", "longbench", "--model", tmp / "no-model", "--data", data, "--tasks", "qasper",
                check=False)
    expect_error(r, f"{data / 'qasper.jsonl'}:2: key 'answers' must be a list of strings")
    r = run_cli("drope-eval", "longbench", "--model", tmp / "no-model", "--data", data, "--tasks", "qasper,bogus",
                check=False)
    expect_error(r, "unknown LongBench task 'bogus'")
    r = run_cli("drope-eval", "longbench", "--model", tmp / "no-model", "--data", data, "--tasks", "musique", "--e",
                check=False)
    expect_error(r, "'musique' has no LongBench-E version")
    r = run_cli("drope-eval", "longbench", "--model", tmp / "no-model", "--data", data, "--tasks", "lcc", check=False)
    expect_error(r, str(data / "lcc.jsonl"))
    assert not (pathlib.Path.cwd() / "longbench.json").exists()


# --- end to end --------------------------------------------------------------------------------------

LICENSES = pathlib.Path("/usr/share/common-licenses")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """The `tiny` preset (random weights) with a byte-level BPE tokenizer trained on the licenses."""
    if not LICENSES.is_dir():
        pytest.skip("needs /usr/share/common-licenses")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    texts = [p.read_text(encoding="utf-8") for p in sorted(LICENSES.iterdir()) if p.is_file() and not p.is_symlink()]
    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    hf.train_from_iterator(texts, trainer=trainers.BpeTrainer(
        vocab_size=1000, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    m = tmp_path_factory.mktemp("lbmodel") / "m"
    run_cli("drope-model", "init", "--preset", "tiny", "--out", m)
    (m / "tokenizer.json").write_text(hf.to_str(), encoding="utf-8")
    return m, texts


def test_longbench_end_to_end_on_a_tiny_model(tmp, tiny_model):
    model, texts = tiny_model
    data = tmp / "data"
    data.mkdir()
    ctx = texts[0][:5000]
    rows = {
        "lcc": [{"input": "", "context": ctx + f"\ndef f{i}(x):\n", "answers": ["    return x"],
                 "length": 3000 + i * 3000,
                 "all_classes": None, "_id": f"l{i}"} for i in range(3)],
        "trec": [{"input": "What is X?", "context": ctx[:400], "answers": ["Entity"], "length": 100,
                  "all_classes": TREC}],
        "samsum": [{"input": "Dialogue: A: hi\nSummary: ", "context": ctx[:3000], "answers": ["A says hi."],
                    "length": 900, "all_classes": None}],
    }
    for task, recs in rows.items():
        (data / f"{task}_e.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    out = tmp / "res" / "run"
    args = ["drope-eval", "longbench", "--model", model, "--data", data, "--tasks", "lcc,trec,samsum", "--e",
            "--max-length", 200, "--out", out, "--batch-size", 2]
    r = run_cli(*args)
    assert "lcc: 3 samples (3 truncated)" in r.stdout
    pred_dir = tmp / "res" / "run-pred"
    preds = {t: [json.loads(line) for line in (pred_dir / f"{t}.jsonl").read_text().splitlines()] for t in rows}
    assert [p["_id"] for p in preds["lcc"]] == ["l0", "l1", "l2"]
    assert [p["length"] for p in preds["lcc"]] == [3000, 6000, 9000]
    assert preds["trec"][0]["all_classes"] == TREC and preds["samsum"][0]["answers"] == ["A says hi."]
    result = json.loads((tmp / "res" / "run.json").read_text())
    assert result["benchmark"] == "LongBench-E" and result["method"]["max_length"] == 200
    # The written predictions score the same through the official definitions.
    assert same(oracle([pred_dir], e=True)[0], result["official"])
    # Greedy decoding is deterministic: a second run (batch size 1) writes the same predictions.
    first = {t: (pred_dir / f"{t}.jsonl").read_text() for t in rows}
    run_cli(*args[:-2], "--batch-size", 1)
    assert first == {t: (pred_dir / f"{t}.jsonl").read_text() for t in rows}
    # A failing run keeps the earlier tables and predictions.
    (data / "trec_e.jsonl").write_text("{oops}\n")
    expect_error(run_cli(*args, check=False), "trec_e.jsonl:1: invalid JSON")
    assert json.loads((tmp / "res" / "run.json").read_text()) == result
    assert first == {t: (pred_dir / f"{t}.jsonl").read_text() for t in rows}
