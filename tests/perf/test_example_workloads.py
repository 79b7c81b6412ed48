"""The example perf tests (the project's main job).

They check what a perf test needs from its inputs (the spec files and test_*.py beside it replay them): each
shipped workload loads and validates, and its prompts come out at exactly the planned token
lengths, as text too, with the session's tokenizer, so the lengths a server sees are the trace's;
generated prompts (hash blocks, synthetic) re-encode to the very same ids.
"""

from itertools import pairwise
from pathlib import Path

import pytest

from pytest_llmreplay import TokenIds

WORKLOADS = sorted(
    p.name
    for p in (Path(__file__).resolve().parents[2] / "workloads").iterdir()
    if p.suffix in {".jsonl", ".csv", ".yaml"}
)


@pytest.mark.parametrize("name", WORKLOADS)
def test_prompts_have_the_planned_lengths(name, llm_workload, llm_prompts):
    workload = llm_workload(f"workloads/{name}")
    assert workload.num_requests > 0
    for session in workload.sessions[:20]:
        for index, ids in enumerate(llm_prompts.session_ids(session)):
            turn = session.turns[index]
            assert len(ids) == turn.input_tokens, (session.id, index)
            if max(ids) >= llm_prompts.tokenizer.vocab_size:
                continue  # a trace's own ids from a larger vocabulary go out as ids, not text
            text, encoded = llm_prompts.text(ids)
            assert len(encoded) == len(ids), (session.id, index)
            if not isinstance(turn.prompt, TokenIds):  # generated prompts round-trip exactly
                assert encoded == ids, (session.id, index)


def test_mooncake_requests_that_share_hash_ids_share_prompt_tokens(llm_workload, llm_prompts):
    workload = llm_workload("workloads/mooncake_conversation_head200.jsonl")
    first, second = workload.sessions[0], workload.sessions[1]
    assert first.turns[0].prompt.hash_ids[0] == second.turns[0].prompt.hash_ids[0] == 0
    assert first.turns[0].prompt.hash_ids[1] != second.turns[0].prompt.hash_ids[1]
    a, b = llm_prompts.session_ids(first)[0], llm_prompts.session_ids(second)[0]
    assert a[:512] == b[:512]
    assert a[512:1024] != b[512:1024]


def test_trie_turns_grow_by_response_and_tool_output(llm_workload, llm_prompts):
    session = llm_workload("workloads/trie_office_work_8k_slice.jsonl").sessions[0]
    prompts = llm_prompts.session_ids(session)
    for before, after in pairwise(prompts):
        assert after[: len(before)] == before
