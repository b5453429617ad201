"""Non-public helpers shared by several layers."""
