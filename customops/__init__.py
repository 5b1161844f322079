"""customops: will these custom-operation libraries load in this Triton container, and will they collide?"""

__version__ = "0.1.0"
