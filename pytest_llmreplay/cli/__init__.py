"""The ``llmreplay`` command: :mod:`.main` parses the command line and hands each subcommand to its
module (``run``, ``sweep``, ``compare``, ``history``, ``sim``, ``calibrate``); :mod:`.options`
holds the options they share.
"""
