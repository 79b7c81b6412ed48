"""How many of a simulated response's tokens are reasoning, before its answer.

A reasoning model served with a reasoning parser (vLLM's ``--reasoning-parser``, SGLang's)
streams its thinking as ``reasoning_content`` deltas, then its answer as ``content``, and counts
the thinking in ``usage.completion_tokens_details.reasoning_tokens``; the thinking is part of the
output, within ``max_tokens``. The simulator does the same with :func:`reasoning_tokens` of a
request's tokens, the first of:

- the request's ``sim_reasoning_tokens`` (an integer >= 0): a request option, which ``extra_body``
  may give every request (``{"sim_reasoning_tokens": 500}``), and which the replay sends for a
  turn whose workload records its reasoning length (``Turn.reasoning_tokens``: a synthetic
  workload's ``reasoning_tokens``);
- the profile's ``reasoning``: a number, or a distribution as a synthetic workload's lengths
  (``{"dist": "lognormal", "mean": 900, "std": 600, "max": 8000}``), drawn per request from the
  seed and the request's number (its order of arrival), at least 0;
- else 0: no reasoning.

It is cut to the request's output length (a request whose ``max_tokens`` runs out while it
thinks has no answer). The engine ends a chunk at the boundary, and hands out the first answer
token alone, so that offline, where a decode span's tokens come as one chunk, the first answer
token's time is exact as the first token's is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..workloads.prompts import stable_hash

if TYPE_CHECKING:
    from .profile import Profile


def reasoning_tokens(asked: int | None, profile: Profile, seed: int, number: int) -> int:
    """The reasoning tokens of request ``number`` (module docstring), before the cut to its
    output: ``asked`` (its ``sim_reasoning_tokens``) when given, else a draw from the profile's
    ``reasoning``, else 0."""
    if asked is not None:
        return asked
    if profile.reasoning is None:
        return 0
    rng = np.random.default_rng(stable_hash("sim-reasoning", seed, number))
    return int(profile.reasoning.sample(rng, 1, integer=True, minimum=0)[0])
