"""``accel launch``: resolve the configuration, build the worker environment, start the job."""
