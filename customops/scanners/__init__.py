"""Scanners answer "what will happen": ELF reading, the dynamic-linker model, collisions, versions."""
