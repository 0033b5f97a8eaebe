"""Accelerate's ``accelerate.test_utils.scripts.external_deps``: its checks that need
transformers, datasets, evaluate or DeepSpeed; refused as ``accel.test_utils.scripts`` says."""
