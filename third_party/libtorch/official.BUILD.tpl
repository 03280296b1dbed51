load("@rules_cc//cc:defs.bzl", "cc_library")

package(default_visibility = ["//visibility:public"])

exports_files(["torchrun"])

# An official LibTorch 2.x, declared whole. Its headers need C++20, as the
# engine's code is built (bazel/cc.bzl).
cc_library(
    name = "libtorch",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.cuh"]),
    includes = ["include"],
    linkopts = [
        "-L%{lib_dir}",
        "-Wl,-rpath,%{lib_dir}",
        "-ltorch",
        "-ltorch_cpu",
        "-lc10",
    ] + %{rpath_links},
)

cc_library(
    name = "frontend",
    includes = ["include/torch/csrc/api/include"],
    deps = [":libtorch"],
)

# The CUDA runtime and NCCL that a wheel's LibTorch loads (one libnccl.so.2
# per process).
cc_library(
    name = "wheel_cuda",
    hdrs = glob(["nvidia/nccl/include/**/*.h", "nvidia/cu13/include/**/*.h", "nvidia/cu13/include/**/*.hpp"]),
    includes = ["nvidia/nccl/include", "nvidia/cu13/include"],
    linkopts = [
        "-L%{lib_dir}/../../nvidia/nccl/lib",
        "-L%{lib_dir}/../../nvidia/cu13/lib",
        "-Wl,-rpath,%{lib_dir}/../../nvidia/nccl/lib",
        "-Wl,-rpath,%{lib_dir}/../../nvidia/cu13/lib",
        "-l:libnccl.so.2",
        "-l:libcudart.so.13",
    ],
)

cc_library(
    name = "cuda",
    deps = [%{cuda}],
)
