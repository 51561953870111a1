"""What nsprof needs from the machine: the Nsight tools and their versions (tools), the GPU's
identity (gpu), the one-profiler-per-GPU lock (lock), and redirected output (redirect)."""
