"""Kernel backends (one table: registry), attention implementations (one table: attention), the kernel doctor
(doctor, probes, known_bad), the curated kernel set (kernel_set) and warm caches (cache)."""
