"""Generated sweeps: dispatches on disk, built, verified, timed, compared and reported."""
