"""cc_pch: a header compiled once per configuration, for GCC to load.

The header's .gch sits beside a copy of it in the output tree. Targets that
depend on the cc_pch and compile with `-include <header's name>` find the
copy through the include path and GCC loads the .gch in its place. GCC uses
a .gch only when the command that made it and the one that loads it agree
(the same -f, -O, -m and -D options affecting it, the same compiler), so the
.gch is built with the command line the C++ toolchain gives an ordinary
source of this configuration (position-independent: the build must have
--force_pic), plus `copts`: the options the targets that load it add. With
-Winvalid-pch GCC says when it had to parse the header instead.

Loading a .gch costs a few seconds however little of it a source uses, so it
pays for sources that include most of what it holds.
"""

load("@bazel_tools//tools/build_defs/cc:action_names.bzl", "ACTION_NAMES")
load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")

def _cc_pch_impl(ctx):
    if not ctx.attr.force_pic:
        # Without it Bazel compiles a library both with -fPIC (for what links
        # it dynamically) and without, and one .gch cannot serve both.
        fail("%s: a precompiled header needs --force_pic; add it to the build's options" % ctx.label)
    cc_toolchain = find_cpp_toolchain(ctx)
    features = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )
    deps = cc_common.merge_cc_infos(cc_infos = [dep[CcInfo] for dep in ctx.attr.deps])
    deps_context = deps.compilation_context

    header = ctx.actions.declare_file(ctx.attr.name + "/" + ctx.file.hdr.basename)
    ctx.actions.symlink(output = header, target_file = ctx.file.hdr)
    compiled = ctx.actions.declare_file(header.basename + ".gch", sibling = header)

    variables = cc_common.create_compile_variables(
        cc_toolchain = cc_toolchain,
        feature_configuration = features,
        source_file = header.path,
        output_file = compiled.path,
        user_compile_flags = ctx.fragments.cpp.copts + ctx.fragments.cpp.cxxopts +
                             ctx.attr.copts + ["-x", "c++-header"],
        include_directories = deps_context.includes,
        quote_include_directories = deps_context.quote_includes,
        system_include_directories = deps_context.system_includes,
        preprocessor_defines = deps_context.defines,
        use_pic = True,
        add_legacy_cxx_options = True,
    )
    action = ACTION_NAMES.cpp_compile
    ctx.actions.run(
        executable = cc_common.get_tool_for_action(
            feature_configuration = features,
            action_name = action,
        ),
        arguments = cc_common.get_memory_inefficient_command_line(
            feature_configuration = features,
            action_name = action,
            variables = variables,
        ),
        env = cc_common.get_environment_variables(
            feature_configuration = features,
            action_name = action,
            variables = variables,
        ),
        inputs = depset([header], transitive = [deps_context.headers, cc_toolchain.all_files]),
        outputs = [compiled],
        mnemonic = "CppPrecompileHeader",
        progress_message = "Precompiling %s" % ctx.file.hdr.short_path,
    )

    context = cc_common.create_compilation_context(
        headers = depset([header, compiled]),
        includes = depset([header.dirname]),
    )
    # Its users link what it was compiled against: code that UBSan
    # instruments refers to the typeinfo of the header's classes, so a target
    # that loads it links LibTorch even if its own code uses none.
    return [
        DefaultInfo(files = depset([header, compiled])),
        cc_common.merge_cc_infos(cc_infos = [CcInfo(compilation_context = context), deps]),
    ]

cc_pch = rule(
    implementation = _cc_pch_impl,
    attrs = {
        "hdr": attr.label(allow_single_file = [".h"], mandatory = True),
        "deps": attr.label_list(providers = [CcInfo]),
        "copts": attr.string_list(doc = "The options the targets that load it add to the toolchain's."),
        "force_pic": attr.bool(mandatory = True, doc = "Whether the build has --force_pic (it must)."),
        "_cc_toolchain": attr.label(default = Label("@bazel_tools//tools/cpp:current_cc_toolchain")),
    },
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    incompatible_use_toolchain_transition = True,
)
