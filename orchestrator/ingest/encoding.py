"""A study file's bytes as text, whatever encoding its byte-order mark names.

A Windows driver saves its console capture as UTF-16 with a BOM and CRLF line ends (PowerShell's
`>` and `Out-File`), some tools write UTF-32 or UTF-8 with a BOM; every other file is read as
UTF-8 (undecodable bytes replaced, and then found binary by ingest/checks.py). The encoding
found is said in the run's provenance (`record.extra["source_encoding"]`), since a file read
as the wrong encoding would import as nothing, silently.
"""
from __future__ import annotations

import codecs
from pathlib import Path

from orchestrator.engines.bmoe_format import BOM
from orchestrator.ingest.checks import read_regular, text_reason

# longest first: the UTF-32-LE BOM starts with the UTF-16-LE one
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32-le", "UTF-32-LE"),
         (codecs.BOM_UTF32_BE, "utf-32-be", "UTF-32-BE"),
         (codecs.BOM_UTF8, "utf-8", "UTF-8"),
         (codecs.BOM_UTF16_LE, "utf-16-le", "UTF-16-LE"),
         (codecs.BOM_UTF16_BE, "utf-16-be", "UTF-16-BE"))


def decode(data: bytes) -> tuple[str, str]:
    """(the text without its BOM, what it was: `UTF-8`, `UTF-16-LE with BOM`, ..., plus
    `, CRLF` when its lines end so)."""
    name, text = "UTF-8", None
    for bom, codec, label in _BOMS:
        if data.startswith(bom):
            text = data[len(bom):].decode(codec, errors="replace")
            name = f"{label} with BOM"
            break
    if text is None:
        text = data.decode("utf-8", errors="replace")
    if "\r\n" in text[:65536]:
        name += ", CRLF"
    return text, name


def has_wide_bom(data: bytes) -> bool:
    """A UTF-16 or UTF-32 BOM: the NUL bytes that follow are text, not binary."""
    return data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE,
                            codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE))


def read_decoded(path: Path) -> tuple[str | None, str, str | None]:
    """(text, its encoding as ingest/encoding.py names it, None), or (None, "", why it cannot
    be read as text). A UTF-16/32 file (its BOM says so) is decoded before it is checked."""
    try:
        data = read_regular(path)
    except OSError as exc:
        return None, "", f"unreadable: {exc.strerror or exc}"
    if has_wide_bom(data):
        text, encoding = decode(data)
        reason = text_reason(text.encode("utf-8", errors="replace")) or \
            ("binary (undecodable bytes)" if "\ufffd" in text[:65536] else None)
    else:
        reason = text_reason(data)
        text, encoding = decode(data) if reason is None else ("", "")
    if reason:
        return None, "", reason
    return text.lstrip(BOM), encoding, None
