"""Workloads: what is replayed.

The workload model (sessions of turns, :mod:`.workload`), the trace formats it is read from and
written to (:mod:`.formats`), its statistics (:mod:`.stats`), and the prompts made for turns that
carry only lengths or hash blocks (:mod:`.prompts`, with the tokenizer they are counted in,
:mod:`.tokenizer`).
"""
