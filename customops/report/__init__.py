"""Reports only render: they take plain records and findings, never ELF files or the linker model."""
