"""Training: the run's setup, the update loop and its step, the loss, the schedule, validation, several processes."""
