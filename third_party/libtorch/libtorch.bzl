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
    ctx.template("BUILD", ctx.attr._build_template, {
        "%{lib_dir}": lib_dir,
        "%{gloo_linkopts}": '"-lgloo"' if has_libgloo else "",
    })

libtorch_repository = repository_rule(
    implementation = _libtorch_repository_impl,
    environ = ["LIBTORCH_HOME"],
    attrs = {"_build_template": attr.label(default = Label("//third_party/libtorch:libtorch.BUILD.tpl"))},
    local = True,
)
