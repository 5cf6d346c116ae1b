"""The studies: each module is one experiment end to end, run as `bash studies/run.sh NAME [ARGS]`.

They are built on the shared library drope_scripts (scripts/drope_scripts: driver, results, stats, report,
corpus, offset_key); scripts/README.md says what each one measures.
"""
