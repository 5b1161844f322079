"""Container images as targets (`--image`): read a Triton image's layers as the runtimes apply them, keep what the
check reads in a cache keyed by layer digest, and give the check a root and the image's configuration."""
