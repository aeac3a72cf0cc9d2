"""Stored runs -> numbers: per-run statistics from the store (query), A/B rows per model (ab),
devices and sessions side by side (comparison), comparability warnings (drift), a config's
history across sessions and builds (history), ceilings, routing figures and cache replay
(routes, replay), model facts and quality summaries. Nothing here formats text: views are in
report/."""
