"""What module 1's questions share: the notebook they belong to, and the float tolerances."""

MODULE = "01_accumulation"

# Summing N float64 micro-batch gradients in another order than the full batch does changes
# only the last bits: ~1e-15 relative. float32 keeps 24 bits (~6e-8): after a few hundred
# multiply-adds per element, 1e-5 leaves a wide margin over the rounding seen in practice.
TOLERANCE = {"float64": 1e-10, "float32": 1e-5}
