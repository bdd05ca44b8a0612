"""Fine-tuning tasks: readers, features, heads, metrics."""
