"""Tools that prepare what engines need and are not part of a run: the llama.cpp build
(llamacpp_build) and random-weight MoE models (moe_model)."""
