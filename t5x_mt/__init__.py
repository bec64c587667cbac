"""t5x_mt: multilingual machine translation in JAX/Flax."""
