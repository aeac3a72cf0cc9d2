"""The document's sections are registered once (report/document/sections_registry.py): every
module of document/ that declares a section (TEMPLATE and a context function) is in SECTIONS,
and every registered template exists among the built-in ones."""
from __future__ import annotations

import importlib
import pkgutil

import orchestrator.report.document as document
from orchestrator.report.document.render import environment
from orchestrator.report.document.sections_registry import SECTIONS


def test_every_section_module_is_registered_once():
    declared = set()
    for info in pkgutil.iter_modules(document.__path__):
        module = importlib.import_module(f"{document.__name__}.{info.name}")
        if hasattr(module, "TEMPLATE") and (hasattr(module, "context")
                                            or hasattr(module, "group_context")):
            declared.add(module.__name__)
    registered = [(s.context or s.group_context).__module__ for s in SECTIONS]
    assert len(registered) == len(set(registered))
    assert set(registered) == declared


def test_every_registered_template_exists():
    env, _ = environment()
    for section in SECTIONS:
        assert section.context is not None or section.group_context is not None
        env.get_template(section.template)
