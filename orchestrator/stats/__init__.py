"""Pure computation over numbers, no store and no I/O: per-run statistics (statistics), the
intervals and tests that compare them (uncertainty), proportions (Wilson, Newcombe), change
points in a series (changepoints), where two texts part (divergence), and the one rule for a
missing value (values)."""
