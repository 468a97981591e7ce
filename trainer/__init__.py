"""Training support: config, optimizer and schedule, checkpoints, runtime."""
