"""Fit estimator: will a fine-tune fit in memory, and how fast will it run, before it starts.

- ``facts.model_facts(spec)``: the model measured on the meta device (torch; run in a subprocess);
- ``memory.estimate(spec, facts, machine)``: memory per device, verdict, suggestions and
  throughput, in pure Python (the engine process calls it);
- ``memory.measured_peak(events)``: the peak a run's memory events recorded, to compare.

See docs/estimator.md for the formulas, constants and measured accuracy.
"""
