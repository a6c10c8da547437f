"""llama.cpp (mainline): its rules, compute buffers and start-up log."""
