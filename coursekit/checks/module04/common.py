"""What module 4's questions share: the notebook they are checked in."""

MODULE = "04_distributed"
