load("@rules_cc//cc:defs.bzl", "cc_library")

package(default_visibility = ["//visibility:public"])

# ATen, c10 and the c10d/pickler headers: what engine code includes.
cc_library(
    name = "libtorch",
    hdrs = %{headers},
    includes = %{includes},
    linkopts = [
        "-L%{lib_dir}",
        "-Wl,-rpath,%{lib_dir}",
        "-ltorch",
        "-ltorch_cpu",
        "-lc10",
    ],
)

# The C++ frontend (torch/torch.h: nn, optim). Costly to compile: use only
# where modules or optimizers are really used.
cc_library(
    name = "frontend",
    hdrs = glob(["include/torch/csrc/api/include/**/*.h"]),
    includes = ["include/torch/csrc/api/include"],
    deps = [":libtorch"],
)

# Gloo itself, for code that runs Gloo's algorithms beside c10d's.
cc_library(
    name = "gloo",
    linkopts = [%{gloo_linkopts}],
    deps = [":libtorch"],
)
