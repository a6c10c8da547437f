"""Reading and checking a spec: YAML with positions, the schema, role defaults, cross-checks."""
