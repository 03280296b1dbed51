"""The repository @libtorch: the LibTorch the engine builds against.

Two LibTorch builds, each in a package of the repository, and targets at its
root that select one by `--define=libtorch=official` (`--config=torch2`):

- //system: Debian's libtorch-dev (1.13, CPU only): headers in /usr/include,
  libraries in /usr/lib/x86_64-linux-gnu.
- //official: an official LibTorch 2.x: the folder LIBTORCH_HOME names
  (`--repo_env=LIBTORCH_HOME=`, holding include/ and lib/), else the torch
  package of the engine's own virtual environment (.venv, made by
  tools/setup.sh from the pinned PyPI wheel). Beside a wheel's torch/ lie the
  NVIDIA libraries it was built with (nvidia/nccl, nvidia/cu13): the nccl
  backend uses that NCCL, the one LibTorch itself loads.

Root targets: libtorch (ATen, c10, c10d, the pickler), frontend (the C++
frontend: nn, optim), cuda (the CUDA runtime and NCCL), torchrun (the
launcher of the PyTorch that LibTorch comes with: its agent's TCPStore speaks
that LibTorch's protocol), and the config_setting `official`. Neither offers LibTorch's Gloo: the gloo backend runs on the
engine's own (third_party/gloo/README.md).
"""

_HEADER_DIRS = ["ATen", "c10", "caffe2", "torch"]
_LIBRARIES = ["libtorch.so", "libtorch_cpu.so", "libc10.so"]

# The engine's checkout, found through a file of its root package.
_ENGINE_ROOT_FILE = Label("//:WORKSPACE")

_ROOT_BUILD = """
package(default_visibility = ["//visibility:public"])

config_setting(
    name = "official",
    define_values = {"libtorch": "official"},
)

[alias(
    name = name,
    actual = select({
        ":official": "//official:" + name,
        "//conditions:default": "//system:" + name,
    }),
) for name in ["libtorch", "frontend", "cuda", "torchrun"]]
"""

def _system_package(ctx):
    ctx.symlink("/usr/include/torch", "system/include/torch")
    for name in _LIBRARIES:
        ctx.symlink("/usr/lib/x86_64-linux-gnu/" + name, "system/lib/" + name)
    _torchrun(ctx, ctx.path("/usr/bin/torchrun"), "system")
    ctx.template("system/BUILD", ctx.attr._system_template, {})

def _official_home(ctx):
    home = ctx.os.environ.get("LIBTORCH_HOME", "")
    if home:
        return ctx.path(home)
    venv_lib = ctx.path(_ENGINE_ROOT_FILE).dirname.get_child(".venv").get_child("lib")
    if venv_lib.exists:
        for python in venv_lib.readdir():
            torch = python.get_child("site-packages").get_child("torch")
            if torch.exists:
                return torch
    return None

# `package`/torchrun: the given torchrun, or a script that says it is missing.
def _torchrun(ctx, torchrun, package):
    if torchrun.exists:
        ctx.symlink(torchrun, package + "/torchrun")
    else:
        ctx.file(package + "/torchrun", "#!/bin/sh\necho 'no torchrun beside this LibTorch (%s)' >&2\nexit 1\n" % torchrun, executable = True)

def _official_package(ctx):
    home = _official_home(ctx)
    if not home or not home.get_child("include").exists:
        ctx.file("official/BUILD", "fail(%r)\n" % (
            "no official LibTorch: run `bash tools/setup.sh` (it installs the pinned " +
            "torch wheel into .venv), then `bazel shutdown` (this repository is looked " +
            "for again when the server starts); or set --repo_env=LIBTORCH_HOME=/path/to/libtorch"
        ))
        return
    for name in _HEADER_DIRS:
        ctx.symlink(home.get_child("include").get_child(name), "official/include/" + name)
    for name in _LIBRARIES:
        ctx.symlink(home.get_child("lib").get_child(name), "official/lib/" + name)

    # A wheel's torch/ is .venv/lib/pythonX.Y/site-packages/torch; its
    # torchrun is the environment's bin/torchrun.
    _torchrun(ctx, home.dirname.dirname.dirname.dirname.get_child("bin").get_child("torchrun"), "official")

    # A wheel's NVIDIA libraries: LibTorch's own CUDA runtime and NCCL.
    nvidia = home.dirname.get_child("nvidia")
    nvidia_libs = []
    if nvidia.exists:
        for part in nvidia.readdir():
            if part.get_child("lib").exists:
                nvidia_libs.append(str(part.get_child("lib")))
    has_wheel_nccl = nvidia.get_child("nccl").get_child("include").exists
    if has_wheel_nccl:
        ctx.symlink(nvidia.get_child("nccl"), "official/nvidia/nccl")
        ctx.symlink(nvidia.get_child("cu13"), "official/nvidia/cu13")
    ctx.template("official/BUILD", ctx.attr._official_template, {
        "%{lib_dir}": str(home.get_child("lib")),
        # ld resolves libtorch_cuda's NVIDIA libraries here, not in the
        # toolkit's older copies on the system's search path.
        "%{rpath_links}": repr(["-Wl,-rpath-link," + lib for lib in nvidia_libs]),
        "%{cuda}": '":wheel_cuda"' if has_wheel_nccl else '"@cuda"',
    })

def _libtorch_repository_impl(ctx):
    ctx.file("BUILD", _ROOT_BUILD)
    _system_package(ctx)
    _official_package(ctx)

libtorch_repository = repository_rule(
    implementation = _libtorch_repository_impl,
    environ = ["LIBTORCH_HOME"],
    attrs = {
        "_system_template": attr.label(default = Label("//third_party/libtorch:system.BUILD.tpl")),
        "_official_template": attr.label(default = Label("//third_party/libtorch:official.BUILD.tpl")),
    },
    local = True,
)
