"""Training: the trainer loop, its checkpoints and resume, launch, tracking and progress."""
