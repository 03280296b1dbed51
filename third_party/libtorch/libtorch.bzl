"""A repository for LibTorch, found in one place.

Default: Debian's libtorch-dev (headers in /usr/include, libraries in
/usr/lib/x86_64-linux-gnu). With LIBTORCH_HOME set (`--repo_env=LIBTORCH_HOME=`)
it uses an official LibTorch folder instead (LIBTORCH_HOME/include, /lib).
"""

_HEADER_DIRS = ["ATen", "c10", "caffe2", "torch"]
_LIBRARIES = ["libtorch.so", "libtorch_cpu.so", "libc10.so"]

def _libtorch_repository_impl(ctx):
    home = ctx.os.environ.get("LIBTORCH_HOME", "")
    include_dir = home + "/include" if home else "/usr/include"
    lib_dir = home + "/lib" if home else "/usr/lib/x86_64-linux-gnu"
    for name in _HEADER_DIRS:
        path = ctx.path(include_dir + "/" + name)
        if not path.exists:
            fail("LibTorch headers not found at %s: install libtorch-dev " % path +
                 "(bash tools/setup.sh) or set LIBTORCH_HOME to a LibTorch folder")
        ctx.symlink(path, "include/" + name)
    for name in _LIBRARIES:
        ctx.symlink(lib_dir + "/" + name, "lib/" + name)
    # Debian ships Gloo as its own library (libgloo-dev); an official
    # LibTorch has it inside libtorch_cpu.
    has_libgloo = not home and ctx.path("/usr/lib/libgloo.so").exists

    # Debian's headers sit in /usr/include, which the compiler searches
    # anyway and Bazel treats as the system's (as it does libc's: a new
    # libtorch-dev needs `bazel clean`). Declaring them made every compile
    # action's sandbox link all 8,000 of them: a cold build of
    # //engine/dist/... took 214 s here against 160 s without. Only the C++
    # frontend's, under a folder of their own, are declared. A LibTorch
    # folder elsewhere (LIBTORCH_HOME) is declared whole.
    if home:
        headers = 'glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.cuh"])'
        includes = '["include"]'
    else:
        headers = "[]"
        includes = "[]"
    ctx.template("BUILD", ctx.attr._build_template, {
        "%{lib_dir}": lib_dir,
        "%{gloo_linkopts}": '"-lgloo"' if has_libgloo else "",
        "%{headers}": headers,
        "%{includes}": includes,
    })

libtorch_repository = repository_rule(
    implementation = _libtorch_repository_impl,
    environ = ["LIBTORCH_HOME"],
    attrs = {"_build_template": attr.label(default = Label("//third_party/libtorch:libtorch.BUILD.tpl"))},
    local = True,
)
