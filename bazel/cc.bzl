"""The C++ rules with the compile options the engine's code needs.

Every BUILD file of the engine loads cc_library, cc_binary and cc_test from
here rather than from rules_cc, so that the options below apply wherever the
engine is built, including from another workspace whose .bazelrc knows
nothing of them.
"""

load("@rules_cc//cc:defs.bzl", _cc_binary = "cc_binary", _cc_library = "cc_library", _cc_test = "cc_test")

# Bazel 4's default is -std=c++0x; the engine is C++20, which LibTorch 2.x's
# headers require (1.13's compile under it too).
ENGINE_COPTS = ["-std=c++20"]

def cc_library(copts = [], **kwargs):
    _cc_library(copts = ENGINE_COPTS + copts, **kwargs)

def cc_binary(copts = [], **kwargs):
    _cc_binary(copts = ENGINE_COPTS + copts, **kwargs)

def cc_test(copts = [], **kwargs):
    _cc_test(copts = ENGINE_COPTS + copts, **kwargs)
