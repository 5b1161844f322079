"""customops: will these custom-operation libraries load in this Triton container, and will they collide?"""

__version__ = "0.1.0"
PROJECT_URL = "https://github.com/customops/customops"  # SARIF informationUri; the per-code pages live under it
