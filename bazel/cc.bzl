"""The C++ rules with the compile options the engine's code needs.

Every BUILD file of the engine loads cc_library, cc_binary and cc_test from
here rather than from rules_cc, so that the options below apply wherever the
engine is built, including from another workspace whose .bazelrc knows
nothing of them.

Under --config=unity (CI's), a library's or a test's .cc sources are
compiled as one translation unit, so that LibTorch's headers and the
templates every source instantiates are compiled once per target instead of
once per source. Without it
each source is compiled alone, as users and the consumer workspace build.
"""

load("@rules_cc//cc:defs.bzl", _cc_binary = "cc_binary", _cc_library = "cc_library", _cc_test = "cc_test")

# Bazel 4's default is -std=c++0x; the engine is C++20, which LibTorch 2.x's
# headers require (1.13's compile under it too).
ENGINE_COPTS = ["-std=c++20"]

# Under --config=pch every target loads //bazel:engine_pch first; an error if
# GCC finds its .gch but cannot use it (the options that built it differ).
_PCH_COPTS = ["-include", "engine_pch.h", "-Werror=invalid-pch"]

def _with_pch(copts, kwargs, pch):
    """copts with the precompiled header's options, kwargs with it as a dep,
    under --config=pch (unless pch = False)."""
    if not pch:
        return copts
    enabled = str(Label("//bazel:pch"))
    kwargs["deps"] = kwargs.get("deps", []) + select({
        enabled: [str(Label("//bazel:engine_pch"))],
        "//conditions:default": [],
    })
    return copts + select({enabled: _PCH_COPTS, "//conditions:default": []})

def _unity_srcs(name, srcs):
    """srcs, with the .cc files joined into one under --config=unity.

    The joined file carries a #line directive before each source, so that
    diagnostics name the source and line they come from.
    """
    if type(srcs) != "list":
        return srcs  # already configurable: left as it is
    sources = [src for src in srcs if src.endswith(".cc") and not src.startswith((":", "//", "@"))]
    if len(sources) < 2:
        return srcs
    native.genrule(
        name = name + "_unity",
        srcs = sources,
        outs = [name + "_unity.cc"],
        cmd = "for f in $(SRCS); do echo \"#line 1 \\\"$$f\\\"\"; cat \"$$f\"; done > $@",
    )
    others = [src for src in srcs if src not in sources]
    return select({
        str(Label("//bazel:unity")): [":" + name + "_unity"] + others,
        "//conditions:default": srcs,
    })

def cc_library(name, srcs = [], copts = [], unity = True, pch = True, **kwargs):
    """rules_cc's cc_library; unity = False keeps the sources apart under
    --config=unity too (for sources not written to share a translation
    unit); pch = False compiles without the precompiled header under
    --config=pch: for sources that use no LibTorch, which would only pay
    for loading it, and for options it was not built with."""
    _cc_library(
        name = name,
        srcs = _unity_srcs(name, srcs) if unity else srcs,
        copts = _with_pch(ENGINE_COPTS + copts, kwargs, pch),
        **kwargs
    )

def cc_binary(copts = [], pch = True, **kwargs):
    _cc_binary(copts = _with_pch(ENGINE_COPTS + copts, kwargs, pch), **kwargs)

def cc_test(name, srcs = [], copts = [], pch = True, **kwargs):
    """rules_cc's cc_test; a test of several sources is one translation unit
    under --config=unity, as a library is."""
    _cc_test(
        name = name,
        srcs = _unity_srcs(name, srcs),
        copts = _with_pch(ENGINE_COPTS + copts, kwargs, pch),
        **kwargs
    )
