"""What module 3's questions share: the notebook they are checked in."""

MODULE = "03_batch_dependence"
