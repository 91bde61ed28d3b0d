"""Worker adapters: process lifecycle and transport of one agent, nothing else."""
