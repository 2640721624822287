"""What module 5's questions share: the notebook they are checked in."""

MODULE = "05_capstone"
