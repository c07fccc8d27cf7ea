"""Kernel backends (eager, Liger, torch.compile), attention implementations, warm caches."""
