"""Demangle C++ names for display only (ld.so matches raw bytes plus version, so matching never uses this).

cxxfilt calls libstdc++'s __cxa_demangle (2 µs a name, the same output as c++filt); where it is
missing or rejects a name (vector-ABI names such as _ZGVcN4v_...), the raw name is shown.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=65536)
def demangle(name: bytes) -> str:
    raw = name.decode("utf-8", "replace")
    if not name.startswith(b"_Z"):
        return raw
    try:
        import cxxfilt

        return str(cxxfilt.demangle(raw))
    except Exception:  # cxxfilt missing, libstdc++ missing, or an invalid name: show it as it is
        return raw
