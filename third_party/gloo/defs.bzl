"""The rename under which the engine's copy of Gloo is compiled.

Every target that compiles Gloo's sources or includes its headers sets these
as local_defines (never as defines: a consumer's own use of LibTorch's Gloo,
through c10d's ProcessGroupGloo, must keep the name `gloo`).
"""

GLOO_RENAME = ["gloo=dist_engine_gloo"]
