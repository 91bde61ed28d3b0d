"""Workers over the Agent Client Protocol."""
