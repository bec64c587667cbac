"""Training: a run's settings (`run_config`), the sharded train step and optimizers, the
loop and its actions (logging, evaluation, checkpoints, early stopping, preemption), DRO
and its baselines, fine-tuning from another run, sharded input, and the dry run with its
memory plan.

May import every package above config.
"""
