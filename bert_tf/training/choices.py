"""The choices of the run options' flags (bert_tf.training.run_options.RunOptions), without TensorFlow: the scripts
define their flags from them before TensorFlow loads, and the modules that act on them (distribute, optimization,
trainer) check against the same lists."""

# --distribution_strategy (bert_tf/training/distribute.py says what each is).
STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")
# --all_reduce_alg (mirrored): how replicas on one machine sum their gradients. None: MirroredStrategy's own choice
# (NCCL between GPUs, a reduction to one device between CPU devices). The TF Model Garden's flag, plus ring.
ALL_REDUCE_ALGS = ("nccl", "hierarchical_copy", "ring")
# --collective_implementation (multi_worker_mirrored): auto = NCCL when this worker has GPUs, else ring over gRPC.
COLLECTIVE_IMPLEMENTATIONS = ("auto", "nccl", "ring")
# --optimizer (bert_tf/training/optimization.py says what each is).
OPTIMIZERS = ("adamw", "adamw_bias_corrected", "lamb")
# --dtype: the Keras dtype policy of the model (compute dtype; variables stay float32).
DTYPES = ("float32", "mixed_float16", "mixed_bfloat16")
