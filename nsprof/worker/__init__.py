"""The worker: the program the profilers launch (program), and its protocol with nsprof (protocol)."""
