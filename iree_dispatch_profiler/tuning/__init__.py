"""Auto-tuning of a user's module or whole model on llvm-cpu."""
