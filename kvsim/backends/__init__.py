"""What the real serving engines do: vLLM, SGLang and TensorRT-LLM, as a deployment would run them.

defaults.py  each backend's defaults per version, GPU and TP degree for the knobs a scenario leaves unset
launch.py    the engine's launch command (``vllm serve ...``) for a deployment a scenario describes
"""
