"""Every repository dist-engine needs, declared offline in one call.

A workspace that depends on the engine writes, after declaring it:

    load("@dist_engine//bazel:deps.bzl", "dist_engine_dependencies")
    dist_engine_dependencies()

The engine's own WORKSPACE makes the same call. A repository of the same
name declared before the call is kept (so a consumer may bring its own
LibTorch, Open MPI or CUDA), except for rules_cc, rules_java,
remote_coverage_tools, platforms and rules_proto: Bazel's built-in WORKSPACE
prefix declares those as downloads, so the call always replaces them with
local ones. To put one of those elsewhere, pass its name in `skip` and
declare it after the call.
"""

load("//third_party/libtorch:libtorch.bzl", "libtorch_repository")

# The engine's checkout, found through a file of its root package, so that
# the paths below work from the engine's workspace and from any other.
_ENGINE_ROOT_FILE = Label("//:WORKSPACE")

def _engine_folder_repository_impl(ctx):
    folder = ctx.path(_ENGINE_ROOT_FILE).dirname
    for part in ctx.attr.folder.split("/"):
        folder = folder.get_child(part)
    for child in folder.readdir():
        ctx.symlink(child, child.basename)

# A repository made of a folder of the engine's checkout (local_repository
# wants a path, which a macro run from another workspace cannot know).
_engine_folder_repository = repository_rule(
    implementation = _engine_folder_repository_impl,
    attrs = {"folder": attr.string(mandatory = True)},
    local = True,
)

def _declare_kept(name, skip):
    return name not in skip and not native.existing_rule(name)

def dist_engine_dependencies(skip = []):
    """Declares the repositories the engine needs, under the names its BUILD files use.

    Args:
      skip: names of repositories not to declare here (the caller declares them).
    """

    # Declared by Bazel's own WORKSPACE prefix as downloads: always replaced.
    if "rules_cc" not in skip:
        _engine_folder_repository(name = "rules_cc", folder = "third_party/rules_cc")
    if "remote_coverage_tools" not in skip:
        _engine_folder_repository(
            name = "remote_coverage_tools",
            folder = "third_party/remote_coverage_tools",
        )
    if "rules_java" not in skip:
        native.local_repository(name = "rules_java", path = "/usr/share/bazel/rules/java")
    if "rules_proto" not in skip:
        native.local_repository(name = "rules_proto", path = "/usr/share/bazel/rules/proto")
    if "platforms" not in skip:
        native.local_repository(name = "platforms", path = "/usr/share/bazel/platforms")

    # The engine's own dependencies: kept when declared already.
    if _declare_kept("libtorch", skip):
        # Default Debian's libtorch-dev; --repo_env=LIBTORCH_HOME=/path/to/libtorch
        # for an official one (see third_party/libtorch/libtorch.bzl).
        libtorch_repository(name = "libtorch")
    if _declare_kept("openmpi", skip):
        native.new_local_repository(
            name = "openmpi",
            build_file = str(Label("//third_party/system:openmpi.BUILD")),
            path = "/usr/lib/x86_64-linux-gnu/openmpi",
        )
    if _declare_kept("cuda", skip):
        # The CUDA toolkit with NCCL, used only by --config=cuda builds.
        native.new_local_repository(
            name = "cuda",
            build_file = str(Label("//third_party/system:cuda.BUILD")),
            path = "/usr/local/cuda",
        )
