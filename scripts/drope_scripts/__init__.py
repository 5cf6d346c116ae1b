"""Python parts of the drope scripts (scripts/*.sh run them with the project venv).

corpus / corpus_text: the Debian text corpus (make_corpus.sh); results: the one reader of the tools'
result files; stats: summary statistics; driver: the train / evaluate steps quickstart and reproduce
share; quickstart, reproduce, report: the two pipelines and reproduce's REPORT.md; rehearse: the DroPE pipeline at a
real model's shape on the CPU (rehearse.sh); drope_reference: the DroPE authors' model on transformers' classes.
"""
