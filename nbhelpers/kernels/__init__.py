"""Kernel backends (one table: registry), attention implementations (one table: attention), warm caches."""
