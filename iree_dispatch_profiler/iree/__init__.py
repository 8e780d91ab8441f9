"""IREE's tools and Python bindings, as the sweeps and the tuner use them."""
