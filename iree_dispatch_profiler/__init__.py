"""Profile and tune IREE dispatches: generate, compile, verify, time and tune.

Layers, each importing only those before it (tests/test_layout.py holds this):

  core    vocabulary: library (types, targets, configurations), stats, files, values
  ops     operation families and their tile rules; registry: the one list of kinds
  iree    IREE's tools and bindings, by job: tools, process, target, launchers, timing and
          timers (with resident), iree_jobs, compile cache, builder, machines, dask_client,
          user modules (modules, tunable), the config-applied check
  measure the measurement protocol and verification, shared by sweeps, comparisons and tuning
  sweep   generated dispatches: manifest, build, profiling, comparison, baselines, report,
          plots, progress
  tuning  strategies, spaces, specs, the seed's cfg, records; one engine with single_op
          and model tuning as its clients
  report  HTML reports (page, charts, content) from the files the commands write
  cli     options and one module per command (generator, compile, profiler, compare,
          autotune, report); the scripts at the top of a checkout and the installed commands
          call them
"""
