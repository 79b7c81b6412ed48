"""The replay: sending a workload to an endpoint and recording what came back.

The plan (:mod:`.plan`: the settings, the sessions in sending order, their arrival times) is
made before anything is sent; the driver (:mod:`.driver`) paces sessions and requests on a clock (:mod:`.clock`: wall or
virtual), sends them through an endpoint (:mod:`.endpoints`: OpenAI-compatible HTTP, parsed by
:mod:`.sse`) and keeps one record per request (:mod:`.records`); :mod:`.workers` splits a run
over processes or a Ray cluster. The server a run may start, and stop whatever happens, is
:mod:`.server_process` (with :mod:`.watchdog`); :mod:`.signal_stop` stops several replays in a
row on Ctrl-C.

Named ``replayer`` rather than ``replay`` so that it does not shadow the public
``pytest_llmreplay.replay`` function.
"""
