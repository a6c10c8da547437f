"""ik_llama.cpp: its rules, compute buffers and start-up log."""
