"""Model profiles: what a model is made of, from GGUF headers or reviewed YAML."""
