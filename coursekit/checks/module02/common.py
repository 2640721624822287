"""What module 2's questions share: the notebook they belong to."""

MODULE = "02_loss_scaling"
