"""The scripts' shared Python library (the studies in studies/ and the tools in scripts/ build on it).

driver: the train / evaluate steps and the one task runner (Driver.parallel); results: the one reader of the
tools' result files; stats: summary statistics; report: reproduce's REPORT.md; offset_key / offset_key_report:
the offset-key retrieval experiment and its aggregation; corpus / corpus_text: the Debian text corpus
(make_corpus.sh); drope_reference: the DroPE authors' model on transformers' classes; gpu_check: gpu-check.sh's
summary; atomic: atomic file writes; cli: the flags and environment knobs of every study, checked before any
work starts.
"""
