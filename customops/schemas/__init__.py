"""The versioned identifiers of customops' machine-readable outputs (JSON Schemas beside this file)."""

SCAN = "customops.scan/1"
RESOLVE = "customops.resolve/1"
CHECK = "customops.check/1"
PROFILE = "customops.profile/1"
RELEASES = "customops.releases/1"
MATRIX = "customops.matrix/1"
