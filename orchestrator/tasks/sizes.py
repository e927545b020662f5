"""Harbor's deprecated size strings (`[environment] memory = "8G"`, `storage = "20G"`).

Older Harbor tasks give sizes as strings; Harbor still reads them and maps them onto
`memory_mb` / `storage_mb`. The rule is Harbor's, kept exactly so a task means the same
number of megabytes here as there: trim, upper-case, one suffix (G, M or K), a float before
it, and `int()` truncation of the result (so "1.5G" is 1536 and "2047K" is 1).

`parse_size_mb("8G")` is 8192.
"""

from __future__ import annotations


def parse_size_mb(text: str) -> int:
    """The megabytes of a size string such as "8G", "512m" or "1.5G", truncated to an int.

    Raises ValueError (naming the text and the expected form) for anything else: no suffix,
    no number, or a number `int()` cannot take (inf, nan).
    """
    cleaned = text.strip().upper()
    try:
        if cleaned.endswith("G"):
            return int(float(cleaned[:-1]) * 1024)
        if cleaned.endswith("M"):
            return int(float(cleaned[:-1]))
        if cleaned.endswith("K"):
            return int(float(cleaned[:-1]) / 1024)
    except (ValueError, OverflowError):
        pass
    raise ValueError(f"invalid size {text!r}: expected a number and G, M or K, like '8G'")
