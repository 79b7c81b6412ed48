"""The pytest plugin.

Its hooks (:mod:`.hooks`, the ``pytest11`` entry point ``llmreplay``), options (:mod:`.options`),
the session's target and fixtures (:mod:`.session`), declarative tests (:mod:`.spec`: the marker
and ``*.llmreplay.yaml|toml`` files), the verdict on a measured test (:mod:`.verdict`: SLOs, the
comparison, the save, the report files), Ctrl-C (:mod:`.interrupt`), lines printed past pytest's
capture (:mod:`.terminal_lines`), configure-time warnings (:mod:`.config_warnings`) and the hooks
other plugins implement (:mod:`.hookspecs`).
"""
