load("@rules_cc//cc:defs.bzl", "cc_library")

package(default_visibility = ["//visibility:public"])

exports_files(["torchrun"])

# Debian's libtorch-dev. Its headers sit in /usr/include, which the compiler
# searches anyway and Bazel treats as the system's (as it does libc's: a new
# libtorch-dev needs `bazel clean`). Declaring them made every compile
# action's sandbox link all 8,000 of them: a cold build of //engine/dist/...
# took 214 s here against 160 s without. Only the C++ frontend's, under a
# folder of their own, are declared.
cc_library(
    name = "libtorch",
    linkopts = [
        "-L/usr/lib/x86_64-linux-gnu",
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

cc_library(
    name = "cuda",
    deps = ["@cuda"],
)
