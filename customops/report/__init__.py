"""Reports only render: they take findings and records. They never run the linker model:
`resolve`, which renders its Prediction for `customops resolve`, is the one report that imports customops.linker,
and only its records (prediction, types, and the target the prediction is of); no report reads an ELF file
(customops.elf.demangle, a name's demangling, is all a report takes of customops.elf)."""
