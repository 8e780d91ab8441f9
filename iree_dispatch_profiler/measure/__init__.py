"""Measuring what IREE built, for sweeps, comparisons and the tuner alike: the protocol
(interleaved rounds until precision or budget, intervals, drift) and verification (seeded
inputs, references, the tolerance rule, output agreement)."""
