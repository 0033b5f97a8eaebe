"""Pipeline parallelism under the ``fsdp`` strategy: the model split into stages over the mesh's
``pp`` dimension (``ParallelismConfig(pp_size=N)``), each stage sharded with FSDP2 over its own
data-parallel processes, and the training step run by a ``torch.distributed.pipelining``
schedule.

- :mod:`~accel_backends.fsdp.pipelining.stages`: which part of the model a process keeps (a
  user's ``split_fn``, or a transformers causal LM split by its decoder layers); the stage keeps
  the model's own parameter names.
- :mod:`~accel_backends.fsdp.pipelining.schedule_step`: ``accelerator.forward_backward`` under a
  schedule (GPipe or 1F1B): micro-batches, the loss on the last stage, the batch's loss sent to
  every stage.
- :mod:`~accel_backends.fsdp.pipelining.clipping`: the gradient norm of the whole model, over
  every stage.
"""
