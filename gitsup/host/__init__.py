"""The machine a task runs on: the one process spawner, cgroups, network namespaces and
egress, the sandbox plan and the bootstrap that enforces it."""
