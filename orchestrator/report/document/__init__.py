"""`orch report` and `orch compare`'s documents: Jinja2 templates (reports/templates/) filled
by one module per section, listed in sections_registry.py; render.py renders them as
markdown or HTML."""
