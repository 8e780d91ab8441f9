"""Operation families (one module each), their CPU and CUDA tile rules, and the registry."""
