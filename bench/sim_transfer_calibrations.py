"""The calibrations ``bench/sim_transfer.py`` fits and ``bench/sim_band_cpu.py`` draws from.

Each is (name, the (model, workload) pairs whose run 1 is fitted, the parameters fitted, whether
the profiles' ``frontend_ms`` is set beforehand to vLLM's own split of the fitted models' light
runs 1). In order: the three engine parameters on one loaded run of small (what ``calibrate
--from-run`` did before); with the front end and the light run; small and shallow together with
``layer_overhead_ms`` (the front end fitted, or set from vLLM's split), with
``admission_overhead_ms`` too (the set-up of a new request: at these loads the client's figures
pin only its sum with the front end); and the same on shallow and deep, the two models of width
512 with the fewest and the most layers (2 and 8): small (4 layers, the same width) is then a
model of another depth that no fit saw, tiny (width 64) one of another width; and on small and
deep, so that each pair of the three width-512 models is fitted once, the third judged (a model
whose runs sit off the others' line then shows as the one pair that does not carry); and on all
three, tiny then the only model judged.

The loss is over :data:`FITTED_STATISTICS`, the p50s and means: it leaves out TTFT's and TPOT's
p10 and p90, since on this shared 2-core machine the client and vLLM's API server share a core
with other work, and a starved client reads tokens in bursts (TPOT p10 under 0.1 ms, where
vLLM's own step is 3 ms or more: +3,000% to +60,000% errors that no timing value can fit).
"""

from __future__ import annotations

from pytest_llmreplay.sim.calibrate_run import ENGINE_PARAMETERS, STATISTICS

FITTED_STATISTICS = tuple(key for key in STATISTICS if key[1] in ("p50", "mean"))
SMALL_SHALLOW = (("small", "light"), ("small", "chat"), ("shallow", "light"), ("shallow", "chat"))
SHALLOW_DEEP = (("shallow", "light"), ("shallow", "chat"), ("deep", "light"), ("deep", "chat"))
SMALL_DEEP = (("small", "light"), ("small", "chat"), ("deep", "light"), ("deep", "chat"))
WIDTH_512 = (*SMALL_SHALLOW, ("deep", "light"), ("deep", "chat"))
LAYERS_ADMISSION = (*ENGINE_PARAMETERS, "layer_overhead_ms", "admission_overhead_ms")
BEST_WIDTH_512 = "small+shallow-light-chat+layers+admission, front end from vLLM's split"
CALIBRATIONS = (
    ("small-chat", (("small", "chat"),), ENGINE_PARAMETERS, False),
    ("small-agent", (("small", "agent"),), ENGINE_PARAMETERS, False),
    ("small-light-chat+frontend", (("small", "light"), ("small", "chat")), (*ENGINE_PARAMETERS, "frontend_ms"), False),
    (
        "small+shallow-light-chat+frontend+layers",
        SMALL_SHALLOW,
        (*ENGINE_PARAMETERS, "layer_overhead_ms", "frontend_ms"),
        False,
    ),
    ("small+shallow-light-chat+layers+admission+frontend", SMALL_SHALLOW, (*LAYERS_ADMISSION, "frontend_ms"), False),
    (
        "small+shallow-light-chat+layers, front end from vLLM's split",
        SMALL_SHALLOW,
        (*ENGINE_PARAMETERS, "layer_overhead_ms"),
        True,
    ),
    (BEST_WIDTH_512, SMALL_SHALLOW, LAYERS_ADMISSION, True),
    ("shallow+deep-light-chat+layers+admission, front end from vLLM's split", SHALLOW_DEEP, LAYERS_ADMISSION, True),
    ("small+deep-light-chat+layers+admission, front end from vLLM's split", SMALL_DEEP, LAYERS_ADMISSION, True),
    ("small+shallow+deep-light-chat+layers+admission, front end from vLLM's split", WIDTH_512, LAYERS_ADMISSION, True),
)
